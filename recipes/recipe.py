"""The outline every recipe follows (`Recipe`), and what its steps share:
starting a run, tokenisers, the optimizer, batching, and `fit`, one epoch
at a time and resumable at any step."""

import dataclasses
import json
import shutil
import time
import typing
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from keras_attention import visualize
from keras_attention.data import text_files
from keras_attention.data.placeholders import frequent_placeholders
from keras_attention.data.tokenizers import (
    CharacterTokenizer,
    SubwordTokenizer,
    load_run_tokenizer,
)
from keras_attention.files import write_json
from keras_attention.objectives import (
    AveragingAdam,
    DecayToEnd,
    MaskedAccuracy,
    MaskedSparseCrossentropy,
    TransformerSchedule,
)
from keras_attention.recipes import resume
from keras_attention.recipes.attention_images import AttentionImages, watched_examples
from keras_attention.recipes.choices import (
    bfloat16_flags,
    epochs_for,
    precision_note,
    vocabulary_size_for,
)
from keras_attention.recipes.config import (
    INIT_FROM_CONFLICTS,
    PRECISIONS,
    RESUMABLE_CHANGES,
    InitFromError,
    OtherRunInFolder,
    TrainingConfig,
    as_flag,
    flag_name,
)
from keras_attention.recipes.jax_job import saving_alone
from keras_attention.recipes.run_export import export_run
from keras_attention.recipes.strategy import make_strategy
from keras_attention.recipes.time_budget import DECAY_SHARE, PROBE_STEPS, StepTimes, TimeBudget
from keras_attention.run_files import RunFiles, read_config
from keras_attention.utils import check_choice

# --- Starting a run ---


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


def start_run(config):
    """Seeds, precision and strategy (made before anything else touches
    TensorFlow's devices), the run's folder, and its resolved config.

    Returns `(strategy, output_dir, config)`: the folder this process
    writes in (processes other than the chief write apart from the chief's
    files, `RunStrategy.files_folder`), and the config, which a resumed run
    completes with what it chose for its data (`keep_the_run_s_choices`).
    """
    keras.utils.set_random_seed(config.seed)
    set_op_determinism(config.deterministic)
    set_precision(config.precision)
    strategy = make_strategy(config.strategy, global_batch(config), config.join_timeout)
    output_dir = strategy.files_folder(config.output_dir)
    if config.overwrite:
        clear_run(output_dir)
    else:
        check_same_run(output_dir, config)
        config = keep_the_run_s_choices(output_dir, config)
    output_dir.mkdir(parents=True, exist_ok=True)
    write_json(RunFiles(output_dir).config, dataclasses.asdict(config))
    return strategy, output_dir, config


def global_batch(config):
    """The run's global batch size; None for batches cut by tokens (of many sizes)."""
    return None if config.batch_tokens else config.batch_size


# What `Recipe.choose_for_data` chooses for fields left None, and what a
# run made before the flag existed did (the flag's name: that behaviour).
CHOSEN_FOR_THE_DATA = ("tokenizer", "vocabulary_size", "model_preset", "epochs")
BEFORE_THE_FLAG = {"batch_tokens": 0, "final_decay": 0.0}


def keep_the_run_s_choices(output_dir, config):
    """`config` with the fields left None that the run in `output_dir`
    chose for its data set as it chose them: a resumed run goes on as it
    began, though a newer recipe would choose otherwise (a flag newer than
    the run: as the run behaved without it)."""
    path = RunFiles(output_dir).config
    if not path.is_file():
        return config
    saved = read_config(path)
    # A fine-tuned run's tokenizer and model are its --init-from run's, again.
    names = [n for n in CHOSEN_FOR_THE_DATA if not (config.init_from and n in INIT_FROM_CONFLICTS)]
    kept = {name: saved.get(name) for name in names}
    kept.update({name: saved.get(name, before) for name, before in BEFORE_THE_FLAG.items()})
    kept = {
        name: value
        for name, value in kept.items()
        if getattr(config, name) is None and value is not None
    }
    return dataclasses.replace(config, **kept)


def check_same_run(output_dir, config):
    """Refuses to mix two runs in one folder: a folder that holds a run
    (its `config.json`) is resumed only by the same settings. A setting left
    None (chosen for the data) matches what the run chose; those of
    `RESUMABLE_CHANGES` may differ."""
    path = RunFiles(output_dir).config
    if not path.is_file():
        return
    try:
        saved = read_config(path)
    except (OSError, ValueError) as error:
        raise OtherRunInFolder(f"{path} cannot be read ({error}); {WAYS_ON}") from None
    differences = [
        f"{flag_name(field)} {_shown(saved, field.name)} there, {getattr(config, field.name)!r} now"
        for field in dataclasses.fields(config)
        if field.name not in RESUMABLE_CHANGES
        and getattr(config, field.name) is not None
        and _saved(saved, field) != _as_json(getattr(config, field.name))
    ]
    if differences:
        raise OtherRunInFolder(
            f"--output-dir {output_dir} holds a run with other settings: "
            + "; ".join(differences)
            + f". {WAYS_ON}"
        )


def _saved(saved, field):
    """The run's setting of `field`; a flag newer than the run (not in its
    config) had its default's effect there."""
    if field.name in saved:
        return saved[field.name]
    return _as_json(field.default) if field.default is not dataclasses.MISSING else MISSING


MISSING = object()
WAYS_ON = "Give a new --output-dir to keep that run, or --overwrite to delete it and start afresh."


def _shown(saved, name):
    return repr(saved[name]) if name in saved else "not set"


def _as_json(value):
    """`value` as `config.json` gives it back (tuples become lists)."""
    return json.loads(json.dumps(value))


def clear_run(output_dir):
    """`--overwrite`: deletes the run in `output_dir`, every file and folder
    of it but the other processes' (`.worker*`, which they clear
    themselves). Only a folder that holds a run (`config.json`) is
    cleared, so a mistyped `--output-dir` deletes nothing else."""
    output_dir = Path(output_dir)
    if not RunFiles(output_dir).config.is_file():
        return
    print(f"--overwrite: deleting the run in {output_dir}")
    for entry in output_dir.iterdir():
        if entry.name.startswith(".worker"):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def set_precision(precision):
    check_choice("--precision", precision, PRECISIONS)
    keras.config.set_dtype_policy(precision)


# --- Steps every recipe takes ---


def train_tokenizer(config, texts):
    """The tokeniser `config.tokenizer` names, learned from `texts` (a list).
    A subword vocabulary keeps the placeholders frequent in `texts` (`%s`,
    `{name}`, `<b>`: `keras_attention.data.placeholders`) as one token each."""
    if config.tokenizer == "character":
        return CharacterTokenizer.train(texts)
    return SubwordTokenizer.train(texts, config.vocabulary_size, frequent_placeholders(texts))


def warn_if_truncated(what, tokenizer, texts, limit):
    """Says how many training texts have more than `limit` tokens (they are
    truncated); returns that number."""
    lengths = tokenizer.tokenize(tf.constant(texts)).row_lengths().numpy()
    longer = int((lengths > limit).sum())
    if longer:
        print(
            f"WARNING: {longer:,} of {len(texts):,} training {what} have more than {limit} "
            "tokens and are truncated (raise --max-input-length to keep them whole)"
        )
    return longer


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


# --- The outline every recipe follows ---


@dataclasses.dataclass
class Data:
    """What a recipe's `prepare` hands to the rest of the run."""

    config: TrainingConfig  # the run's config, with what was chosen for the data
    tokenizer: typing.Any  # the (source) tokeniser, saved in the run's folder
    train_batches: typing.Callable  # epoch -> that epoch's training batches
    validation: tf.data.Dataset  # the validation batches
    test: tf.data.Dataset  # the test split's examples, unbatched
    description: str  # the data in a few words, for the summary line
    target_tokenizer: typing.Any = None  # a translation's target tokeniser
    label_names: list | None = None  # a classifier's classes, in id order
    validation_examples: tf.data.Dataset | None = None  # the validation split's, unbatched


@dataclasses.dataclass
class Evaluation:
    """What a recipe's `evaluate` hands to `draw`, and its results."""

    results: dict  # written to evaluation.json
    examples: list  # the test examples evaluated, as the recipe reads them
    predictions: list  # the model's output for each


class Recipe:
    """One run of a recipe, in the same order for every recipe: `run()`
    starts the run (seeds, precision, the strategy, its folder and
    config), then calls the parts each recipe fills in, each
    handing what it made to the next:

    1. `prepare(output_dir) -> Data`: the data, the choices made for it and
       the vocabularies (learned from the training split only, saved under
       `output_dir`);
    2. `build_model(data)` and `loss_and_metrics(data)`, under the
       strategy's scope;
    3. (training: `fit`, shared);
    4. `evaluate(model, data, output_dir) -> Evaluation`: the test split's results,
       which `run` writes to `evaluation.json` before saving `model.keras`;
    5. `export(model, output_dir, data)`: the SavedModel for TF Serving
       (unless `--no-export`);
    6. `draw(model, output_dir, data, evaluation, export_path)`: an
       attention map (`export_path` None without an export).
    """

    config_class = TrainingConfig
    model_name = "model"  # how the summary line names the model
    built_in_epochs = 3  # epochs on the built-in dates task
    chosen_final_decay = 0.0  # --final-decay when not given

    def __init__(self, config):
        self.config = config  # completed by what the run chooses for its data
        self.given = config  # the flags as given: what the run may choose is None here

    def prepare(self, output_dir):
        raise NotImplementedError

    def build_model(self, data):
        raise NotImplementedError

    def training_and_validation(self, pipeline, train, train_count, validation):
        """`train_batches(epoch)` and the validation batches, each made by
        `pipeline(data, **batching arguments)` (see `batching`);
        `train_count` is the number of training examples (the shuffle
        buffer). `fit` distributes them as the strategy needs."""

        def train_batches(epoch):
            return pipeline(train, **self.batching(train_count, epoch))

        return train_batches, pipeline(validation, **self.batching())

    def batching(self, train_examples=0, epoch=0):
        """The batching arguments of this run (see `batching`)."""
        return batching(self.config, step_compiles(self.config.jit_compile), train_examples, epoch)

    def read_files(self, read):
        """`{"train": [...], "validation": [...], "test": [...]}` from
        `--train-file`, `--validation-file` and `--test-file`, each read by
        `read(path)`, which returns `(examples, skipped lines)`. A split
        without its own file is held out of the training file by a hash of
        the source (`text_files.hold_out`), so no source is in two splits."""
        config = self.config

        def load(path):
            examples, skipped = read(path)
            if skipped:
                print(f"WARNING: skipped {skipped:,} lines of {path} that lack a column")
            return examples

        train = load(config.train_file)
        splits = {"train": train}
        if not (config.validation_file and config.test_file):
            rest, validation, test = text_files.hold_out(train, config.held_out_share)
            if not validation or not test:
                raise text_files.DataFileError(
                    f"{config.train_file} has too few examples ({len(train)}) to hold out "
                    f"{config.held_out_share:.0%} for validation and for test; add lines, or "
                    "pass --validation-file and --test-file"
                )
            # A split given as a file leaves its held-out share in training.
            splits["train"] = rest + (validation if config.validation_file else [])
            splits["train"] += test if config.test_file else []
            splits.update(validation=validation, test=test)
        for split in ("validation", "test"):
            path = getattr(config, f"{split}_file")
            if path:
                splits[split] = load(path)
        described = []
        for split, examples in splits.items():
            source = getattr(config, f"{split}_file") or f"held out of {config.train_file}"
            described.append(f"{split} {len(examples):,} ({source})")
        print("Examples: " + ", ".join(described))
        return splits

    def initial_run(self, sides):
        """The run `--init-from` names: `(tokenizers, config)`, its tokenisers
        for `sides` ("source", "target" or "text") and `self.config` with
        the run's tokeniser kind and model in place of what would be made
        for the data (None without `--init-from`)."""
        config = self.config
        if not config.init_from:
            return None
        for name in INIT_FROM_CONFLICTS:  # what would make a model or vocabulary anew
            value = getattr(config, name, None)
            if value not in (None, {}, False):
                raise InitFromError(
                    f"--{name.replace('_', '-')} {value!r} (given, or set by --preset) "
                    f"contradicts --init-from {config.init_from}, whose model and tokenizers "
                    "are kept"
                )
        files = RunFiles(config.init_from)
        for needed in (files.config, files.model):
            if not needed.is_file():
                raise InitFromError(
                    f"--init-from {config.init_from} is not a finished run: {needed} not found"
                )
        run_config = read_config(files.config)
        try:
            tokenizers = {side: load_run_tokenizer(files, run_config, side) for side in sides}
        except ValueError as error:
            raise InitFromError(f"--init-from {config.init_from}: {error}") from None
        print(f"Fine-tuning {files.model}: its model and tokenizers ({run_config['tokenizer']})")
        return tokenizers, dataclasses.replace(
            config, tokenizer=run_config["tokenizer"], model_preset=f"from {files.folder}"
        )

    def initial_model(self):
        """The model of `--init-from`'s run (call under the strategy's scope)."""
        import keras_attention.models  # noqa: F401  (registers the model classes)

        return keras.saving.load_model(RunFiles(self.config.init_from).model)

    @property
    def built_in_task(self):
        """Whether this run trains on the built-in dates task, whose defaults
        (characters, the tiny preset, greedy decoding) were tuned for it."""
        return not self.config.train_file and self.config.dataset.startswith("multilingual_dates")

    def choose_for_data(self, texts, **recipe_choices):
        """Fills in the config's fields left None with what suits the
        training `texts` (strings; both languages of a translation), prints
        what it chose, and returns the config. `recipe_choices` are the
        recipe's own fields' choices, used for those left None. The recipe
        goes on with that config (`self.config`)."""
        config = self.config
        built_in = self.built_in_task
        choices = dict(
            tokenizer="character" if built_in else "subword",
            vocabulary_size=vocabulary_size_for(texts),
            # On real text (20,000 English-French pairs), a larger model (3+3
            # layers, d_model 128) was behind tiny after as many epochs and
            # 1.8x slower a step: within about 10 minutes, tiny learns more.
            model_preset="tiny",
            batch_tokens=0,  # none: batches of --batch-size sentences
            final_decay=self.chosen_final_decay,
        )
        choices.update(recipe_choices)
        given = config.batch_tokens
        by_tokens = bool(choices["batch_tokens"] if given is None else given)
        choices["epochs"] = self.built_in_epochs if built_in else epochs_for(texts, by_tokens)
        if config.time_budget:
            choices["final_decay"] = DECAY_SHARE
            choices.pop("epochs")  # planned by the budget, --epochs at most
        if config.init_from:  # the run's vocabulary and model are kept
            choices.pop("vocabulary_size"), choices.pop("model_preset")
        chosen = {name: value for name, value in choices.items() if getattr(config, name) is None}
        config = dataclasses.replace(config, **chosen)
        if config.tokenizer == "character":
            chosen.pop("vocabulary_size", None)  # not used
        for name in ("batch_tokens", "final_decay"):
            if not chosen.get(name, True):
                chosen.pop(name)  # none: as before they were flags
        if chosen:
            print(
                "Chosen for the data (set these flags to choose otherwise): "
                + ", ".join(as_flag(name, value) for name, value in chosen.items())
            )
        self.config = config  # what `batching` reads
        return config

    def loss_and_metrics(self, data):
        return MaskedSparseCrossentropy(), [MaskedAccuracy()]

    def evaluate(self, model, data, output_dir):
        raise NotImplementedError

    def export_arguments(self, data):
        """What this recipe's export takes beyond the tokenisers (see
        `keras_attention.export.export_model`)."""
        return {}

    def export(self, model, output_dir, data):
        """Exports `model` with its tokenisers for TF Serving (see
        `keras_attention.export.export_model`, which also writes the base
        folder's `models.config` and `batching_parameters.txt`) and returns
        the version folder."""
        config = data.config
        base = Path(config.export_dir or RunFiles(output_dir).serving)
        return export_run(
            model,
            output_dir,
            base,
            config,
            data.tokenizer,
            data.target_tokenizer,
            **self.export_arguments(data),
        )

    def draw(self, model, output_dir, data, evaluation, export_path):
        raise NotImplementedError

    def run(self):
        # `output_dir` is this process's: workers other than the chief write apart.
        strategy, output_dir, self.config = start_run(self.config)
        data = self.prepare(output_dir)
        config = data.config  # with what `prepare` chose for the data
        strategy.batches_of(global_batch(config))
        files = RunFiles(output_dir)
        write_json(files.config, dataclasses.asdict(config))
        with strategy.scope():
            model = self.build_model(data)
            loss, metrics = self.loss_and_metrics(data)
            rate = learning_rate(config, model.model_dim)
            model.compile(
                optimizer=make_optimizer(config, rate),
                loss=loss,
                # Weighted: a batch filled with empty rows weighs them 0
                # (`strategy.fill_and_share`); unweighted batches count alike.
                weighted_metrics=metrics,
                jit_compile=step_compiles(config.jit_compile),
            )
        print(
            f"{self.model_name} ({config.model_preset}): {model.count_params():,} parameters, "
            f"{data.description}, strategy {config.strategy} "
            f"({strategy.num_replicas_in_sync} replicas), precision {config.precision}"
        )
        note = precision_note(config.precision, bfloat16_flags())
        if note:
            print(note)
        # The attention of a few validation examples, drawn into TensorBoard
        # every epoch.
        examples = watched_examples(data)
        watched = [AttentionImages(examples, output_dir)] if examples else []
        decay = rate if isinstance(rate, DecayToEnd) else None
        budget = None
        if config.time_budget:
            budget = TimeBudget(
                config.time_budget,
                RunFiles(config.output_dir).checkpoints,
                decay,
                writer=files.folder == RunFiles(config.output_dir).folder,
                max_epochs=config.epochs,
            )
        training_seconds = fit(
            model,
            strategy,
            data.train_batches,
            data.validation,
            config,
            output_dir,
            watched,
            budget,
            decay,
        )
        used = {}
        weights = keep_the_better_weights(
            model,
            strategy,
            data.validation,
            resume.Checkpoints(RunFiles(config.output_dir).checkpoints, writer=False),
            config.average_last,
        )
        if weights is not None:
            used["weights"] = weights
        if budget is not None:
            used["time_budget"] = budget.summary(training_seconds)
            data.config = dataclasses.replace(data.config, epochs=budget.plan.epochs)
            print(
                f"Time budget {budget.minutes:g} min: {budget.plan.epochs} epochs trained, "
                f"{used['time_budget']['used_minutes']:.1f} min of training"
            )
        evaluation = self.evaluate(model, data, output_dir)
        results = {
            **evaluation.results,
            "training_seconds": round(training_seconds, 1),
            **used,
        }
        print(f"(trained in {training_seconds:.0f} s)")
        write_json(files.evaluation, results)
        write_json(files.config, dataclasses.asdict(data.config))  # with what evaluation chose
        if not strategy.saves:
            print(f"Process {strategy.worker_index}: done; process 0 writes the run's files.")
            return results
        with saving_alone():
            model.save(files.model)
        export_path = self.export(model, output_dir, data) if config.export else None
        picture = self.draw(model, output_dir, data, evaluation, export_path)
        if export_path is None:
            export_path = f"none (--no-export: python -m keras_attention.export {output_dir})"
        print(
            f"\nmodel: {files.model}\nevaluation: {files.evaluation}\n"
            f"TF Serving export: {export_path}\nattention map: {picture}"
        )
        return results


def draw_self_attention(model, ids, vocabulary, output_dir, title):
    """Saves the last layer's self-attention over one sequence `ids [1, T]`
    as `attention.png`, tokens on both axes, and returns its path."""
    weights = visualize.attention_maps(model, ids)["self_attention"][-1]
    tokens = [vocabulary[i] for i in ids[0]]
    picture = RunFiles(output_dir).attention_picture
    visualize.plot_attention(weights[0], tokens, tokens, path=picture, title=title)
    return picture
