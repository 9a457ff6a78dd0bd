"""What every recipe shares: config and flags, strategies, precision, the
loss and learning-rate schedule of the paper, callbacks, safe file writes."""

import argparse
import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import time
import typing
from pathlib import Path

import keras
import tensorflow as tf

from keras_attention import visualize
from keras_attention.data import datasets, text_files
from keras_attention.data.tokenizers import TOKENIZERS, CharacterTokenizer, SubwordTokenizer
from keras_attention.export import export_model, write_models_config
from keras_attention.export import versions as export_versions
from keras_attention.files import write_atomically, write_json  # noqa: F401
from keras_attention.recipes import resume

# The loss, metric and schedule the recipes compile with live in the package
# (so a saved model loads after `import keras_attention`); re-exported here.
from keras_attention.training import (  # noqa: F401
    MaskedAccuracy,
    MaskedSparseCrossentropy,
    TransformerSchedule,
)
from keras_attention.utils import check_choice

# What each backend trains under: tf.distribute strategies on TensorFlow,
# keras.distribution on JAX.
BACKEND_STRATEGIES = {
    "tensorflow": ("default", "mirrored", "multi_worker", "tpu"),
    "jax": ("default", "data_parallel"),
}
STRATEGIES = tuple(dict.fromkeys(name for names in BACKEND_STRATEGIES.values() for name in names))
SCHEDULES = ("constant", "warmup")
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")


# --- Config: a dataclass, one flag per field, the field's help as its help ---


def flag(default, help, *, positive=False, choices=None):
    """A config field and its command-line flag: the default, the help text,
    and what it accepts (`positive`: > 0 when given; `choices`: one of these).
    A mutable default (a dict) is copied for every config."""
    metadata = {"help": help, "positive": positive, "choices": tuple(choices or ())}
    if isinstance(default, dict):
        return dataclasses.field(default_factory=lambda: dict(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def document_flags(config_class):
    """Adds the command's flags, with each field's help, to the config's
    docstring, so the API reference lists them."""
    lines = [
        f"- `{flag_name(field)}` (default `{_default(field)!r}`): {field.metadata['help']}"
        for field in dataclasses.fields(config_class)
    ]
    config_class.__doc__ = (
        (config_class.__doc__ or "").rstrip() + "\n\nFlags:\n\n" + "\n".join(lines)
    )
    return config_class


def flag_name(field):
    return "--" + field.name.replace("_", "-")


def _default(field):
    if field.default is not dataclasses.MISSING:
        return field.default
    return field.default_factory()


@document_flags
@dataclasses.dataclass
class TrainingConfig:
    """The fields every recipe has; each recipe's config adds its own."""

    train_file: str | None = flag(
        None, "your own training data, a UTF-8 text file (see the help above); replaces --dataset"
    )
    validation_file: str | None = flag(
        None, "your own validation data; None: held out of --train-file"
    )
    test_file: str | None = flag(None, "your own test data; None: held out of --train-file")
    held_out_share: float = flag(
        0.05, "share of --train-file held out for validation, and again for test", positive=True
    )
    skip_bad_lines: bool = flag(
        False, "skip (and count) lines of the files that lack a column, instead of stopping"
    )
    data_dir: str | None = flag(None, "TFDS data folder; None uses TFDS's default")
    tokenizer: str | None = flag(
        None, "character, or subword (SentencePiece); None: chosen for the data", choices=TOKENIZERS
    )
    vocabulary_size: int | None = flag(
        None,
        "subword vocabulary size, reserved ids included; None: chosen for the data",
        positive=True,
    )
    model_preset: str | None = flag(
        None, "the builder's preset, e.g. tiny, base, big; None: tiny (see the docs)"
    )
    model_overrides: dict = flag(
        {}, 'builder arguments, as JSON: \'{"dropout": 0.1, "num_layers": 3}\''
    )
    train_examples: int | None = flag(
        None, "use only the first N training examples (quick runs)", positive=True
    )
    test_examples: int | None = flag(
        None, "evaluate on only the first N test examples", positive=True
    )
    max_length: int = flag(48, "tokens kept per sequence; longer ones are truncated", positive=True)
    batch_size: int = flag(64, "global batch size, split over the replicas", positive=True)
    epochs: int | None = flag(
        None, "passes over the training split; None: chosen for the data", positive=True
    )
    shuffle: bool = flag(True, "reshuffle the training examples every epoch")
    learning_rate: float = flag(2e-3, "peak learning rate (constant schedule)", positive=True)
    schedule: str = flag(
        "constant", "constant, or warmup: the paper's rsqrt schedule", choices=SCHEDULES
    )
    warmup_steps: int = flag(4000, "linear warm-up steps of the warmup schedule", positive=True)
    adam_beta_1: float = flag(0.9, "Adam beta_1")
    adam_beta_2: float = flag(0.98, "Adam beta_2 (the paper's 0.98)")
    adam_epsilon: float = flag(1e-9, "Adam epsilon (the paper's 1e-9)")
    strategy: str = flag(
        "default",
        "TensorFlow: default, mirrored, multi_worker or tpu; "
        "JAX: default or data_parallel (keras.distribution, every device)",
        choices=STRATEGIES,
    )
    precision: str = flag("float32", "float32, mixed_float16 or mixed_bfloat16", choices=PRECISIONS)
    jit_compile: bool = flag(
        False, "compile the train step with XLA (on JAX it always is: jax.jit)"
    )
    checkpoint_every: int = flag(500, "steps between checkpoints (resume points)", positive=True)
    seed: int = flag(0, "seed of weights, shuffling, dropout and sampling")
    deterministic: bool = flag(
        False, "deterministic TF ops: the same seed, the same weights (slower)"
    )
    output_dir: str = flag("runs/train", "where everything of this run is written")
    export_dir: str | None = flag(None, "TF Serving base folder; None: <output-dir>/serving")
    export_name: str = flag(
        "model", "the model's name in TF Serving: <export-dir>/<name>/<version>"
    )
    export_version: int | None = flag(
        None, "None: one more than the highest version there", positive=True
    )
    overwrite_export: bool = flag(False, "replace --export-version if it already exists")

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.metadata["choices"] and value is not None:
                check_choice(flag_name(field), value, field.metadata["choices"])
            if field.metadata["positive"]:
                check_positive(flag_name(field), value)
        if not self.held_out_share < 0.5:
            raise ValueError(f"--held-out-share must be below 0.5; got {self.held_out_share}")
        for name in ("validation_file", "test_file"):
            if getattr(self, name) and not self.train_file:
                raise ValueError(f"--{name.replace('_', '-')} needs --train-file")
        backend = keras.backend.backend()
        if backend not in BACKEND_STRATEGIES:
            raise ValueError(
                f"the recipes train on KERAS_BACKEND tensorflow or jax; got {backend!r}"
            )
        if self.strategy not in BACKEND_STRATEGIES[backend]:
            raise ValueError(
                f"--strategy {self.strategy} is not for KERAS_BACKEND={backend}; "
                f"choose {' or '.join(BACKEND_STRATEGIES[backend])}"
            )
        if backend == "tensorflow" and self.jit_compile and self.deterministic:
            raise ValueError(
                "--jit-compile and --deterministic do not combine on TensorFlow: Keras "
                "turns XLA off while deterministic ops are on (XLA has no deterministic "
                "kernel for every op). Drop one of the two."
            )
        if not isinstance(self.model_overrides, dict):
            raise ValueError(
                "--model-overrides must be a JSON object of builder arguments; "
                f"got {self.model_overrides!r}"
            )


def main(recipe_class, presets, argv=None, description=None):
    """A recipe's command: parses the flags into `recipe_class.config_class`
    and runs the recipe.

    What the user must act on (data that is not there, checkpoints that
    cannot be read, a loss that diverged, an export version that exists)
    ends with its message and exit status 1, not a traceback.
    """
    config = parse_config(recipe_class.config_class, presets, argv, description=description)
    try:
        return recipe_class(config).run()
    except (
        datasets.DataNotFound,
        resume.UnreadableCheckpoints,
        resume.TrainingDiverged,
        text_files.DataFileError,
        FileExistsError,
        ExportFailed,
    ) as error:
        raise SystemExit(f"error: {error}") from None


def parse_config(config_class, presets, argv=None, description=None):
    """Builds the config from `--preset` and then one flag per field.

    Flags override the preset's values; the preset overrides the defaults.
    Bad values exit with a message naming the flag (argparse), not a traceback.
    """
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--preset",
        choices=sorted(presets),
        default=next(iter(presets)),
        help="named settings; the flags below override them",
    )
    for field in dataclasses.fields(config_class):
        kind = _value_type(field)
        help_text = field.metadata["help"]
        if kind is bool:
            parser.add_argument(
                flag_name(field),
                action=argparse.BooleanOptionalAction,
                default=None,
                help=help_text,
            )
        else:
            parser.add_argument(
                flag_name(field),
                type=_json_object if kind is dict else kind,
                default=None,
                help=help_text,
                metavar="JSON" if kind is dict else kind.__name__.upper(),
            )
    args = vars(parser.parse_args(argv))
    values = dict(presets[args.pop("preset")])
    values.update({name: value for name, value in args.items() if value is not None})
    try:
        config = config_class(**values)
    except ValueError as error:
        parser.error(str(error))
    return config


def _value_type(field):
    """`int` from `int`, and from `int | None`."""
    kinds = [
        kind for kind in typing.get_args(field.type) or (field.type,) if kind is not type(None)
    ]
    return kinds[0]


def _json_object(text):
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"not JSON ({error}): {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(
            f"a JSON object is needed, like '{{\"dropout\": 0.1}}'; got {text!r}"
        )
    return value


def check_positive(flag, value):
    if value is not None and not value > 0:
        raise ValueError(f"{flag} must be positive; got {value!r}")


# --- Strategy and precision ---


def make_strategy(name):
    """What the run trains under, made before the model: a tf.distribute
    strategy on TensorFlow, a `JaxStrategy` on JAX; both give `scope()`
    and `num_replicas_in_sync`."""
    check_choice("--strategy", name, STRATEGIES)
    if keras.backend.backend() == "jax":
        return JaxStrategy(name)
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    # Needs TF_CONFIG (the cluster and this worker's index) in the environment.
    from keras_attention.recipes import multi_worker

    multi_worker.patch()  # model.fit under this strategy needs two fixes in Keras 3
    return tf.distribute.MultiWorkerMirroredStrategy()


# Set by a multi-host launcher (see `JaxStrategy`); read by keras.distribution.initialize.
MULTI_HOST_VARIABLES = ("KERAS_DISTRIBUTION_JOB_ADDRESSES", "KERAS_DISTRIBUTION_NUM_PROCESSES")


class JaxStrategy:
    """A JAX run's devices, with what the recipes ask of a tf.distribute
    strategy: `scope()`, `num_replicas_in_sync` and which process this is.

    `default`: one device, as Keras places it. `data_parallel`:
    `keras.distribution.DataParallel` over every device of every process
    (the weights copied on each, every batch split between them), set for
    the whole run. When `KERAS_DISTRIBUTION_JOB_ADDRESSES` and
    `KERAS_DISTRIBUTION_NUM_PROCESSES` are set (a multi-host job, with
    `KERAS_DISTRIBUTION_PROCESS_ID` per process), `keras.distribution.
    initialize()` joins the processes first, and each process reads its
    share of every batch.
    """

    def __init__(self, name):
        import jax

        self.distribution = None
        if name == "data_parallel":
            if all(os.environ.get(variable) for variable in MULTI_HOST_VARIABLES):
                keras.distribution.initialize()
            self.distribution = keras.distribution.DataParallel()
            keras.distribution.set_distribution(self.distribution)
        self.num_replicas_in_sync = jax.device_count() if self.distribution else 1
        self.process_index = jax.process_index()

    def scope(self):
        return contextlib.nullcontext()  # set for the whole run


def is_chief(strategy):
    """Whether this process writes the run's files (worker 0, or the only one)."""
    if isinstance(strategy, JaxStrategy):
        return strategy.process_index == 0
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.cluster_spec().as_dict():
        return True
    return resolver.task_type in (None, "chief") or (
        resolver.task_type == "worker"
        and resolver.task_id == 0
        and "chief" not in resolver.cluster_spec().as_dict()
    )


def worker_index(strategy):
    if isinstance(strategy, JaxStrategy):
        return strategy.process_index
    return strategy.cluster_resolver.task_id


def shard_by_data(dataset):
    """Every worker reads the same batches and keeps its replicas' share of
    each, so the global batch is what a single process would see."""
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.with_options(options)


def set_op_determinism(enabled):
    """TensorFlow's deterministic ops on or off, as the run asks. Off too,
    because the setting is global: a run started in the same process after
    a `--deterministic` one (tests, notebooks) would otherwise stay
    deterministic, and Keras would silently drop its `--jit-compile`."""
    if enabled:
        tf.config.experimental.enable_op_determinism()
        return
    # TensorFlow has no public switch back (2.21).
    from tensorflow.python.framework import config as tf_config

    if tf_config.is_op_determinism_enabled():
        tf_config.disable_op_determinism()


def start_run(config):
    """Seeds, precision and strategy (made before anything else touches
    TensorFlow's devices), the run's folder, and its resolved config.

    Returns `(strategy, output_dir)`. Workers other than the chief write
    under `output_dir/.workerN/`, beside, not over, the chief's files.
    """
    keras.utils.set_random_seed(config.seed)
    set_op_determinism(config.deterministic)
    set_precision(config.precision)
    strategy = make_strategy(config.strategy)
    if isinstance(strategy, JaxStrategy) and config.batch_size % strategy.num_replicas_in_sync:
        raise SystemExit(
            f"error: --batch-size {config.batch_size} does not split evenly over the "
            f"{strategy.num_replicas_in_sync} devices of --strategy {config.strategy}"
        )
    output_dir = Path(config.output_dir)
    if not is_chief(strategy):
        output_dir = output_dir / f".worker{worker_index(strategy)}"
    output_dir.mkdir(parents=True, exist_ok=True)
    write_json(output_dir / "config.json", dataclasses.asdict(config))
    return strategy, output_dir


def vocabulary_size_for(texts):
    """A subword vocabulary size for a corpus: a quarter of its distinct
    words, rounded to 500, from 500 to 8,000 (the tensorflow.org Transformer
    tutorial's size for 50,000 sentence pairs)."""
    distinct_words = len({word for text in texts for word in text.split()})
    return min(8000, max(500, round(distinct_words / 4 / 500) * 500))


# Words of training text (both sides of a translation counted) that the
# tiny preset trains on in about 8 minutes on 2 CPU cores, leaving 2 for the
# rest of a 10-minute run: measured, 860,000 words of the English-French
# corpus of `examples/build_french_corpus.py` an epoch, in 199 s.
WORDS_IN_TEN_MINUTES = 2_000_000


def epochs_for(texts):
    """Epochs for a corpus: as many as fit in about 10 minutes on 2 CPU
    cores (see `WORDS_IN_TEN_MINUTES`), from 1 to 20."""
    words = sum(len(text.split()) for text in texts)
    return min(20, max(1, round(WORDS_IN_TEN_MINUTES / max(words, 1))))


def train_tokenizer(config, texts):
    """The tokeniser `config.tokenizer` names, learned from `texts` (a list)."""
    if config.tokenizer == "character":
        return CharacterTokenizer.train(texts)
    return SubwordTokenizer.train(texts, config.vocabulary_size)


def warn_if_truncated(what, tokenizer, texts, limit):
    """Says how many training texts have more than `limit` tokens (they are
    truncated); returns that number."""
    lengths = tokenizer.tokenize(tf.constant(texts)).row_lengths().numpy()
    longer = int((lengths > limit).sum())
    if longer:
        print(
            f"WARNING: {longer:,} of {len(texts):,} training {what} have more than {limit} "
            "tokens and are truncated (raise --max-length to keep them whole)"
        )
    return longer


def vocabulary_file(config, side):
    return f"{side}_vocabulary.{'txt' if config.tokenizer == 'character' else 'model'}"


def make_optimizer(config, model_dim):
    """Adam, with a constant learning rate or the paper's warm-up schedule."""
    if config.schedule == "warmup":
        learning_rate = TransformerSchedule(model_dim, config.warmup_steps)
    else:
        learning_rate = config.learning_rate
    return keras.optimizers.Adam(
        learning_rate,
        beta_1=config.adam_beta_1,
        beta_2=config.adam_beta_2,
        epsilon=config.adam_epsilon,
    )


def compiles_step(config):
    """Whether the train step is compiled by XLA: with --jit-compile, and
    always on JAX (`jax.jit`)."""
    return config.jit_compile or keras.backend.backend() == "jax"


def batching(config, train_examples=0, epoch=0):
    """The batching arguments of `keras_attention.data.pipeline` for this run.

    For training (`train_examples`, the size of the shuffle buffer, given):
    shuffled with the seed `seed + epoch`, so every epoch's order is fixed
    and a resumed run sees the batches the killed one would have; full
    batches only, so every replica gets an equal share (a cluster trains
    like one process) and shapes stay static for XLA and TPUs.
    """
    arguments = dict(
        batch_size=config.batch_size,
        max_length=config.max_length,
        pad_to_max_length=compiles_step(config),  # one shape: the step compiles once
    )
    if train_examples:
        arguments.update(
            shuffle_buffer=train_examples if config.shuffle else 0,
            seed=config.seed + epoch,
            drop_remainder=True,
        )
    return arguments


def distribute(config, dataset):
    """Multi-worker runs read every batch on every worker (see `shard_by_data`)."""
    return shard_by_data(dataset) if config.strategy == "multi_worker" else dataset


def fit(model, strategy, train_batches, validation, config, output_dir):
    """`model.fit`, one epoch at a time, resumable at any step (see
    `resume.py`), with TensorBoard logs and a stop on NaN; returns the
    training time in seconds.

    `train_batches(epoch)` gives that epoch's training batches, the same
    ones every time it is asked. Every worker resumes from the chief's
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
    """
    checkpoints = resume.Checkpoints(
        Path(config.output_dir) / "checkpoints",
        writer=Path(output_dir) == Path(config.output_dir),
    )
    with strategy.scope():  # the optimizer's variables are built here
        start = checkpoints.restore(model)
    if start.epoch >= config.epochs:
        print(f"Training is complete ({config.epochs} epochs); evaluating.")
    # The same every epoch: batches are full and drawn from buckets of
    # lengths, so their number does not depend on the order.
    steps_per_epoch = count_batches(train_batches(start.epoch))
    # The same for the validation pass, which would otherwise warn that its
    # input "ran out of data" at the end of every epoch.
    validation_steps = count_batches(validation) if validation is not None else None
    tensorboard = keras.callbacks.TensorBoard(str(output_dir / "logs"))
    progress = resume.EpochProgress(config.epochs)
    started = time.time()
    for epoch in range(start.epoch, config.epochs):
        position = start if epoch == start.epoch else resume.Position(epoch)
        if position.step >= steps_per_epoch:
            continue  # killed between the epoch's last step and its end
        # A fresh dataset: its first pass has the order the killed run's had.
        model.fit(
            train_batches(epoch).skip(position.step),
            steps_per_epoch=steps_per_epoch - position.step,
            shuffle=False,  # the pipeline shuffles, with a seed per epoch
            validation_data=validation,
            validation_steps=validation_steps,
            initial_epoch=epoch,
            epochs=epoch + 1,
            verbose=2,
            callbacks=[
                # First the NaN check, so no checkpoint keeps broken weights.
                resume.StopOnNaN(position),
                resume.SaveEvery(checkpoints, config.checkpoint_every, position),
                tensorboard,
                progress,
            ],
        )
    return time.time() - started


def count_batches(dataset):
    """The number of batches in one pass of `dataset`."""
    return int(dataset.reduce(0, lambda count, _: count + 1))


# --- The outline every recipe follows ---


class Recipe:
    """One run of a recipe, in the same order for every recipe: `run()`
    starts the run (seeds, precision, strategy, its folder and config), then
    calls the parts each recipe fills in:

    1. `prepare(output_dir)`: the data and the vocabularies (learned from the
       training split only, saved under `output_dir`); returns
       `train_batches(epoch)`, the validation batches and a short description
       of the data for the summary line;
    2. `build_model()` and `loss_and_metrics()`, under the strategy's scope;
    3. (training: `fit`, shared);
    4. `evaluate(model)`: the test split's results, a dict, which `run`
       writes to `evaluation.json` before saving `model.keras`;
    5. `export(model, output_dir)`: the SavedModel for TF Serving;
    6. `draw(model, output_dir, export_path)`: an attention map.
    """

    config_class = TrainingConfig
    model_name = "model"  # how the summary line names the model
    built_in_epochs = 3  # epochs on the built-in dates task

    def __init__(self, config):
        self.config = config

    def prepare(self, output_dir):
        raise NotImplementedError

    def build_model(self):
        raise NotImplementedError

    def training_and_validation(self, pipeline, train, train_count, validation):
        """`train_batches(epoch)` and the validation batches, each made by
        `pipeline(data, **batching arguments)` (see `batching`) and
        distributed as the strategy needs; `train_count` is the number of
        training examples (the shuffle buffer)."""
        config = self.config

        def train_batches(epoch):
            return distribute(config, pipeline(train, **batching(config, train_count, epoch)))

        return train_batches, distribute(config, pipeline(validation, **batching(config)))

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

    @property
    def built_in_task(self):
        """Whether this run trains on the built-in dates task, whose defaults
        (characters, the tiny preset, greedy decoding) were tuned for it."""
        return not self.config.train_file and self.config.dataset.startswith("multilingual_dates")

    def choose_for_data(self, texts, **recipe_choices):
        """Fills in the config's fields left None with what suits the
        training `texts` (strings; both languages of a translation), prints
        what it chose, and returns the config. `recipe_choices` are the
        recipe's own fields' choices, used for those left None."""
        config = self.config
        built_in = self.built_in_task
        choices = dict(
            tokenizer="character" if built_in else "subword",
            vocabulary_size=vocabulary_size_for(texts),
            # On real text (20,000 English-French pairs), a larger model (3+3
            # layers, d_model 128) was behind tiny after as many epochs and
            # 1.8x slower a step: within about 10 minutes, tiny learns more.
            model_preset="tiny",
            epochs=self.built_in_epochs if built_in else epochs_for(texts),
            **recipe_choices,
        )
        chosen = {name: value for name, value in choices.items() if getattr(config, name) is None}
        self.config = dataclasses.replace(config, **chosen)
        if self.config.tokenizer == "character":
            chosen.pop("vocabulary_size", None)  # not used
        if chosen:
            print(
                "Chosen for the data (set these flags to choose otherwise): "
                + ", ".join(f"--{name.replace('_', '-')} {value}" for name, value in chosen.items())
            )
        return self.config

    def loss_and_metrics(self):
        return MaskedSparseCrossentropy(), [MaskedAccuracy()]

    def evaluate(self, model):
        raise NotImplementedError

    def export(self, model, output_dir, target_tokenizer=None, **kwargs):
        """Exports `model` with `self.tokenizer` for TF Serving (see
        `keras_attention.export`) and returns the version folder. The base
        folder also gets `models.config`, listing every model in it as the
        server sees them with the folder mounted at `/models`, and
        `batching_parameters.txt`."""
        config = self.config
        base = Path(config.export_dir or output_dir / "serving")
        if keras.backend.backend() != "tensorflow":
            return export_with_tensorflow(output_dir, base, config)
        version = export_model(
            model,
            base,
            config.export_name,
            self.tokenizer,
            target_tokenizer,
            max_length=config.max_length,
            version=config.export_version,
            overwrite=config.overwrite_export,
            config=dataclasses.asdict(config),
            **kwargs,
        )
        names = sorted(folder.name for folder in base.iterdir() if export_versions(folder))
        write_models_config(base / "models.config", {name: f"/models/{name}" for name in names})
        return version

    def draw(self, model, output_dir, export_path):
        raise NotImplementedError

    def run(self):
        config = self.config
        strategy, output_dir = start_run(config)
        self.output_dir = output_dir  # this process's: workers other than the chief write apart
        train_batches, validation, data_description = self.prepare(output_dir)
        config = self.config  # with what `prepare` chose for the data
        write_json(output_dir / "config.json", dataclasses.asdict(config))
        with strategy.scope():
            model = self.build_model()
            loss, metrics = self.loss_and_metrics()
            model.compile(
                optimizer=make_optimizer(config, model.model_dim),
                loss=loss,
                metrics=metrics,
                jit_compile=compiles_step(config),
            )
        print(
            f"{self.model_name} ({config.model_preset}): {model.count_params():,} parameters, "
            f"{data_description}, strategy {config.strategy} "
            f"({strategy.num_replicas_in_sync} replicas), precision {config.precision}"
        )
        training_seconds = fit(model, strategy, train_batches, validation, config, output_dir)
        results = {**self.evaluate(model), "training_seconds": round(training_seconds, 1)}
        print(f"(trained in {training_seconds:.0f} s)")
        write_json(output_dir / "evaluation.json", results)
        model_path = output_dir / "model.keras"
        model.save(model_path)
        export_path = self.export(model, output_dir)
        picture = self.draw(model, output_dir, export_path)
        print(
            f"\nmodel: {model_path}\nevaluation: {output_dir / 'evaluation.json'}\n"
            f"TF Serving export: {export_path}\nattention map: {picture}"
        )
        return results


class ExportFailed(RuntimeError):
    """The export command, run for a model trained on another backend, failed."""


def export_with_tensorflow(output_dir, base, config):
    """A run trained on another backend (JAX) is exported from its saved
    `model.keras` by `python -m keras_attention.export`, which runs on
    TensorFlow; returns the version folder."""
    command = [sys.executable, "-m", "keras_attention.export", str(output_dir), "--base", str(base)]
    command += ["--name", config.export_name]
    if config.export_version:
        command += ["--version", str(config.export_version)]
    if config.overwrite_export:
        command.append("--overwrite")
    print(f"Exporting with TensorFlow: {' '.join(command[1:])}", flush=True)
    environment = {**os.environ, "KERAS_BACKEND": "tensorflow"}
    environment.pop("XLA_FLAGS", None)  # the JAX run's device settings
    result = subprocess.run(command, env=environment, capture_output=True, text=True)
    if result.returncode:
        raise ExportFailed(f"{' '.join(command[1:])} failed:\n{result.stderr[-3000:].strip()}")
    return Path(result.stdout.strip().splitlines()[-1].split(" to ")[-1])


def draw_self_attention(model, ids, vocabulary, output_dir, title):
    """Saves the last layer's self-attention over one sequence `ids [1, T]`
    as `attention.png`, tokens on both axes, and returns its path."""
    weights = visualize.attention_maps(model, ids)["self_attention"][-1]
    tokens = [vocabulary[i] for i in ids[0]]
    picture = output_dir / "attention.png"
    visualize.plot_attention(weights[0], tokens, tokens, path=picture, title=title)
    return picture


def set_precision(precision):
    check_choice("--precision", precision, PRECISIONS)
    keras.config.set_dtype_policy(precision)
