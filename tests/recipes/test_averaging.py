"""`--ema-momentum`: a moving average of the weights, kept after training
when it scores the lower validation loss (`recipe.keep_the_better_weights`)."""

import json
import types

import h5py
import keras
import numpy as np
import pytest
import tensorflow as tf
from recipe_helpers import tiny_flags

from keras_attention.objectives import AveragingAdam
from keras_attention.recipes import recipe, translate


def trained_model():
    keras.utils.set_random_seed(0)  # the same model every call
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(16, 3)), rng.normal(size=(16, 2))
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(AveragingAdam(learning_rate=0.1, ema_momentum=0.5), "mse")
    model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    return model, tf.data.Dataset.from_tensor_slices((x, y)).batch(8)


@pytest.mark.parametrize(
    ("losses", "kept"), [((0.7, 0.5), "moving_average"), ((0.5, 0.7), "last_step")]
)
def test_the_weights_with_the_lower_validation_loss_are_kept(monkeypatch, losses, kept):
    model, validation = trained_model()
    last = [v.numpy() for v in model.trainable_variables]
    twin, _ = trained_model()  # the same training: its average, put in by hand
    twin.optimizer.use_average(twin.trainable_variables)
    average = [v.numpy() for v in twin.trainable_variables]
    assert not np.allclose(average[0], last[0])
    # The validation losses, last step's first: as scripted.
    answers = iter(losses)
    monkeypatch.setattr(model, "evaluate", lambda *a, **k: {"loss": next(answers)})
    strategy = types.SimpleNamespace(distribute=lambda dataset: dataset)

    record = recipe.keep_the_better_weights(model, strategy, validation)

    assert record == {
        "kept": kept,
        "ema_momentum": 0.5,
        "validation_loss": {"last_step": losses[0], "moving_average": losses[1]},
    }
    expected = average if kept == "moving_average" else last
    for variable, value in zip(model.trainable_variables, expected, strict=True):
        np.testing.assert_allclose(variable.numpy(), value, rtol=1e-6)


def test_without_an_average_nothing_is_chosen():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile("adam", "mse")
    assert recipe.keep_the_better_weights(model, None, None) is None


def checkpoint_kernel(folder):
    """The first trainable weight of the newest checkpoint (the last step's)."""
    newest = sorted((folder / "checkpoints").glob("epoch-*"))[-1]
    with h5py.File(newest / "model.weights.h5") as weights:
        arrays = []
        weights.visititems(
            lambda name, item: (
                arrays.append((name, item[()]))
                if isinstance(item, h5py.Dataset) and "optimizer" not in name
                else None
            )
        )
    return dict(arrays)


@pytest.mark.large  # a whole recipe run (see docs/testing.md)
def test_a_run_records_and_exports_the_weights_it_kept(dates_data_dir, tmp_path):
    output_dir = tmp_path / "run"
    flags = tiny_flags(dates_data_dir, output_dir, "--epochs", "2", "--ema-momentum", "0.9")
    results = translate.main([*flags, "--no-export"])
    record = results["weights"]
    assert record["kept"] in ("moving_average", "last_step")
    assert record["validation_loss"][record["kept"]] == min(record["validation_loss"].values())
    evaluation = json.loads((output_dir / "evaluation.json").read_text())
    assert evaluation["weights"] == record
    # The saved model holds the kept weights: the checkpoint's (the last
    # step's) exactly when those were kept.
    saved = keras.saving.load_model(output_dir / "model.keras")
    last = checkpoint_kernel(output_dir)
    same = all(
        any(np.array_equal(variable.numpy(), array) for array in last.values())
        for variable in saved.trainable_variables
    )
    assert same == (record["kept"] == "last_step")
