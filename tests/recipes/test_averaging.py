"""`--ema-momentum` (a moving average of the weights) and `--average-last`
(the average of the last epochs' checkpoints): kept after training when
they score the lower validation loss (`training.keep_the_better_weights`)."""

import json
import types

import h5py
import keras
import numpy as np
import pytest
import tensorflow as tf
from recipe_helpers import tiny_flags

from keras_attention.objectives import AveragingAdam
from keras_attention.recipes import resume, training, translate


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

    record = training.keep_the_better_weights(model, strategy, validation)

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
    assert training.keep_the_better_weights(model, None, None) is None


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
@pytest.mark.parametrize("averaging", [("--ema-momentum", "0.9"), ("--average-last", "2")])
def test_a_run_records_and_exports_the_weights_it_kept(dates_data_dir, tmp_path, averaging):
    output_dir = tmp_path / "run"
    flags = tiny_flags(dates_data_dir, output_dir, "--epochs", "2", *averaging)
    results = translate.main([*flags, "--no-export"])
    record = results["weights"]
    assert len(record["validation_loss"]) == 2  # the last step's and the average's
    assert record["kept"] in record["validation_loss"]
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


def test_the_epochs_ends_to_average_are_kept_beside_the_newest(tmp_path):
    model, _ = trained_model()
    checkpoints = resume.Checkpoints(tmp_path, epoch_ends=2)
    for epoch in (1, 2, 3):
        checkpoints.save(model, resume.Position(epoch, 0))
        checkpoints.save(model, resume.Position(epoch, 5))
    names = sorted(folder.name for folder in checkpoints.saved())
    # The two newest (3-5, 3-0), and the two newest epoch ends (3-0, 2-0).
    assert names == [
        "epoch-00002-step-0000000",
        "epoch-00003-step-0000000",
        "epoch-00003-step-0000005",
    ]
    assert [folder.name for folder in checkpoints.epoch_ends(5)] == names[:2]  # oldest first
    plain = resume.Checkpoints(tmp_path / "plain")
    for epoch in (1, 2):
        plain.save(model, resume.Position(epoch, 0))
        plain.save(model, resume.Position(epoch, 5))
    assert len(plain.saved()) == 2 and plain.epoch_ends(2) == [plain.saved()[1]]


@pytest.mark.parametrize(("losses", "kept"), [((0.7, 0.6, 0.5), True), ((0.5, 0.6, 0.7), False)])
def test_the_average_of_the_last_epochs_is_kept_when_it_scores_lower(
    monkeypatch, tmp_path, losses, kept
):
    """Three candidates (the moving average too); the checkpoints' mean
    is computed, not taken from anywhere."""
    model, validation = trained_model()
    checkpoints = resume.Checkpoints(tmp_path, keep=1, epoch_ends=3)
    rng = np.random.default_rng(1)
    saved = []
    for epoch in (1, 2, 3):
        values = [rng.normal(size=v.shape).astype("float32") for v in model.trainable_variables]
        for variable, value in zip(model.trainable_variables, values, strict=True):
            variable.assign(value)
        checkpoints.save(model, resume.Position(epoch, 0))
        saved.append(values)
    last = [v.numpy() for v in model.trainable_variables]
    answers = iter(losses)
    monkeypatch.setattr(model, "evaluate", lambda *a, **k: {"loss": next(answers)})
    strategy = types.SimpleNamespace(distribute=lambda dataset: dataset)

    record = training.keep_the_better_weights(model, strategy, validation, checkpoints, 3)

    name = "average_of_last_3_epochs"
    assert record["kept"] == (name if kept else "last_step")
    assert record["averaged_checkpoints"] == [
        f"epoch-0000{epoch}-step-0000000" for epoch in (1, 2, 3)
    ]
    names = ["last_step", "moving_average", name]
    assert record["validation_loss"] == dict(zip(names, losses, strict=True))
    mean = [np.mean(arrays, axis=0) for arrays in zip(*saved, strict=True)]
    for variable, expected_value in zip(
        model.trainable_variables, mean if kept else last, strict=True
    ):
        np.testing.assert_allclose(variable.numpy(), expected_value, rtol=1e-6)
