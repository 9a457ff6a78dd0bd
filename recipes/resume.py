"""Resumable training: a run killed at any moment and started again with the
same command carries on from its last checkpoint, at the same epoch and
step, with the same weights, optimizer state (and so learning-rate schedule
position), dropout random state and data order, as if never stopped.

A checkpoint is a folder `checkpoints/epoch-00002-step-0000120/` holding the weights
and optimizer state (`model.weights.h5`), the random-number states Keras
keeps outside the weights file (`random_state.npz`) and where training
stood (`position.json`). It is written under a temporary name and renamed
into place when complete, and the two newest are kept. A checkpoint that
cannot be read (a disk fault, a truncated copy) is reported by path, moved
to `checkpoints/unreadable/`, and the one before it used.

The data order is a function of the epoch (each epoch's shuffle is seeded
with `seed + epoch`), so the resumed run skips exactly the batches the
killed one had trained on.
"""

import dataclasses
import json
import math
import os
import shutil
import time
from pathlib import Path

import keras
import numpy as np

from keras_attention.files import write_folder_atomically
from keras_attention.recipes.jax_job import saving_alone

POSITION_FILE = "position.json"
WEIGHTS_FILE = "model.weights.h5"
RANDOM_STATE_FILE = "random_state.npz"


@dataclasses.dataclass(frozen=True)
class Position:
    """Where training stands: `step` batches of `epoch` are done (0-based
    epoch; `Position(epoch + 1, 0)` once an epoch is complete)."""

    epoch: int = 0
    step: int = 0


class UnreadableCheckpoints(RuntimeError):
    """Checkpoints exist but none can be read."""


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite."""


class Checkpoints:
    """The checkpoints of one run, in `directory`.

    Args:
        directory: the run's checkpoint folder.
        keep: how many of the newest checkpoints to keep.
        writer: whether this process writes checkpoints (in a multi-worker
            run only the chief does; every worker reads the chief's).
        epoch_ends: how many of the newest checkpoints made at the end of
            an epoch to keep besides (`--average-last` averages them).
    """

    def __init__(self, directory, keep=2, writer=True, epoch_ends=0):
        self.directory = Path(directory)
        self.keep = keep
        self.writer = writer
        self.kept_epoch_ends = epoch_ends

    def saved(self):
        """The checkpoint folders, newest first."""
        if not self.directory.is_dir():
            return []
        return sorted(self.directory.glob("epoch-*-step-*"), reverse=True)

    def epoch_ends(self, count):
        """The newest `count` checkpoints made at an epoch's end (at the
        next one's step 0), oldest first."""
        ends = [path for path in self.saved() if path.name.endswith("-step-0000000")]
        return ends[:count][::-1]

    def save(self, model, position):
        if not self.writer:
            return

        def write(folder):
            model.save_weights(folder / WEIGHTS_FILE)
            np.savez(folder / RANDOM_STATE_FILE, *[v.numpy() for v in _random_states(model)])
            (folder / POSITION_FILE).write_text(json.dumps(dataclasses.asdict(position)))

        # The same step again (a rerun) replaces the old one whole.
        final = self.directory / f"epoch-{position.epoch:05d}-step-{position.step:07d}"
        with saving_alone():
            write_folder_atomically(final, write, replace=True)
        saved = self.saved()
        kept = {*saved[: self.keep], *self.epoch_ends(self.kept_epoch_ends)}
        for old in saved:
            if old not in kept:
                shutil.rmtree(old, ignore_errors=True)

    def restore(self, model):
        """Loads the newest readable checkpoint into `model` (and its
        optimizer) and returns its `Position`; `Position()` when there is
        none. Unreadable ones are reported and moved aside."""
        saved = self.saved()
        for path in saved:
            try:
                position = _read_position(path)
                build_optimizer(model)
                model.load_weights(path / WEIGHTS_FILE)
                states = np.load(path / RANDOM_STATE_FILE)
                variables = _random_states(model)
                if len(states.files) != len(variables):
                    raise ValueError(
                        f"{len(states.files)} random states saved, the model has {len(variables)}"
                    )
                for variable, name in zip(variables, states.files, strict=True):
                    variable.assign(states[name])
            except Exception as error:  # noqa: BLE001  (any fault of any file)
                print(f"WARNING: checkpoint {path} is unreadable ({error}); trying the one before")
                if self.writer:
                    aside = self.directory / "unreadable" / f"{path.name}-{int(time.time())}"
                    aside.parent.mkdir(exist_ok=True)
                    os.replace(path, aside)
                continue
            print(f"Resuming from {path}: epoch {position.epoch + 1}, step {position.step}")
            return position
        if saved:
            raise UnreadableCheckpoints(
                f"No checkpoint in {self.directory} can be read (see the warnings above); "
                "the model may be partly loaded, so this run stops. Move the folder away "
                "to train from the start."
            )
        return Position()


def _read_position(path):
    value = json.loads((path / POSITION_FILE).read_text())
    position = Position(int(value["epoch"]), int(value["step"]))
    if position.epoch < 0 or position.step < 0:
        raise ValueError(f"a negative position: {value}")
    return position


def build_optimizer(model):
    """Makes the optimizer's variables, if they are not made yet. A weights
    file holds them, so they must exist before it is loaded; and made
    inside the first train step, they would have TensorFlow trace that step
    twice (a `tf.function` whose first trace creates variables is traced
    again without them)."""
    if model.optimizer is not None and not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)


def _random_states(model):
    """The seed-generator states (dropout's random numbers), which Keras's
    weights files leave out."""
    return [v for v in model.non_trainable_variables if v.path.endswith("seed_generator_state")]


class SaveEvery(keras.callbacks.Callback):
    """Saves a checkpoint every `every` steps of an epoch and at its end.

    `start` is where this `fit` call begins: batches are counted from it;
    `end` where it stops (the next epoch's start, unless it trains only a
    stretch of this one).
    """

    def __init__(self, checkpoints, every, start, end=None):
        super().__init__()
        self.checkpoints = checkpoints
        self.every = every
        self.start = start
        self.end = end or Position(start.epoch + 1)

    def on_train_batch_end(self, batch, logs=None):
        step = self.start.step + batch + 1
        if step % self.every == 0:
            self._save(Position(self.start.epoch, step))

    def on_epoch_end(self, epoch, logs=None):
        self._save(self.end)

    def _save(self, position):
        self.checkpoints.save(self.model, position)


class StopOnNaN(keras.callbacks.Callback):
    """Stops training with `TrainingDiverged` as soon as the loss is NaN or
    infinite, before a checkpoint could keep the broken weights."""

    def __init__(self, start):
        super().__init__()
        self.start = start

    def on_train_batch_end(self, batch, logs=None):
        loss = float((logs or {}).get("loss", 0.0))
        if not math.isfinite(loss):
            raise TrainingDiverged(
                f"The training loss became {loss} at epoch {self.start.epoch + 1}, step "
                f"{self.start.step + batch + 1}. Try a lower --learning-rate, the warmup "
                "--schedule, or --precision float32. The last good checkpoint is kept."
            )


class EpochProgress(keras.callbacks.ProgbarLogger):
    """Keras's progress lines, numbering epochs out of the whole run (each
    epoch is its own `fit` call)."""

    def __init__(self, total_epochs):
        super().__init__()
        self.total_epochs = total_epochs

    def set_params(self, params):
        super().set_params(params)
        self.epochs = self.total_epochs or 0  # None: not planned yet (no "Epoch 1/N" line)
