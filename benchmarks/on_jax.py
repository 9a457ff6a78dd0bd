"""The encoder training step on Keras's JAX backend, for `benchmarks.run`.

The backend is chosen when Keras is imported, so `benchmarks.run` (on
TensorFlow) starts this in a process of its own, right after its own
encoder race, with the same sizes, dropout rates and repeats:

    KERAS_BACKEND=jax python -m benchmarks.on_jax SETTINGS_JSON OUTPUT_JSON

Every contender is compiled by XLA (`jax.jit`: JAX has no other way to run
a training step fast), and they take turns call by call, as in every race.
"""

import json
import sys
from pathlib import Path

import keras
import numpy as np

from benchmarks import contenders, measure
from benchmarks.run import OURS, encoder_flops, training_model, training_row


def encoder_rows(sizes, dropouts, repeats):
    """One row per dropout rate and contender, with `ours_speedup` against
    ours on JAX at the same rate."""
    keras.utils.set_random_seed(0)
    random = np.random.default_rng(0)
    shape = (sizes["batch_size"], sizes["length"], sizes["model_dim"])
    x, y = (keras.ops.convert_to_tensor(random.normal(size=shape).astype("float32")) for _ in "xy")
    flops = encoder_flops(**sizes)
    rows = []
    for dropout in dropouts:
        steps = {}
        for contender in contenders.CONTENDERS:
            model = training_model("encoder", contender, sizes, dropout, jit_compile=True)
            steps[contender] = lambda model=model: model.train_on_batch(x, y)
        seconds = measure.race(steps, repeats)
        for contender, time in seconds.items():
            row = training_row("encoder", contender, dropout, True, sizes, flops, time)
            row["ours_speedup"] = time / seconds[OURS]
            rows.append({"backend": keras.backend.backend(), **row})
    return rows


def main(argv=None):
    settings_json, output = sys.argv[1:] if argv is None else argv
    settings = json.loads(settings_json)
    rows = encoder_rows(settings["sizes"], settings["dropouts"], settings["repeats"])
    Path(output).write_text(json.dumps(rows))


if __name__ == "__main__":
    main()
