"""The results of `benchmarks.run` as Markdown tables, for benchmarks/README.md.

python -m benchmarks.report benchmarks/results.json
"""

import argparse
import json


def print_table(title, rows, columns):
    """`columns`: (key, header, format) triples; a missing or None value is blank."""
    print(f"\n{title}")
    table = [[header for _, header, _ in columns]]
    for row in rows:
        table.append(
            ["" if row.get(key) is None else format(row[key], spec) for key, _, spec in columns]
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    for line in table:
        print("  ".join(f"{cell:>{width}}" for cell, width in zip(line, widths, strict=True)))


def markdown_table(rows, columns):
    """`print_table`'s table in Markdown."""
    return table(
        [header for _, header, _ in columns],
        [
            ["" if row.get(k) is None else format(row[k], spec) for k, _, spec in columns]
            for row in rows
        ],
    )


def table(headers, rows):
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _mib(value):
    return "not measured" if value is None else f"{value:.0f}"


def training_table(rows):
    return table(
        ["dropout", "XLA", "contender", "ms/step", "tokens/s", "GFLOP/s", "of peak", "ours faster"],
        [
            [
                f"{row['dropout']:.1f}",
                "yes" if row["xla"] else "no",
                row["contender"],
                f"{row['ms_per_step']:.0f}",
                f"{row['tokens_per_s']:.0f}",
                f"{row['gflops']:.1f}",
                f"{row['share_of_peak']:.0%}",
                f"{row['ours_speedup']:.2f}x",
            ]
            for row in rows
        ],
    )


def xla_bound(results, kind):
    """How much faster than KerasHub (XLA, the lowest dropout measured) any
    implementation could be if it did nothing but its matrix multiplications,
    each at the speed of XLA's own large matmul."""
    hub = min(
        (
            row
            for row in results[f"{kind}_training_step"]
            if row["contender"] == "keras_hub" and row["xla"]
        ),
        key=lambda row: row["dropout"],
    )
    flops = hub["gflops"] * hub["ms_per_step"] * 1e6  # GFLOP/s x ms
    matmuls_only_ms = flops / (hub["xla_matmul_gflops"] * 1e6)
    return hub["ms_per_step"] / matmuls_only_ms


def peaks(rows, size):
    """The matmul peaks timed in each race of a training-step table."""
    seen = {}
    for row in rows:
        seen[row["dropout"]] = (row["matmul_peak_gflops"], row["xla_matmul_gflops"])
    return (
        "Matmul peak timed in the same race ("
        + "; ".join(
            f"dropout {dropout:.1f}: `tf.matmul` {size}³ **{peak:.1f} GFLOP/s**, "
            f"XLA's {xla:.1f} ({xla / peak:.0%})"
            for dropout, (peak, xla) in seen.items()
        )
        + ")."
    )


def describe(machine):
    """One line for a report: `CPU: ... (AVX flags: ...), N cores, oneDNN ...`.
    A file whose machine was filled in later from git has only the CPU as
    described then and the cores."""
    if "avx_flags" not in machine:
        return f"CPU: {machine['cpu']}, {machine['cpus']} cores (flags and oneDNN not recorded)"
    return (
        f"CPU: {machine['cpu']} (AVX flags: {' '.join(machine['avx_flags']) or 'none'}), "
        f"{machine['cpus']} cores, TF_ENABLE_ONEDNN_OPTS={machine['TF_ENABLE_ONEDNN_OPTS']}"
    )


def report(results):
    parts = [
        *([describe(results["machine"])] if "machine" in results else []),
        "An encoder step that did nothing but its matrix multiplications, each at "
        "the speed of XLA's own large matmul, would be "
        f"**{xla_bound(results, 'encoder'):.2f}x** KerasHub's XLA step without dropout: "
        "the most any implementation could gain over it under XLA.",
        "#### Encoder training step (2 layers)",
        peaks(results["encoder_training_step"], results["matmul_size"]),
        training_table(results["encoder_training_step"]),
        "#### Decoder training step (2 layers, cross-attention)",
        peaks(results["decoder_training_step"], results["matmul_size"]),
        training_table(results["decoder_training_step"]),
        "#### Self-attention alone, forward + backward (B=1, d_model=256, 4 heads)",
        table(
            [
                "T",
                "causal",
                "contender",
                "ms",
                "peak MiB",
                "measured by",
                "chunked faster",
                "chunked/this memory",
            ],
            [
                [
                    str(row["length"]),
                    "yes" if row["causal"] else "",
                    row["contender"],
                    "not run" if row.get("skipped") else f"{row['ms']:.1f}",
                    "" if row.get("skipped") else _mib(row["peak_mib"]),
                    row.get("memory_measure", ""),
                    "" if row.get("skipped") else f"{row['chunked_speedup']:.2f}x",
                    ""
                    if row.get("chunked_memory_ratio") is None
                    else f"{row['chunked_memory_ratio']:.3f}",
                ]
                for row in results["self_attention"]
            ],
        ),
        "#### Greedy decoding, with and without the KV cache (tiny Transformer, batch 8)",
        table(
            ["output tokens", "cached s", "uncached s", "uncached/cached"],
            [
                [
                    str(row["output_tokens"]),
                    f"{row['cached_s']:.3f}",
                    f"{row['uncached_s']:.3f}",
                    f"{row['uncached_over_cached']:.2f}x",
                ]
                for row in results["greedy_decoding"]
            ],
        ),
        "#### Exported `serving_default` against in-process decoding",
        table(
            [
                "batch",
                "exported ms",
                "in-process ms",
                "in-process, static batch ms",
                "`translate_with_options` ms",
                "exported/in-process",
            ],
            [
                [
                    str(row["batch_size"]),
                    f"{row['exported_ms']:.1f}",
                    f"{row['in_process_ms']:.1f}",
                    f"{row['in_process_static_ms']:.1f}",
                    f"{row['exported_with_options_ms']:.1f}",
                    f"{row['exported_over_in_process']:.2f}x",
                ]
                for row in results["serving"]
            ],
        ),
        "#### Greedy generation, decoder-only, against KerasHub `GPT2CausalLM` "
        "(batch 8, 8-token prompts; tokens per second, and each rate over its own at 32)",
        table(
            [
                "new tokens",
                "ours",
                "ours XLA",
                "KerasHub",
                "KerasHub XLA",
                "ours faster (best / best)",
                "ours / at 32",
                "ours XLA / at 32",
                "KerasHub / at 32",
                "KerasHub XLA / at 32",
            ],
            [
                [
                    str(row["new_tokens"]),
                    f"{row['ours_tokens_per_s']:.0f}",
                    f"{row['ours_xla_tokens_per_s']:.0f}",
                    f"{row['keras_hub_tokens_per_s']:.0f}",
                    f"{row['keras_hub_xla_tokens_per_s']:.0f}",
                    f"{row['ours_over_keras_hub']:.2f}x",
                    f"{row['ours_rate_vs_first']:.2f}",
                    f"{row['ours_xla_rate_vs_first']:.2f}",
                    f"{row['keras_hub_rate_vs_first']:.2f}",
                    f"{row['keras_hub_xla_rate_vs_first']:.2f}",
                ]
                for row in results.get("generation", [])
            ],
        ),
    ]
    for part in MODERN_ATTENTION:
        if part in results.get("modern_attention", {}):
            title, columns = modern_attention_table(part, results["modern_attention"])
            parts += [f"#### {title}", markdown_table(results["modern_attention"][part], columns)]
    return "\n\n".join(parts) + "\n"


# The section of `benchmarks.modern_attention`: part -> (title, columns).
MODERN_ATTENTION = {
    "kv_cache": (
        "KV cache at T = {length}, grouped-query against multi-head (bytes the decoder allocates)",
        [
            ("length", "T", "d"),
            ("num_heads", "query heads", "d"),
            ("num_key_value_heads", "key/value heads", "d"),
            ("cache_mib", "KV cache MiB", ".1f"),
            ("vs_multi_head", "vs multi-head", ".3f"),
            ("expected", "H_kv / H", ".3f"),
        ],
    ),
    "generation": (
        "Greedy generation, our `modern` preset against KerasHub `LlamaCausalLM` "
        "(same sizes, random weights; batch {batch_size}, 8-token prompts; tokens per second)",
        [
            ("new_tokens", "new tokens", "d"),
            ("ours_tokens_per_s", "ours", ".0f"),
            ("ours_xla_tokens_per_s", "ours XLA", ".0f"),
            ("keras_hub_tokens_per_s", "KerasHub", ".0f"),
            ("keras_hub_xla_tokens_per_s", "KerasHub XLA", ".0f"),
            ("ours_over_keras_hub", "ours faster (best / best)", ".2f"),
        ],
    ),
    "window": (
        "Causal self-attention in blocks, forward + backward: a sliding window against none",
        [
            ("length", "T", "d"),
            ("contender", "attention", "s"),
            ("window_size", "W", ""),
            ("chunk_size", "block", "d"),
            ("ms", "ms fwd+bwd", ".0f"),
            ("window_faster", "window faster", ".1f"),
        ],
    ),
    "extrapolation": (
        "Length extrapolation: trained on windows of {train_length} characters, "
        "per-token perplexity of held-out windows",
        None,  # one column per test length, below
    ),
}


def modern_attention_table(part, results):
    """(title, columns) of one part of the modern-attention section."""
    title, columns = MODERN_ATTENTION[part]
    rows = results[part]
    if part == "extrapolation":
        lengths = sorted(int(k.split("_")[1]) for k in rows[0] if k.startswith("perplexity_"))
        columns = [("positions", "positions", "s")] + [
            (f"perplexity_{n}", f"perplexity at {n}", ".3f") for n in lengths
        ]
    return title.format(**rows[0]), columns


def plot_against_length(lines, ylabel, title, path, dpi=120, grid=False):
    """A log-log figure of a measure against the sequence length, written to
    `path`: `lines` is a list of (label, [(length, value), ...]); a line
    with no points is left out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 4))
    for label, points in lines:
        if points:
            axes.plot(*zip(*points, strict=True), marker="o", label=label)
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xlabel("sequence length T")
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    if grid:
        axes.grid(True, which="both", alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=dpi)
    plt.close(figure)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", help="the JSON file `benchmarks.run` wrote")
    args = parser.parse_args(argv)
    with open(args.results) as file:
        print(report(json.load(file)), end="")


if __name__ == "__main__":
    main()
