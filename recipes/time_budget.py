"""`--time-budget MINUTES`: training planned to fit a number of minutes.

The run times its first steps (`PROBE_STEPS`), estimates an epoch from
them (its training steps and its validation pass), and plans as many
epochs as fit. The learning rate then falls linearly to 0 over the last
fifth of the planned steps (`--final-decay`, `objectives.DecayToEnd`), so
training ends on decayed weights at the budget. After each epoch the plan is made again
from the epochs' measured times, until the decay has begun; from then on
it stands. A budget too short for one epoch is refused with the minimum.

The plan is written to the run's checkpoint folder (`PLAN_FILE`), so a
resumed run keeps it: its steps and learning rates are the killed run's.
"""

import dataclasses
import json
import math
import statistics
import time
from pathlib import Path

import keras

from keras_attention.files import write_atomically

PLAN_FILE = "time_budget.json"
PROBE_STEPS = 40  # timed before the plan is made
UNTIMED_STEPS = 3  # the first steps trace the step function
# A validation step against a training step (a forward pass against a
# forward and backward one), until an epoch has been measured.
VALIDATION_SHARE = 1 / 3
DECAY_SHARE = 0.2  # --final-decay under a budget, unless given


class TimeBudgetTooShort(ValueError):
    """`--time-budget` leaves no room for one epoch."""


@dataclasses.dataclass
class Plan:
    """What a budget planned (written to `PLAN_FILE`)."""

    minutes: float  # the budget
    steps_per_epoch: int
    seconds_per_step: float  # measured on the first steps
    epoch_seconds: float  # one epoch with its validation, estimated, then measured
    trace_seconds: float  # the start-up: tracing the step function
    epochs: int
    used_seconds: float = 0.0  # training time at the end of the last epoch


class TimeBudget:
    """The plan of one run's `--time-budget minutes`.

    Args:
        minutes: the budget: minutes of training, validation included.
        folder: the run's checkpoint folder, where the plan is kept.
        schedule: the learning rate, an `objectives.DecayToEnd` told the
            plan's last step (None: no decay, `--final-decay 0`).
        writer: whether this process writes the plan (the chief).
        max_epochs: `--epochs`, if given: no more are planned.
    """

    def __init__(self, minutes, folder, schedule=None, writer=True, max_epochs=None):
        self.minutes = minutes
        self.path = Path(folder) / PLAN_FILE
        self.schedule = schedule
        self.writer = writer
        self.max_epochs = max_epochs
        self.plan = None
        self.used_before = 0.0  # training time of the runs this one resumes

    def resumed_epochs(self, steps_per_epoch):
        """The planned epochs of a resumed run (None before a plan)."""
        if not self.path.is_file():
            return None
        plan = Plan(**json.loads(self.path.read_text()))
        if plan.minutes != self.minutes:
            raise TimeBudgetTooShort(
                f"--time-budget {self.minutes:g}: the run in this folder was planned for "
                f"--time-budget {plan.minutes:g} ({self.path}); resume with that, or start "
                "afresh with --overwrite"
            )
        if plan.steps_per_epoch != steps_per_epoch:
            raise ValueError(
                f"{self.path} planned epochs of {plan.steps_per_epoch} steps; the data now "
                f"gives {steps_per_epoch}"
            )
        self.used_before = plan.used_seconds
        self._adopt(plan)
        print(f"Time budget: resuming the plan of {plan.epochs} epochs ({self.path})")
        return plan.epochs

    def make_plan(self, step_times, steps_per_epoch, validation_steps, seconds_so_far):
        """The number of epochs that fit, from the durations of the first
        steps (`step_times`, seconds) and the time spent so far; refuses a
        budget too short for one epoch."""
        timed = step_times[UNTIMED_STEPS:] or step_times
        # Steps that traced again (a new batch shape) are left out.
        typical = statistics.median(timed)
        per_step = statistics.mean([t for t in timed if t < 5 * typical])
        # Spent on tracing the first steps; once more after the plan, which
        # the step function is traced again for (the schedule's end).
        overhead = max(0.0, seconds_so_far - per_step * len(step_times))
        epoch_seconds = per_step * (steps_per_epoch + VALIDATION_SHARE * (validation_steps or 0))
        budget = 60 * self.minutes
        epochs = math.floor((budget - 2 * overhead) / epoch_seconds)
        if epochs < 1:
            needed = math.ceil((2 * overhead + epoch_seconds) / 6) / 10  # minutes, rounded up
            raise TimeBudgetTooShort(
                f"--time-budget {self.minutes:g} is too short for one epoch: an epoch of "
                f"{steps_per_epoch} steps and its validation takes about "
                f"{epoch_seconds / 60:.1f} min here ({per_step:.3f} s a step, measured on "
                f"the first {len(step_times)}), with {2 * overhead / 60:.1f} min of tracing "
                f"the step; give --time-budget {needed:g} or more, or fewer "
                "--train-examples"
            )
        if self.max_epochs:
            epochs = min(epochs, self.max_epochs)
        plan = Plan(
            self.minutes, steps_per_epoch, round(per_step, 5), epoch_seconds, overhead, epochs
        )
        self._adopt(plan)
        decay = ""
        if self.schedule is not None:
            decay = f", the learning rate falling to 0 from step {self.schedule.decay_start}"
        print(
            f"Time budget {self.minutes:g} min: {per_step:.3f} s a step (measured on the "
            f"first {len(step_times)}), about {epoch_seconds / 60:.2f} min an epoch of "
            f"{steps_per_epoch} steps with its validation: planned {epochs} epochs "
            f"({self.total_steps} steps){decay}"
        )
        return epochs

    def after_epoch(self, epochs_done, epoch_seconds, seconds):
        """Plans again after an epoch, from the times of the whole epochs
        this process trained (`epoch_seconds`) and its training time
        (`seconds`), until the decay has begun; returns the number of epochs
        planned, and whether it changed (the step function must then be
        traced again, with the new end)."""
        plan = self.plan
        used_seconds = plan.used_seconds = self.used_before + seconds
        changed = False
        if epoch_seconds and epochs_done * plan.steps_per_epoch < self._decay_start():
            plan.epoch_seconds = statistics.median(epoch_seconds)
            left = 60 * self.minutes - used_seconds
            epochs = epochs_done + max(1, math.floor(left / plan.epoch_seconds))
            if epochs != plan.epochs:  # a new end: traced again
                epochs = epochs_done + max(
                    1, math.floor((left - plan.trace_seconds) / plan.epoch_seconds)
                )
            if self.max_epochs:
                epochs = min(epochs, self.max_epochs)
            if epochs != plan.epochs:
                print(
                    f"Time budget: {plan.epoch_seconds / 60:.2f} min an epoch as measured, "
                    f"{left / 60:.1f} min left: {epochs} epochs planned instead of {plan.epochs}"
                )
                plan.epochs, changed = epochs, True
        self._adopt(plan)
        return plan.epochs, changed

    def _decay_start(self):
        """The first step whose learning rate depends on the plan."""
        return self.total_steps if self.schedule is None else self.schedule.decay_start

    @property
    def total_steps(self):
        return self.plan.epochs * self.plan.steps_per_epoch

    def summary(self, training_seconds):
        """What the budget planned and what the run used (for evaluation.json)."""
        return {
            "minutes": self.minutes,
            "planned_epochs": self.plan.epochs,
            "steps": self.total_steps,
            "seconds_per_step": self.plan.seconds_per_step,
            "used_minutes": round((self.used_before + training_seconds) / 60, 2),
        }

    def _adopt(self, plan):
        self.plan = plan
        if self.schedule is not None:
            self.schedule.total_steps = self.total_steps
        if self.writer:
            write_atomically(self.path, json.dumps(dataclasses.asdict(plan), indent=1) + "\n")


class StepTimes(keras.callbacks.Callback):
    """The wall time of each training step, end to end (place it after a
    callback that reads the loss, which waits for the step)."""

    def __init__(self):
        super().__init__()
        self.times = []

    def on_train_begin(self, logs=None):
        self._last = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        self.times.append(now - self._last)
        self._last = now
