"""Training mechanics every recipe shares: the process's settings
(determinism, precision), the learning rate and the optimizer, the batching,
`fit` (one `model.fit` an epoch, told its number of steps, resumable at any
step through `resume.py`), and keeping the better of the last weights and
their averages."""

import time
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from keras_attention.objectives import AveragingAdam, DecayToEnd, TransformerSchedule
from keras_attention.recipes import resume
from keras_attention.recipes.config import PRECISIONS
from keras_attention.recipes.time_budget import PROBE_STEPS, StepTimes
from keras_attention.run_files import RunFiles
from keras_attention.utils import check_choice

# --- The process's settings ---


def set_op_determinism(enabled):
    """TensorFlow's deterministic ops on or off, as the run asks. Off too,
    because the setting is global: a run started in the same process after
    a `--deterministic` one (tests, notebooks) would otherwise stay
    deterministic, and Keras would silently drop its `--jit-compile`."""
    if enabled:
        tf.config.experimental.enable_op_determinism()
        return
    from keras_attention import compat

    if compat.is_op_determinism_enabled():  # no public switch back (keras_attention.compat)
        compat.disable_op_determinism()


def set_precision(precision):
    check_choice("--precision", precision, PRECISIONS)
    keras.config.set_dtype_policy(precision)


# --- The optimizer and the batches ---


def global_batch(config):
    """The run's global batch size; None for batches cut by tokens (of many sizes)."""
    return None if config.batch_tokens else config.batch_size


def learning_rate(config, model_dim):
    """A constant learning rate or the paper's warm-up schedule, falling
    to 0 over the last `--final-decay` share of the steps
    (`objectives.DecayToEnd`, whose end `fit` sets once it is known)."""
    if config.schedule == "warmup":
        rate = TransformerSchedule(model_dim, config.warmup_steps)
    else:
        rate = config.learning_rate
    if config.final_decay:
        return DecayToEnd(rate, decay_share=config.final_decay)
    return rate


def make_optimizer(config, learning_rate):
    """Adam with the run's `learning_rate` (a number or a schedule), and
    with `--ema-momentum` a moving average of the weights."""
    if config.ema_momentum:
        return AveragingAdam(
            learning_rate,
            ema_momentum=config.ema_momentum,
            beta_1=config.adam_beta_1,
            beta_2=config.adam_beta_2,
            epsilon=config.adam_epsilon,
        )
    return keras.optimizers.Adam(
        learning_rate,
        beta_1=config.adam_beta_1,
        beta_2=config.adam_beta_2,
        epsilon=config.adam_epsilon,
    )


def step_compiles(jit_compile):
    """Whether the train step is compiled by XLA, given `--jit-compile`:
    always on JAX (`jax.jit`). A compiled step gets every batch padded to
    one of a few widths, so it compiles a few times."""
    return jit_compile or keras.backend.backend() == "jax"


def batching(config, compiles, train_examples=0, epoch=0):
    """The batching arguments of `keras_attention.data.pipeline` for this run.

    For training (`train_examples`, the size of the shuffle buffer, given):
    shuffled with the seed `seed + epoch`, so every epoch's order is fixed
    and a resumed run sees the batches the killed one would have; full
    batches only, so every replica gets an equal share (a cluster trains
    like one process) and shapes stay static for XLA and TPUs. `compiles`:
    whether the step is compiled (`RunStrategy.compiles`).
    """
    arguments = dict(
        batch_size=config.batch_size,
        batch_tokens=config.batch_tokens,
        max_length=config.max_input_length,
        bucket_shapes=compiles,  # a few shapes: the step compiles a few times
    )
    if train_examples:
        arguments.update(
            shuffle_buffer=train_examples if config.shuffle else 0,
            seed=config.seed + epoch,
            drop_remainder=True,
        )
    return arguments


# --- Training, and the weights kept ---


def fit(
    model,
    strategy,
    train_batches,
    validation,
    config,
    output_dir,
    callbacks=(),
    budget=None,
    decay=None,
):
    """`model.fit`, one epoch at a time, resumable at any step (see
    `resume.py`), with TensorBoard logs, a stop on NaN and `callbacks`;
    returns the training time in seconds.

    `train_batches(epoch)` gives that epoch's training batches, the same
    ones every time it is asked; they and the `validation` batches reach
    the replicas as `strategy` distributes them. Every worker resumes from the chief's
    checkpoints, which only the chief writes.

    Each `fit` is told how many steps its epoch has. Left to find the end
    of the data itself, Keras calls the train step once more on the spent
    iterator, and the ops of that call that do not wait for data still run:
    the optimizer's step counter is incremented (one phantom step an
    epoch), and under `mirrored` on some replicas' copies of it and not
    others, as timing falls. The next step then applies Adam's bias
    correction for different steps on different replicas, and their copies
    of the weights drift apart (measured: the replicas' weights differed
    after the first step of an epoch in about half the runs; two
    uninterrupted runs ended apart).

    With a `budget` (`time_budget.TimeBudget`), the epochs are planned
    after the first steps, which are timed (see `recipes/time_budget.py`).
    A `decay` (`objectives.DecayToEnd`, the learning rate) is told the
    run's last step: the epochs' steps, or the budget's plan.
    """
    checkpoints = resume.Checkpoints(
        RunFiles(config.output_dir).checkpoints,
        writer=Path(output_dir) == Path(config.output_dir),
        epoch_ends=config.average_last,  # kept for the average
    )
    with strategy.scope():  # the optimizer's variables are made here
        resume.build_optimizer(model)
        start = checkpoints.restore(model)
    # The same every epoch: batches are full and drawn from buckets of
    # lengths, so their number does not depend on the order.
    steps_per_epoch = count_batches(train_batches(start.epoch))
    # The same for the validation pass, which would otherwise warn that its
    # input "ran out of data" at the end of every epoch.
    validation_steps = count_batches(validation) if validation is not None else None
    if validation is not None:
        validation = strategy.distribute(validation)
    # None while a time budget has no plan yet.
    epochs = config.epochs if budget is None else budget.resumed_epochs(steps_per_epoch)
    if epochs is not None and start.epoch >= epochs:
        print(f"Training is complete ({epochs} epochs); evaluating.")
    if decay is not None and budget is None:
        decay.total_steps = epochs * steps_per_epoch
    tensorboard = keras.callbacks.TensorBoard(str(RunFiles(output_dir).logs))
    progress = resume.EpochProgress(epochs)
    started = time.time()
    epoch_seconds = []  # of the whole epochs this process trained
    position = start
    while epochs is None or position.epoch < epochs:
        if position.step >= steps_per_epoch:  # killed between its last step and its end
            position = resume.Position(position.epoch + 1)
            continue
        end = resume.Position(position.epoch + 1)
        timer = None
        if epochs is None:  # a time budget: the first steps are timed, then planned
            timer = StepTimes()
            if position.step + PROBE_STEPS < steps_per_epoch:
                end = resume.Position(position.epoch, position.step + PROBE_STEPS)
        whole_epoch = position.step == 0 and end.step == 0 and timer is None
        epoch_started = time.time()
        # A fresh dataset: its first pass has the order the killed run's had.
        model.fit(
            strategy.distribute(train_batches(position.epoch)).skip(position.step),
            steps_per_epoch=(end.step or steps_per_epoch) - position.step,
            shuffle=False,  # the pipeline shuffles, with a seed per epoch
            validation_data=validation if end.step == 0 else None,
            validation_steps=validation_steps,
            initial_epoch=position.epoch,
            epochs=position.epoch + 1,
            verbose=2 if end.step == 0 else 0,  # a stretch of an epoch is not logged
            callbacks=[
                # First the NaN check, so no checkpoint keeps broken weights.
                resume.StopOnNaN(position),
                resume.SaveEvery(checkpoints, config.checkpoint_every, position, end),
                *([timer] if timer else []),
                *([tensorboard, *callbacks, progress] if end.step == 0 else []),
            ],
        )
        if timer:
            epochs = budget.make_plan(
                timer.times, steps_per_epoch, validation_steps, time.time() - started
            )
            progress.total_epochs = epochs
            model.train_function = None  # traced again, with the schedule's end
        if budget is not None and end.step == 0:
            if whole_epoch:
                epoch_seconds.append(time.time() - epoch_started)
            epochs, changed = budget.after_epoch(end.epoch, epoch_seconds, time.time() - started)
            progress.total_epochs = epochs
            if changed:
                model.train_function = None
        position = end
    return time.time() - started


def keep_the_better_weights(model, strategy, validation, checkpoints=None, average_last=0):
    """Leaves in `model` the weights with the lowest loss on the
    `validation` batches, of: the last step's; their moving average
    (`--ema-momentum`); the average of the last `average_last` epochs' ends
    (`--average-last`, read from the `checkpoints`, a `resume.Checkpoints`).
    Returns what it kept and why (for `evaluation.json`); None when there
    is nothing to choose from."""
    if validation is None:
        return None
    variables = model.trainable_variables

    def current():
        return [variable.numpy() for variable in variables]

    def put(values):
        for variable, value in zip(variables, values, strict=True):
            variable.assign(value)

    last = current()
    candidates = {"last_step": last}
    if isinstance(model.optimizer, AveragingAdam):
        model.optimizer.use_average(variables)
        candidates["moving_average"] = current()
        put(last)
    ends = checkpoints.epoch_ends(average_last) if average_last > 1 else []
    if len(ends) > 1:
        candidates[f"average_of_last_{len(ends)}_epochs"] = averaged(model, ends)
        put(last)
    if len(candidates) == 1:
        return None
    steps = count_batches(validation)
    batches = strategy.distribute(validation)
    losses = {}
    for name, values in candidates.items():
        put(values)
        losses[name] = float(
            model.evaluate(batches, steps=steps, verbose=0, return_dict=True)["loss"]
        )
    kept = min(losses, key=losses.get)
    put(candidates[kept])
    print(
        f"Weights kept: {kept.replace('_', ' ')} (validation loss: "
        + ", ".join(f"{name.replace('_', ' ')} {loss:.4f}" for name, loss in losses.items())
        + ")"
    )
    record = {"kept": kept}
    if "moving_average" in candidates:
        record["ema_momentum"] = model.optimizer.ema_momentum
    if len(ends) > 1:
        record["averaged_checkpoints"] = [folder.name for folder in ends]
    record["validation_loss"] = {name: round(loss, 5) for name, loss in losses.items()}
    return record


def averaged(model, folders):
    """The mean of `model`'s trainable weights over the checkpoint
    `folders` (loaded into `model`, whose weights are then the last's)."""
    total = None
    for folder in folders:
        model.load_weights(folder / resume.WEIGHTS_FILE)
        values = [variable.numpy().astype(np.float64) for variable in model.trainable_variables]
        total = values if total is None else [a + b for a, b in zip(total, values, strict=True)]
    dtypes = [variable.dtype for variable in model.trainable_variables]
    return [
        (value / len(folders)).astype(dtype) for value, dtype in zip(total, dtypes, strict=True)
    ]


def count_batches(dataset):
    """The number of batches in one pass of `dataset`."""
    return int(dataset.reduce(0, lambda count, _: count + 1))
