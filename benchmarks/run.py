"""Speed and memory, side by side with the peers, in one run.

    python -m benchmarks run                  # the full run (about 7 minutes on 2 cores)
    python -m benchmarks run --smoke          # tiny sizes (about a minute): checks it all runs
    python -m benchmarks run --encoder-only   # section 2 alone, TensorFlow and JAX

A section (`benchmarks/section.py`) that runs others: prints one table per
part and writes every figure to one JSON file (`--json`, by default
`benchmarks/results.json`; none with --smoke). Parts:

1. (in every training-step race) the matmul peak: float32 GFLOP/s of one
   large `tf.matmul`, the ceiling, and of the same matmul compiled by XLA.
2. encoder training step: 2 layers at B=32, T=128, d_model=256, 4 heads,
   FF 1024, float32; ours, KerasHub's `TransformerEncoder`, and a block of
   `keras.layers.MultiHeadAttention`; each with and without XLA, without
   dropout and with dropout 0.1. Then the same race on Keras's JAX backend
   (`benchmarks.on_jax`, in its own process, right after).
3. decoder training step: the same with causal self-attention and
   cross-attention to a 128-token context (KerasHub's `TransformerDecoder`).
4. self-attention alone, forward + backward, T = 1024 ... 32768 and causal
   at 8192: time and the peak memory the step adds, ours in blocks
   (`chunk_size`), ours dense and `keras.layers.MultiHeadAttention`
   (`benchmarks.self_attention`; the dense ones only up to T = 8192).
5. greedy decoding with and without the KV cache (`benchmarks.decoding`).
6. the exported `serving_default` (loaded SavedModel) against the same
   decoding called in process, for batches of 1 and 32 short inputs, and
   the export's `translate_with_options`.
7. decoder-only greedy generation, batch 8, 8-token prompts, 32 ... 256 new
   tokens: ours against KerasHub's `GPT2CausalLM` of the same sizes
   (`benchmarks.generation`).
8. the modern attention options: grouped-query heads, the sliding window,
   Llama's blocks, length extrapolation (`benchmarks.modern_attention`).

The figures of parts 4 and 8 (`attention_memory.png`,
`sliding_window.png`) are drawn beside the JSON file.

Every time is a median over `--repeats` calls after warm-up calls; contenders
in one section take turns, call by call, so a slow minute on a shared machine
hits them alike. Ratios are what carry over between machines.
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

import keras_attention.decoding
from benchmarks import (
    contenders,
    decoding,
    generation,
    measure,
    modern_attention,
    report,
    section,
    self_attention,
)
from keras_attention import export
from keras_attention.data.tokenizers import CharacterTokenizer, token_ids
from keras_attention.models import build_transformer

FULL = dict(batch_size=32, length=128, model_dim=256, num_heads=4, intermediate_dim=1024)
SMOKE = dict(batch_size=2, length=8, model_dim=16, num_heads=2, intermediate_dim=32)
NUM_LAYERS = 2
# No dropout (the compute alone), then the paper's rate, applied by every
# contender to the same activations (see `contenders`).
DROPOUTS = (0.0, 0.1)
OURS = "keras_attention"


def encoder_flops(batch_size, length, model_dim, num_heads, intermediate_dim):
    """Multiply-adds x 2 of one training step (forward, then backward at
    twice the forward's cost), over `NUM_LAYERS` layers."""
    tokens, d = batch_size * length, model_dim
    projections = 2 * tokens * 4 * d * d  # Q, K, V and the output projection
    attention = 2 * 2 * batch_size * length * length * d  # Q K^T and weights V
    feed_forward = 2 * 2 * tokens * d * intermediate_dim
    return 3 * NUM_LAYERS * (projections + attention + feed_forward)


def decoder_flops(batch_size, length, model_dim, num_heads, intermediate_dim):
    """As `encoder_flops`, plus cross-attention to a context of `length` tokens."""
    tokens, d = batch_size * length, model_dim
    cross = 2 * tokens * 4 * d * d + 2 * 2 * batch_size * length * length * d
    return encoder_flops(batch_size, length, model_dim, num_heads, intermediate_dim) + (
        3 * NUM_LAYERS * cross
    )


def training_model(kind, contender, sizes, dropout, jit_compile):
    """`NUM_LAYERS` blocks of `contender` on float inputs, MSE loss, Adam."""
    shape = (sizes["length"], sizes["model_dim"])
    x = keras.Input(shape)
    inputs = [x]
    if kind == "decoder":
        context = keras.Input(shape)
        inputs.append(context)
    for _ in range(NUM_LAYERS):
        block = contenders.block(
            kind, contender, sizes["num_heads"], sizes["intermediate_dim"], dropout
        )
        x = block(x) if kind == "encoder" else block(x, context)
    model = keras.Model(inputs, x)
    model.compile(optimizer=keras.optimizers.Adam(1e-4), loss="mse", jit_compile=jit_compile)
    return model


def random_inputs(sizes, count, seed=0):
    shape = (sizes["batch_size"], sizes["length"], sizes["model_dim"])
    random = np.random.default_rng(seed)
    return [tf.constant(random.normal(size=shape).astype("float32")) for _ in range(count)]


def training_step(kind, sizes, dropouts, repeats, matmul_size):
    """Rows: one per dropout rate, XLA setting and contender, with ratios
    against ours at the same rate and XLA setting. The matmul peak runs in
    each race too, so that "of peak" compares figures timed side by side."""
    keras.utils.set_random_seed(0)
    x, context, y = random_inputs(sizes, 3)
    inputs = x if kind == "encoder" else [x, context]
    flops = (encoder_flops if kind == "encoder" else decoder_flops)(**sizes)
    peaks = {jit_compile: measure.matmul(matmul_size, jit_compile) for jit_compile in (False, True)}
    rows = []
    for dropout in dropouts:
        steps = {("matmul", jit_compile): function for jit_compile, (function, _) in peaks.items()}
        for jit_compile in (True, False):
            for contender in contenders.CONTENDERS:
                model = training_model(kind, contender, sizes, dropout, jit_compile)
                steps[contender, jit_compile] = lambda model=model: model.train_on_batch(inputs, y)
        seconds = measure.race(steps, repeats)
        peak, xla_peak = (peaks[j][1] / seconds["matmul", j] / 1e9 for j in (False, True))
        print(f"{kind}, dropout {dropout}: matmul peak {peak:.1f} GFLOP/s, XLA's {xla_peak:.1f}")
        for (contender, jit_compile), time in seconds.items():
            if contender == "matmul":
                continue
            row = training_row(kind, contender, dropout, jit_compile, sizes, flops, time)
            row["ours_speedup"] = time / seconds[OURS, jit_compile]
            rows.append(
                {
                    **row,
                    "matmul_peak_gflops": peak,
                    "xla_matmul_gflops": xla_peak,
                    "share_of_peak": row["gflops"] / peak,
                }
            )
    return rows


def training_row(kind, contender, dropout, jit_compile, sizes, flops, seconds):
    """One contender's training step in a table of rows; `ours_speedup`
    (> 1: ours is faster than this contender at the same dropout and XLA
    setting) is the caller's to add."""
    return {
        "block": kind,
        "dropout": dropout,
        "xla": jit_compile,
        "contender": contender,
        "ms_per_step": 1000 * seconds,
        "tokens_per_s": sizes["batch_size"] * sizes["length"] / seconds,
        "gflops": flops / seconds / 1e9,
    }


def encoder_step_on_jax(sizes, dropouts, repeats, tensorflow_rows):
    """The encoder race again on Keras's JAX backend, in a process of its own
    (`benchmarks.on_jax`), right after TensorFlow's. Each row gets
    `jax_speedup`: the same contender's step with XLA on TensorFlow over
    its step on JAX (> 1: faster on JAX)."""
    settings = dict(sizes=sizes, dropouts=list(dropouts), repeats=repeats)
    with tempfile.TemporaryDirectory() as folder:
        output = Path(folder) / "rows.json"
        subprocess.run(
            [sys.executable, "-m", "benchmarks.on_jax", json.dumps(settings), str(output)],
            env={**os.environ, "KERAS_BACKEND": "jax"},
            check=True,
        )
        rows = json.loads(output.read_text())
    on_tensorflow = {
        (row["contender"], row["dropout"]): row["ms_per_step"]
        for row in tensorflow_rows
        if row["xla"]
    }
    for row in rows:
        row["jax_speedup"] = on_tensorflow[row["contender"], row["dropout"]] / row["ms_per_step"]
    return rows


def serving_rows(batch_sizes, max_length, repeats):
    """The exported `serving_default`, loaded back in this process, against
    the same steps (tokenise, beam search with beam 1, detokenise) as an
    in-process `tf.function` that takes any batch size, as the export does
    (and, for comparison, one traced for the batch's own size). An untrained
    tiny Transformer, exported once for every batch size: all decode the
    same tokens, so the ratio is the cost of the export itself. Another
    contender is the export's `translate_with_options`, every row asking for
    the same options: what taking them per request costs."""
    keras.utils.set_random_seed(0)
    tokenizer = CharacterTokenizer("0123456789")
    model = build_transformer(tokenizer.vocabulary_size, preset="tiny")

    def translate(texts):
        ids = token_ids(tokenizer, texts, max_length)
        output_ids, _ = keras_attention.decoding.beam_search(model, ids, max_length, 1)
        return tokenizer.detokenize(output_ids)

    # What the export wraps: one graph for any batch size, as a server needs.
    in_process = tf.function(translate, input_signature=[tf.TensorSpec([None], tf.string)])
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        path = export.export_model(
            model, folder, "bench", tokenizer, tokenizer, max_input_length=max_length, beam_size=1
        )
        signatures = tf.saved_model.load(str(path)).signatures
        for batch_size in batch_sizes:
            random = np.random.default_rng(0)
            texts = tf.constant(
                ["".join(map(str, random.integers(0, 10, 8))) for _ in range(batch_size)]
            )
            # For comparison, a graph traced for this very batch size (static
            # shapes that Grappler can fold): faster than any graph that takes
            # any batch.
            in_process_static = tf.function(translate)
            seconds = race_serving(
                signatures, in_process, in_process_static, texts, max_length, repeats
            )
            rows.append(
                {
                    "batch_size": batch_size,
                    "max_length": max_length,
                    "exported_ms": 1000 * seconds["exported"],
                    "in_process_ms": 1000 * seconds["in_process"],
                    "in_process_static_ms": 1000 * seconds["in_process_static"],
                    "exported_with_options_ms": 1000 * seconds["exported_with_options"],
                    "exported_over_in_process": seconds["exported"] / seconds["in_process"],
                }
            )
    return rows


def race_serving(signatures, in_process, in_process_static, texts, max_length, repeats):
    """Seconds per call of each way to translate `texts`, once all four are
    checked to give the same translations."""
    batch_size = int(texts.shape[0])
    options = dict(
        beam_size=tf.ones([batch_size], tf.int32),
        max_decoding_length=tf.fill([batch_size], max_length),
    )

    def serving_default():
        return signatures["serving_default"](text=texts)["translation"].numpy()

    def with_options():
        return signatures["translate_with_options"](text=texts, **options)["translation"]

    expected = list(in_process(texts).numpy())
    if list(serving_default()) != expected or list(with_options().numpy()) != expected:
        raise RuntimeError("The export and the in-process function translate differently.")
    return measure.race(
        {
            "exported": serving_default,
            "in_process": lambda: in_process(texts).numpy(),
            "in_process_static": lambda: in_process_static(texts).numpy(),
            "exported_with_options": lambda: with_options().numpy(),
        },
        repeats,
    )


TRAINING_COLUMNS = [
    ("dropout", "dropout", ".1f"),
    ("xla", "XLA", ""),
    ("contender", "contender", "s"),
    ("ms_per_step", "ms/step", ".0f"),
    ("tokens_per_s", "tokens/s", ".0f"),
    ("gflops", "GFLOP/s", ".1f"),
    ("share_of_peak", "of peak", ".0%"),
    ("ours_speedup", "ours faster", ".2f"),
]
JAX_COLUMNS = [
    ("dropout", "dropout", ".1f"),
    ("contender", "contender", "s"),
    ("ms_per_step", "ms/step", ".0f"),
    ("tokens_per_s", "tokens/s", ".0f"),
    ("gflops", "GFLOP/s", ".1f"),
    ("ours_speedup", "ours faster", ".2f"),
    ("jax_speedup", "JAX faster than TF+XLA", ".2f"),
]


SERVING_COLUMNS = [
    ("batch_size", "batch", "d"),
    ("exported_ms", "exported ms", ".1f"),
    ("in_process_ms", "in-process ms", ".1f"),
    ("in_process_static_ms", "in-process, static batch ms", ".1f"),
    ("exported_with_options_ms", "translate_with_options ms", ".1f"),
    ("exported_over_in_process", "exported/in-process", ".2f"),
]


# A section (`benchmarks/section.py`) that prints each table as it is
# measured (the whole run takes minutes), as do the sections it runs.
REPEATS = 10
RESULTS_FILE = "benchmarks/results.json"  # its JSON file, unless --json says
TABLES = []
WANTS_RESULTS_PATH = True  # its figures go beside the JSON file


def add_options(parser):
    parser.add_argument(
        "--encoder-only",
        action="store_true",
        help="only the encoder training step, on TensorFlow and on JAX (a few minutes)",
    )


def run(smoke, repeats, encoder_only=False, results_path=None):
    """Every part's figures; the memory and sliding-window figures are
    drawn beside `results_path` (none where no JSON file is written)."""
    sizes = SMOKE if smoke else FULL
    results = dict(sizes=sizes, num_layers=NUM_LAYERS)
    results["versions"] = {"tensorflow": tf.__version__, "keras": keras.__version__}
    matmul_size = 256 if smoke else 4096
    results["matmul_size"] = matmul_size
    plots = Path(results_path).parent if results_path else None

    def show(key, title, rows, columns):
        results[key] = rows
        report.print_table(title, rows, columns)

    # The smoke run's code paths are the same at any rate.
    dropouts = DROPOUTS[-1:] if smoke else DROPOUTS
    for kind in ("encoder",) if encoder_only else ("encoder", "decoder"):
        rows = training_step(kind, sizes, dropouts, repeats, matmul_size)
        show(
            f"{kind}_training_step",
            f"{kind} training step ({NUM_LAYERS} layers)",
            rows,
            TRAINING_COLUMNS,
        )
        if kind == "encoder":
            rows = encoder_step_on_jax(sizes, dropouts, repeats, rows)
            title = f"encoder training step ({NUM_LAYERS} layers) on the JAX backend"
            show("encoder_training_step_jax", title, rows, JAX_COLUMNS)
    if encoder_only:
        return results

    # Sections that also run alone (`python -m benchmarks NAME`).
    part_repeats = section.SMOKE_REPEATS if smoke else repeats
    results["self_attention"] = section.run_and_print(
        self_attention,
        smoke,
        min(part_repeats, self_attention.REPEATS),
        plot=plots and plots / "attention_memory.png",
    )["rows"]
    results["greedy_decoding"] = section.run_and_print(decoding, smoke, part_repeats)["rows"]
    rows = serving_rows((1, 32), 8 if smoke else 32, repeats)
    show("serving", "exported serving_default against in-process decoding", rows, SERVING_COLUMNS)
    results["generation"] = section.run_and_print(generation, smoke, part_repeats)["rows"]
    # Grouped-query, the sliding window, Llama, length extrapolation.
    results["modern_attention"] = modern_attention.run(
        smoke,
        min(part_repeats, modern_attention.REPEATS),
        plot=plots and plots / "sliding_window.png",
    )
    return results


if __name__ == "__main__":
    section.main("run")
