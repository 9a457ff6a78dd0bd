"""mixed_bfloat16 against float32 for the translate recipe's Transformer:
a training step and decoding, in turns, on this CPU.

    python -m benchmarks bfloat16             # tiny and base (about 10 minutes)
    python -m benchmarks bfloat16 --smoke     # tiny sizes: checks it runs

bfloat16 halves the bytes each weight and activation takes, and CPUs with
AVX512_BF16 or AMX (`lscpu` flags) multiply it in hardware; elsewhere
TensorFlow emulates it. Under `mixed_bfloat16` Keras keeps the weights in
float32 and casts them to bfloat16 for each layer's computation, so a
step does the casting besides the work. Whether that pays depends on the
CPU and on the model's size: this races both precisions on the same
batches, model by model, one call of each in turn, so that a slow spell
of the machine falls on both. Each model is built anew under each policy
with the same seed. Writes `--json` (default
`benchmarks/results_bfloat16.json`): seconds per call, and float32's time
over bfloat16's (above 1: bfloat16 is faster).
"""

PRECISIONS = ("float32", "mixed_bfloat16")
# name -> (preset, vocabulary size, batch size, tokens a side): the
# recipe's choice for a corpus like English-French (8,000 pieces a side),
# and the paper's base model.
MODELS = {
    "tiny": ("tiny", 8000, 64, 48),
    "base": ("base", 8000, 32, 48),
}
SMOKE_MODELS = {"tiny": ("tiny", 100, 4, 8)}
# The decoding calls: batch-size and beam of a translation request.
DECODING = {"greedy, batch 32": (32, 1), "beam 4, batch 8": (8, 4)}
SMOKE_DECODING = {}  # (the training step only: a few seconds)
NO_END_ID = -1  # an id no model makes


def contenders(preset, vocabulary_size, batch_size, length, decoding_calls):
    """Precision -> {work: a function that runs it once}, the models built
    with the same seed under each policy, on the same random batch."""
    import keras
    import numpy as np
    import tensorflow as tf

    from keras_attention import decoding
    from keras_attention.models import build_transformer
    from keras_attention.objectives import MaskedSparseCrossentropy

    random = np.random.default_rng(0)
    source = random.integers(4, vocabulary_size, (batch_size, length)).astype("int32")
    target = random.integers(4, vocabulary_size, (batch_size, length)).astype("int32")
    inputs = {"source_ids": source, "target_ids": target}
    labels = np.roll(target, -1, axis=1)
    works = {}
    for precision in PRECISIONS:
        keras.config.set_dtype_policy(precision)
        keras.utils.set_random_seed(0)
        model = build_transformer(vocabulary_size, vocabulary_size, preset=preset)
        model.compile(keras.optimizers.Adam(1e-3), loss=MaskedSparseCrossentropy())
        works[(precision, "training step")] = lambda model=model: model.train_on_batch(
            inputs, labels
        )
        for name, (rows, beam_size) in decoding_calls.items():
            # (No end id, so that each search makes `length` tokens under
            # either precision: the same work, whatever the weights say.)
            search = tf.function(
                lambda ids, model=model, beam_size=beam_size: decoding.beam_search(
                    model, ids, length, beam_size=beam_size, end_id=NO_END_ID
                )[0]
            )
            ids = tf.constant(source[:rows])
            works[(precision, name)] = lambda search=search, ids=ids: search(ids).numpy()
    keras.config.set_dtype_policy("float32")
    return works


REPEATS = 5


def run(smoke, repeats):
    from benchmarks import measure
    from keras_attention.recipes.choices import bfloat16_flags

    models, decoding_calls = (SMOKE_MODELS, SMOKE_DECODING) if smoke else (MODELS, DECODING)
    print(f"bfloat16 flags: {', '.join(bfloat16_flags()) or 'none'}")
    rows = []
    for model, (preset, vocabulary_size, batch_size, length) in models.items():
        works = contenders(preset, vocabulary_size, batch_size, length, decoding_calls)
        seconds = measure.race(works, repeats)
        for work in dict.fromkeys(name for _, name in works):
            float32, bfloat16 = (seconds[(precision, work)] for precision in PRECISIONS)
            rows.append(
                {
                    "model": model,
                    "work": work,
                    "float32_ms": 1000 * float32,
                    "mixed_bfloat16_ms": 1000 * bfloat16,
                    "float32_over_bfloat16": float32 / bfloat16,
                }
            )
    return {
        "bfloat16_flags": bfloat16_flags(),
        "models": {
            name: dict(
                zip(("preset", "vocabulary_size", "batch_size", "length"), spec, strict=True)
            )
            for name, spec in models.items()
        },
        "rows": rows,
    }


TABLES = [
    (
        "float32 over mixed_bfloat16 (above 1: bfloat16 is faster)",
        "rows",
        [
            ("model", "model", "s"),
            ("work", "work", "s"),
            ("float32_ms", "float32 ms", ".1f"),
            ("mixed_bfloat16_ms", "bfloat16 ms", ".1f"),
            ("float32_over_bfloat16", "float32 / bfloat16", ".2f"),
        ],
    )
]


if __name__ == "__main__":
    from benchmarks import section

    section.main("bfloat16")
