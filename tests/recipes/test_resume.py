"""Checkpoints: written whole, read back exactly, unreadable ones skipped."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_attention.recipes import config as recipe_config
from keras_attention.recipes import resume, training
from keras_attention.recipes.resume import Checkpoints, Position
from keras_attention.recipes.strategy import make_strategy


def small_model(seed=0):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [keras.Input((3,)), keras.layers.Dense(8), keras.layers.Dropout(0.5), keras.layers.Dense(1)]
    )
    model.compile(keras.optimizers.Adam(1e-2), "mse")
    return model


def train(model, steps=3):
    x = np.arange(24, dtype="float32").reshape(8, 3)
    model.fit(x, x[:, :1], batch_size=8, epochs=steps, verbose=0)


def state(model):
    return [v.numpy().copy() for v in model.variables + model.optimizer.variables]


def test_a_checkpoint_restores_weights_optimizer_and_dropout_state(tmp_path):
    model = small_model()
    train(model)
    checkpoints = Checkpoints(tmp_path)
    checkpoints.save(model, Position(3, 5))
    saved = state(model)
    assert saved[0].size and model.optimizer.iterations.numpy() == 3

    fresh = small_model(seed=1)
    assert not np.allclose(state(fresh)[0], saved[0])
    assert checkpoints.restore(fresh) == Position(3, 5)
    for restored, expected in zip(state(fresh), saved, strict=True):
        np.testing.assert_array_equal(restored, expected)
    # Restored, the two go on identically, dropout included.
    train(model)
    train(fresh)
    for a, b in zip(state(fresh), state(model), strict=True):
        np.testing.assert_array_equal(a, b)


def test_no_checkpoint_means_the_start(tmp_path):
    assert Checkpoints(tmp_path / "none").restore(small_model()) == Position()


def test_the_two_newest_are_kept_and_nothing_half_written(tmp_path):
    model = small_model()
    checkpoints = Checkpoints(tmp_path)
    for step in (2, 4, 6):
        checkpoints.save(model, Position(0, step))
    checkpoints.save(model, Position(1, 0))
    assert [p.name for p in checkpoints.saved()] == [
        "epoch-00001-step-0000000",
        "epoch-00000-step-0000006",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in checkpoints.saved())


def test_saving_the_same_position_again_replaces_it_whole(tmp_path):
    # A rerun of a finished command saves its last position again.
    model = small_model()
    checkpoints = Checkpoints(tmp_path)
    checkpoints.save(model, Position(1, 0))
    train(model)
    checkpoints.save(model, Position(1, 0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epoch-00001-step-0000000"]
    fresh = small_model(seed=1)
    assert checkpoints.restore(fresh) == Position(1, 0)
    for restored, expected in zip(state(fresh), state(model), strict=True):
        np.testing.assert_array_equal(restored, expected)


def test_a_save_that_fails_leaves_nothing(tmp_path, monkeypatch):
    model = small_model()
    checkpoints = Checkpoints(tmp_path)
    checkpoints.save(model, Position(0, 2))

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(model, "save_weights", killed)
    with pytest.raises(KeyboardInterrupt):
        checkpoints.save(model, Position(0, 4))
    assert [p.name for p in tmp_path.iterdir()] == ["epoch-00000-step-0000002"]


@pytest.mark.parametrize(
    "damage",
    [
        lambda path: (path / resume.WEIGHTS_FILE).write_bytes(
            (path / resume.WEIGHTS_FILE).read_bytes()[:1000]
        ),
        lambda path: (path / resume.POSITION_FILE).write_text('{"epoch": 1, "st'),
        lambda path: (path / resume.RANDOM_STATE_FILE).unlink(),
    ],
    ids=["truncated weights", "truncated position", "missing random state"],
)
def test_an_unreadable_checkpoint_is_reported_and_the_one_before_used(tmp_path, capsys, damage):
    model = small_model()
    checkpoints = Checkpoints(tmp_path)
    # Trained first, as a run's checkpoints always are: an optimizer saved
    # before its first step has no state, and Keras warns when a built one
    # (built by the failed attempt at the newest) loads it.
    train(model, steps=2)
    checkpoints.save(model, Position(0, 2))
    train(model)
    newest = tmp_path / "epoch-00000-step-0000004"
    checkpoints.save(model, Position(0, 4))
    damage(newest)

    assert checkpoints.restore(small_model(seed=3)) == Position(0, 2)
    printed = capsys.readouterr().out
    assert f"checkpoint {newest} is unreadable" in printed
    assert "Resuming from" in printed and "epoch-00000-step-0000002" in printed
    assert not newest.exists()  # moved aside, kept for a look
    assert [p.name.split("-1")[0] for p in (tmp_path / "unreadable").iterdir()] == [
        "epoch-00000-step-0000004"
    ]


def test_when_none_can_be_read_the_run_stops(tmp_path):
    model = small_model()
    checkpoints = Checkpoints(tmp_path)
    checkpoints.save(model, Position(0, 2))
    (tmp_path / "epoch-00000-step-0000002" / resume.WEIGHTS_FILE).write_bytes(b"garbage")
    with pytest.raises(resume.UnreadableCheckpoints, match="Move the folder away"):
        checkpoints.restore(small_model())


def test_a_nan_loss_stops_training_with_a_message():
    model = small_model()
    x = np.full((8, 3), np.nan, dtype="float32")
    with pytest.raises(resume.TrainingDiverged, match=r"became nan at epoch 3, step 2"):
        model.fit(
            x,
            x[:, :1],
            batch_size=4,
            verbose=0,
            callbacks=[resume.StopOnNaN(Position(2, 1))],
        )


def test_fit_takes_one_optimizer_step_per_batch(tmp_path):
    """Left to find the end of the data itself, Keras runs the train step once
    more on the spent iterator, and the optimizer's step counter moves there
    (under `mirrored` on some replicas only, as timing falls, so the replicas'
    weights drift apart). `training.fit` gives each epoch its number of steps."""
    config = recipe_config.TrainingConfig(output_dir=str(tmp_path), epochs=2, checkpoint_every=100)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(), "mse")

    def batches(epoch):  # of unknown number, as bucketed batches are
        features, targets = np.ones((40, 3), "float32"), np.ones((40, 1), "float32")
        dataset = tf.data.Dataset.from_tensor_slices((features, targets)).batch(8)
        return dataset.filter(lambda features, targets: True)

    training.fit(model, make_strategy("default", 8), batches, None, config, tmp_path)
    assert int(model.optimizer.iterations.numpy()) == 2 * 5
