"""Today's attention, measured: the grouped-query KV cache, generation
against KerasHub's Llama, the sliding window at long lengths, and how far
each kind of positions carries past the training length.

    python -m benchmarks modern_attention            # every part, full sizes
    python -m benchmarks modern_attention --smoke    # tiny sizes: checks it runs
    python -m benchmarks modern_attention --parts window   # the window alone

1. **KV-cache memory** of grouped-query against multi-head attention at
   T = 8,192: the bytes of the caches the decoder allocates
   (`initial_caches`), for 8 query heads and 8, 2 or 1 key/value heads.
2. **Generation** (greedy, to the full length, batch of 8): our `modern`
   preset against KerasHub's `LlamaCausalLM` of the same sizes, built from
   a config (random weights), each with and without XLA; "ours faster" is
   KerasHub's best over ours (see `benchmarks/generation.py`).
3. **Sliding window** of W = 512 at T = 4,096 to 32,768, forward +
   backward: our self-attention in blocks of 512 (`chunk_size`), causal,
   with the window against without it (full causal blocks); drawn in
   `benchmarks/sliding_window.png`.
4. **Length extrapolation**: the language-model recipe trained on windows of
   128 characters of the dates corpus (`--pack-texts`), with sinusoidal,
   rotary and ALiBi positions, then the per-token perplexity of held-out
   windows of 128 and of 512 characters.
"""

import json
import math
import tempfile
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from benchmarks import generation, measure, report
from benchmarks.self_attention import forward_backward
from keras_attention.layers import MultiHeadSelfAttention
from keras_attention.models import build_transformer_lm

# --- 1. KV-cache memory ---------------------------------------------------

CACHE_SIZES = dict(num_layers=2, model_dim=512, num_heads=8, intermediate_dim=1408)
SMOKE_CACHE_SIZES = dict(num_layers=1, model_dim=16, num_heads=4, intermediate_dim=32)


def kv_cache_rows(length, sizes=CACHE_SIZES, key_value_heads=(None, 2, 1)):
    """Bytes of the caches a decoder of `sizes` allocates for one sequence
    of `length`, for each number of key/value heads (None: one a head)."""
    rows = []
    for heads in key_value_heads:
        model = build_transformer_lm(100, preset="modern", **sizes, num_key_value_heads=heads)
        caches = model.decoder.initial_caches(1, length)
        size = sum(np.asarray(t).nbytes for cache in caches for t in cache)
        rows.append(
            {
                "length": length,
                "num_heads": sizes["num_heads"],
                "num_key_value_heads": heads or sizes["num_heads"],
                "cache_mib": size / 2**20,
            }
        )
    for row in rows:
        row["vs_multi_head"] = row["cache_mib"] / rows[0]["cache_mib"]
        row["expected"] = row["num_key_value_heads"] / row["num_heads"]
    return rows


# --- 2. Generation against KerasHub's Llama ---------------------------------


# --- 3. The sliding window at long lengths ----------------------------------


def window_rows(lengths, window_size, chunk_size, model_dim, num_heads, repeats):
    """Forward + backward of causal self-attention in blocks, with and
    without a window, at each length: ms, and how much faster the window is."""
    rows = []
    for length in lengths:
        x = np.random.default_rng(0).normal(size=(1, length, model_dim))
        x = tf.constant(x, "float32")
        steps = {}
        for name, window in (("full causal", None), ("window", window_size)):
            keras.utils.set_random_seed(0)
            layer = MultiHeadSelfAttention(
                num_heads, causal=True, chunk_size=chunk_size, sliding_window=window
            )
            layer(x[:, :2])  # build
            steps[name] = forward_backward(layer, x)
        # Full causal attention at 32,768 takes many seconds a call: fewer repeats there.
        seconds = measure.race(steps, repeats if length <= 8192 else 1, warmup=1)
        for name in steps:
            rows.append(
                {
                    "length": length,
                    "window_size": window_size if name == "window" else None,
                    "chunk_size": chunk_size,
                    "contender": name,
                    "ms": 1000 * seconds[name],
                    "window_faster": seconds[name] / seconds["window"],
                }
            )
    return rows


def plot_window(rows, path):
    """Forward + backward time against length, full causal and windowed (log-log)."""
    window = next(row["window_size"] for row in rows if row["contender"] == "window")
    lines = [
        (
            name if name == "full causal" else f"sliding window, W = {window}",
            [(row["length"], row["ms"]) for row in rows if row["contender"] == name],
        )
        for name in ("full causal", "window")
    ]
    report.plot_against_length(
        lines, "ms, forward + backward", "Causal self-attention in blocks", path
    )


# --- 4. Length extrapolation ------------------------------------------------

POSITIONS = ("sinusoidal", "rotary", "alibi")


def extrapolation_rows(
    train_length, test_lengths, train_examples, epochs, folder, positions=POSITIONS
):
    """Trains the language-model recipe on packed windows of `train_length`
    tokens once per kind of positions, then the perplexity of held-out
    windows of each of `test_lengths` (the test split, packed the same
    way)."""
    from keras_attention.data import datasets
    from keras_attention.data.pipeline import language_model_batches
    from keras_attention.data.tokenizers import CharacterTokenizer, SubwordTokenizer
    from keras_attention.recipes import language_model
    from keras_attention.recipes.training import count_batches
    from keras_attention.run_files import RunFiles

    rows = []
    for kind in positions:
        output_dir = Path(folder) / kind
        language_model.main(
            [
                *("--data-dir", str(Path(folder) / "tfds")),
                *("--output-dir", str(output_dir)),
                "--pack-texts",
                *("--max-input-length", str(train_length)),
                *("--train-examples", str(train_examples)),
                *("--epochs", str(epochs)),
                *("--batch-size", "16"),
                *("--model-overrides", json.dumps({"positions": kind})),
                "--no-export",
            ]
        )
        config = json.loads(RunFiles(output_dir).config.read_text())
        model = keras.saving.load_model(RunFiles(output_dir).model)
        tokenizer_class = {"character": CharacterTokenizer, "subword": SubwordTokenizer}
        tokenizer = tokenizer_class[config["tokenizer"]].load(
            RunFiles(output_dir).vocabulary("text", config["tokenizer"])
        )
        model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        row = {"positions": kind, "train_length": train_length}
        for length in test_lengths:
            texts = datasets.plain_texts(config["dataset"], "test", config["data_dir"])
            batches = language_model_batches(
                texts, tokenizer, pack=True, max_length=length, batch_size=8
            )
            batches = batches.take(16)
            loss = model.evaluate(
                batches, steps=count_batches(batches), verbose=0, return_dict=True
            )["loss"]
            row[f"perplexity_{length}"] = math.exp(loss)
        rows.append(row)
    return rows


# --- The whole section -------------------------------------------------------

FULL = dict(
    cache_length=8192,
    new_tokens=[256, 2048],
    window=dict(
        lengths=[4096, 8192, 16384, 32768],
        window_size=512,
        chunk_size=512,
        model_dim=256,
        num_heads=4,
    ),
    extrapolation=dict(train_length=128, test_lengths=[128, 512], train_examples=8000, epochs=2),
)
SMOKE = dict(
    cache_length=64,
    new_tokens=[4, 8],
    window=dict(lengths=[128, 256], window_size=32, chunk_size=32, model_dim=16, num_heads=2),
    # One kind of positions: the three differ only in `--model-overrides`.
    extrapolation=dict(
        train_length=32, test_lengths=[32, 64], train_examples=200, epochs=1, positions=["alibi"]
    ),
)


PARTS = ("kv_cache", "generation", "window", "extrapolation")


REPEATS = 3
TABLES = []  # each part's table is printed as it is measured (it takes minutes)
PLOT = "benchmarks/sliding_window.png"


def add_options(parser):
    parser.add_argument(
        "--plot", help=f"where the window's figure goes ({PLOT}; none with --smoke)"
    )
    parser.add_argument(
        "--parts",
        nargs="+",
        choices=PARTS,
        default=list(PARTS),
        help="which parts to run (default: all four; the generation and the "
        "full causal blocks at 32,768 are most of the 38 minutes)",
    )


def run(smoke, repeats, plot=None, parts=PARTS):
    """The rows of each part in `parts` (all four by default: `{"kv_cache",
    "generation", "window", "extrapolation"}`), each printed as a table as
    it is measured; the window's figure drawn to `plot` (by default, but
    for a smoke run, `PLOT`)."""
    settings = SMOKE if smoke else FULL
    plot = plot or (None if smoke else PLOT)
    results = {}

    def show(part, rows):
        results[part] = rows
        title, columns = report.modern_attention_table(part, results)
        report.print_table(title, rows, columns)

    if "kv_cache" in parts:
        cache_sizes = SMOKE_CACHE_SIZES if smoke else CACHE_SIZES
        show("kv_cache", kv_cache_rows(settings["cache_length"], cache_sizes))
    if "generation" in parts:
        show(
            "generation",
            generation.race(
                settings["new_tokens"],
                generation.SMOKE_BATCH_SIZE if smoke else generation.BATCH_SIZE,
                repeats,
                generation.SMOKE_LLAMA_SIZES if smoke else generation.LLAMA_SIZES,
                peer="llama",
            ),
        )
    if "window" in parts:
        show("window", window_rows(**settings["window"], repeats=repeats))
        if plot is not None:
            plot_window(results["window"], plot)
            print(f"wrote {plot}")
    if "extrapolation" in parts:
        with tempfile.TemporaryDirectory() as folder:
            show("extrapolation", extrapolation_rows(**settings["extrapolation"], folder=folder))
    return results


if __name__ == "__main__":
    from benchmarks import section

    section.main("modern_attention")
