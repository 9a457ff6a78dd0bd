"""Self-attention alone, forward + backward, as the length grows: ours in
blocks (`chunk_size`), ours dense, and `keras.layers.MultiHeadAttention`;
time and peak memory.

    python -m benchmarks self_attention            # T = 1024 ... 32768, and causal at 8192
    python -m benchmarks self_attention --smoke    # tiny: checks it runs

The dense contenders hold `[B, H, T, T]` scores, 16 GiB each at T = 32768:
past `DENSE_UP_TO` they are not run (the row says so) rather than swap.
"""

from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from benchmarks import contenders, measure, report

OURS = "keras_attention"
CHUNKED = "keras_attention_chunked"
PEER = "keras_core"
CHUNK_SIZE = 1024
DENSE_UP_TO = 8192  # longer: the dense scores and their gradients pass 4 GiB


def forward_backward(layer, x):
    """A compiled step: a scalar loss of the output, and the gradients for x
    and every weight (summed, so that nothing large is returned)."""

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(tf.square(layer(x)))
        gradients = tape.gradient(loss, [x, *layer.trainable_variables])
        return loss + sum(tf.reduce_sum(g) for g in gradients)

    return lambda: step().numpy()


def make_layer(name, num_heads, model_dim, causal, chunk_size):
    if name == CHUNKED:
        from keras_attention.layers import MultiHeadSelfAttention

        return MultiHeadSelfAttention(num_heads, causal=causal, chunk_size=chunk_size)
    return contenders.self_attention(name, num_heads, model_dim, causal=causal)


ATTENTION_COLUMNS = [
    ("length", "T", "d"),
    ("causal", "causal", ""),
    ("contender", "contender", "s"),
    ("ms", "ms fwd+bwd", ".1f"),
    ("peak_mib", "peak MiB", ".0f"),
    ("memory_measure", "measured by", "s"),
    ("ours_speedup", "ours dense faster", ".2f"),
    ("chunked_speedup", "chunked faster", ".2f"),
    ("chunked_memory_ratio", "chunked/this mem", ".3f"),
    ("skipped", "not run (memory)", ""),
]


REPEATS = 3  # a dense step at T = 8192 takes seconds
FULL = dict(
    lengths=(1024, 2048, 4096, 8192, 16384, 32768),
    causal_lengths=(8192,),
    batch_size=1,
    model_dim=256,
    num_heads=4,
    chunk_size=CHUNK_SIZE,
    dense_up_to=DENSE_UP_TO,
)
SMOKE = dict(
    lengths=(64, 128),
    causal_lengths=(64,),
    batch_size=1,
    model_dim=16,
    num_heads=2,
    chunk_size=16,
    dense_up_to=64,
)


def add_options(parser):
    parser.add_argument("--chunk-size", type=int, help=f"ours in blocks of ({CHUNK_SIZE})")
    parser.add_argument("--plot", help="also draw the memory plot to this PNG")


def run(smoke, repeats, chunk_size=None, plot=None):
    settings = dict(SMOKE if smoke else FULL)
    if chunk_size is not None:
        settings["chunk_size"] = chunk_size
    rows = race(repeats=repeats, **settings)
    if plot:
        Path(plot).parent.mkdir(parents=True, exist_ok=True)
        draw(rows, plot)
        print(f"wrote {plot}")
    return {"rows": rows}


def race(
    lengths,
    batch_size,
    model_dim,
    num_heads,
    repeats,
    causal_lengths=(),
    chunk_size=CHUNK_SIZE,
    dense_up_to=DENSE_UP_TO,
):
    """Rows per (length, causal, contender): ms, peak MiB and the ratios to
    ours dense (`ours_speedup`: > 1, ours dense is faster) and to the chunked
    path (`chunked_speedup`, `chunked_memory_ratio`: < 1, chunked needs
    less)."""
    rows = []
    cases = [(length, False) for length in lengths] + [(n, True) for n in causal_lengths]
    for length, causal in cases:
        keras.utils.set_random_seed(0)
        x = np.random.default_rng(0).normal(size=(batch_size, length, model_dim))
        x = tf.constant(x.astype("float32"))
        expected = [CHUNKED, OURS] if causal else [CHUNKED, OURS, PEER]
        names = expected if length <= dense_up_to else [CHUNKED]
        steps = {}
        for name in names:
            layer = make_layer(name, num_heads, model_dim, causal, chunk_size)
            layer(x[:, :2])  # build
            steps[name] = forward_backward(layer, x)
        # The longest runs take many seconds a step: fewer repeats there.
        seconds = measure.race(steps, repeats if length <= 8192 else 1, warmup=1)
        memory, how = {}, {}
        for name, step in steps.items():
            memory[name], how[name] = measure.peak_memory(step)
        for name in steps:
            row = {
                "length": length,
                "causal": causal,
                "batch_size": batch_size,
                "contender": name,
                "chunk_size": chunk_size if name == CHUNKED else None,
                "ms": 1000 * seconds[name],
                "peak_mib": memory[name],
                "memory_measure": how[name],
                "chunked_speedup": seconds[name] / seconds[CHUNKED],
                "chunked_memory_ratio": _ratio(memory[CHUNKED], memory[name]),
            }
            if OURS in steps:
                row["ours_speedup"] = seconds[name] / seconds[OURS]
                row["ours_memory_ratio"] = _ratio(memory[OURS], memory[name])
            rows.append(row)
        for name in expected[len(names) :]:  # not run: "skipped", in the table too
            rows.append({"length": length, "causal": causal, "contender": name, "skipped": True})
    return rows


def _ratio(memory, other):
    """`memory / other`, or None when either was not measured or `other` is 0."""
    return memory / other if memory is not None and other else None


def draw(rows, path):
    """Peak memory against length, one line per contender (log-log)."""
    lines = [
        (
            label,
            [
                (row["length"], row["peak_mib"])
                for row in rows
                if row["contender"] == name
                and not row["causal"]
                and row.get("peak_mib") is not None
            ],
        )
        for name, label in ((CHUNKED, "ours, chunked"), (OURS, "ours, dense"), (PEER, "Keras core"))
    ]
    report.plot_against_length(
        lines,
        "peak memory, forward + backward (MiB)",
        "Self-attention, B=1, d_model 256, 4 heads",
        path,
        dpi=100,
        grid=True,
    )


TABLES = [("self-attention alone, forward + backward", "rows", ATTENTION_COLUMNS)]


if __name__ == "__main__":
    from benchmarks import section

    section.main("self_attention")
