"""A recipe's config: a dataclass whose fields are its command-line flags,
the flags every recipe has (`TrainingConfig`), parsing them with presets,
and `main`, which runs a recipe and turns what a user must act on into a
message."""

import argparse
import dataclasses
import json
import shlex
import sys
import textwrap
import typing

from keras_attention.data import datasets, text_files
from keras_attention.data.tokenizers import TOKENIZERS
from keras_attention.export.run import ExportFailed
from keras_attention.models.zoo_model import UnknownArgument
from keras_attention.recipes import jax_job, resume
from keras_attention.recipes.strategy import STRATEGIES, check_backend_options
from keras_attention.recipes.time_budget import TimeBudgetTooShort
from keras_attention.renamed import warn_of_renamed_flags
from keras_attention.utils import check_choice

SCHEDULES = ("constant", "warmup")
# The tokenizers of converted checkpoints, which only `--init-from` brings.
CONVERTED_TOKENIZERS = ("mapped_subword", "wordpiece", "byte_level_bpe")
# Flags that make a model or a vocabulary, which `--init-from` takes from its run.
INIT_FROM_CONFLICTS = (
    "tokenizer",
    "vocabulary_size",
    "model_preset",
    "model_overrides",
    "shared_vocabulary",
    "chunk_size",
)
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
# Flags a run in its folder may be resumed with, changed: they do not change
# what the checkpoints there hold.
RESUMABLE_CHANGES = (
    "output_dir",  # the same folder, perhaps written another way
    "epochs",
    "time_budget",  # a run whose budget was planned keeps it (time_budget.py)
    "join_timeout",
    "checkpoint_every",
    "test_examples",
    "data_dir",
    "export",
    "export_dir",
    "export_name",
    "export_version",
    "overwrite_export",
    "export_jit_compile",
    "overwrite",
    # evaluation and export settings: the checkpoints do not hold them
    "max_decoding_length",
    "length_penalty",
    "tune_decoding",
    "average_last",  # which weights are kept after training, not what training did
)
# Flags renamed, old -> new: the old name still works, with a FutureWarning.
RENAMED_FLAGS = {"--max-length": "--max-input-length"}


class InitFromError(ValueError):
    """`--init-from` names no finished run, or a flag contradicts it."""


class OtherRunInFolder(ValueError):
    """`--output-dir` holds a run with other settings."""


# --- Config: a dataclass, one flag per field, the field's help as its help ---


def flag(default, help, *, positive=False, non_negative=False, choices=None):
    """A config field and its command-line flag: the default, the help text,
    and what it accepts when given (`positive`: > 0; `non_negative`: >= 0;
    `choices`: one of these). A mutable default (a dict) is copied for
    every config."""
    metadata = {
        "help": help,
        "positive": positive,
        "non_negative": non_negative,
        "choices": tuple(choices or ()),
    }
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
    init_from: str | None = flag(
        None,
        "a finished run to fine-tune (a recipe's, or a checkpoint converted by python -m "
        "keras_attention.convert): its model and tokenizers are kept, not made anew",
    )
    tokenizer: str | None = flag(
        None,
        "character, or subword (SentencePiece); None: chosen for the data "
        "(mapped_subword, wordpiece, byte_level_bpe: a converted checkpoint's, kept by "
        "--init-from)",
        choices=(*TOKENIZERS, *CONVERTED_TOKENIZERS),
    )
    vocabulary_size: int | None = flag(
        None,
        "subword vocabulary size, reserved ids included; None: chosen for the data",
        positive=True,
    )
    model_preset: str | None = flag(None, "the builder's named size; None: tiny")
    model_overrides: dict = flag(
        {}, 'builder arguments, as JSON: \'{"dropout": 0.1, "num_layers": 3}\''
    )
    train_examples: int | None = flag(
        None, "use only the first N training examples (quick runs)", positive=True
    )
    test_examples: int | None = flag(
        None, "evaluate on only the first N test examples", positive=True
    )
    max_input_length: int = flag(
        48,
        "tokens kept per sequence read: a training text (both sides of a pair) and a "
        "request's input; longer ones are truncated",
        positive=True,
    )
    batch_size: int = flag(64, "global batch size, split over the replicas", positive=True)
    batch_tokens: int | None = flag(
        None,
        "cut training and validation batches by tokens, not sentences: a batch padded to "
        "W tokens holds N // W sequences (then --batch-size is not used for them); 0: "
        "batches of --batch-size; None: chosen (translation: 1024 from 10,000 training "
        "pairs, else 0)",
        non_negative=True,
    )
    epochs: int | None = flag(
        None,
        "passes over the training split; None: chosen for the data (with --time-budget: "
        "the most planned)",
        positive=True,
    )
    time_budget: float | None = flag(
        None,
        "minutes of training, validation included: the first steps are timed, the "
        "epochs planned to fit, and the learning rate decays to 0 at the end",
        positive=True,
    )
    shuffle: bool = flag(True, "reshuffle the training examples every epoch")
    learning_rate: float = flag(2e-3, "peak learning rate (constant schedule)", positive=True)
    schedule: str = flag(
        "constant", "constant, or warmup: the paper's rsqrt schedule", choices=SCHEDULES
    )
    warmup_steps: int = flag(4000, "linear warm-up steps of the warmup schedule", positive=True)
    final_decay: float | None = flag(
        None,
        "the share of the training steps, at the end, over which the learning rate falls "
        "linearly to 0 (0: none); None: chosen (0.2 with --time-budget or on the dates "
        "task, else 0)",
    )
    ema_momentum: float = flag(
        0.0,
        "keep an exponential moving average of the weights with this momentum (e.g. "
        "0.999; 0: none); after training, the average or the last weights, whichever "
        "has the lower validation loss, are kept",
    )
    average_last: int = flag(
        0,
        "after training, average the weights of the last K epochs' ends (checkpoint "
        "averaging, as fairseq and OpenNMT do; 0 or 1: none); the average or the last "
        "weights, whichever has the lower validation loss, are kept",
        non_negative=True,
    )
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
    join_timeout: int = flag(
        300,
        "JAX, several processes: seconds a process waits for the others to join, "
        "or for one that stopped answering, before it stops with an error",
        positive=True,
    )
    checkpoint_every: int = flag(500, "steps between checkpoints (resume points)", positive=True)
    seed: int = flag(0, "seed of weights, shuffling, dropout and sampling")
    deterministic: bool = flag(
        False, "deterministic TF ops: the same seed, the same weights (slower)"
    )
    output_dir: str = flag(
        "runs/train",
        "where everything of this run is written; a run there is resumed, and only by "
        "the same settings",
    )
    overwrite: bool = flag(
        False,
        "delete the run in --output-dir (its checkpoints, model and exports) and start "
        "afresh (without it, a folder holding a run with other settings is refused)",
    )
    export: bool = flag(
        True,
        "end the run with its TF Serving export (--no-export: make it later with "
        "python -m keras_attention.export OUTPUT_DIR)",
    )
    export_dir: str | None = flag(None, "TF Serving base folder; None: <output-dir>/serving")
    export_name: str = flag(
        "model", "the model's name in TF Serving: <export-dir>/<name>/<version>"
    )
    export_version: int | None = flag(
        None, "None: one more than the highest version there", positive=True
    )
    overwrite_export: bool = flag(False, "replace --export-version if it already exists")
    export_jit_compile: bool = flag(
        False,
        "compile the export's search with XLA (several times faster on CPU; TF Serving "
        "needs --xla_cpu_compilation_enabled=true)",
    )

    def model_presets(self):
        """The names `--model-preset` may take, the chosen builder's presets
        (each recipe's config knows its builders; None: unchecked here)."""
        return None

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.metadata["choices"] and value is not None:
                check_choice(flag_name(field), value, field.metadata["choices"])
            if field.metadata["positive"]:
                check_positive(flag_name(field), value)
            if field.metadata["non_negative"] and value is not None and value < 0:
                raise ValueError(f"{flag_name(field)} must be 0 or more; got {value!r}")
        if not 0 <= self.ema_momentum < 1:
            raise ValueError(f"--ema-momentum must be from 0 to below 1; got {self.ema_momentum}")
        if self.final_decay is not None and not 0 <= self.final_decay <= 1:
            raise ValueError(f"--final-decay must be from 0 to 1; got {self.final_decay}")
        if self.batch_tokens and self.batch_tokens < self.max_input_length:
            raise ValueError(
                f"--batch-tokens {self.batch_tokens} holds no sequence of --max-input-length "
                f"{self.max_input_length} tokens: give at least {self.max_input_length}"
            )
        if not self.held_out_share < 0.5:
            raise ValueError(f"--held-out-share must be below 0.5; got {self.held_out_share}")
        for name in ("validation_file", "test_file"):
            if getattr(self, name) and not self.train_file:
                raise ValueError(f"--{name.replace('_', '-')} needs --train-file")
        check_backend_options(self.strategy, self.jit_compile, self.deterministic)
        if self.time_budget and (self.strategy == "multi_worker" or jax_job.in_a_job()):
            # Each process would time its own steps and could plan apart.
            raise ValueError(
                "--time-budget plans from one process's timing: it does not combine with a "
                "run of several processes (--strategy multi_worker, or a JAX job)"
            )
        if self.tokenizer in CONVERTED_TOKENIZERS and not self.init_from:
            raise ValueError(
                f"--tokenizer {self.tokenizer} is a converted checkpoint's: fine-tune one with "
                "--init-from RUN"
            )
        presets = self.model_presets()
        if None not in (self.model_preset, presets) and not self.init_from:
            check_choice("--model-preset", self.model_preset, presets)
        if not isinstance(self.model_overrides, dict):
            raise ValueError(
                "--model-overrides must be a JSON object of builder arguments; "
                f"got {self.model_overrides!r}"
            )


def model_preset_flag(presets_of_models):
    """The `--model-preset` field of a recipe whose models (name -> their
    builder's presets) are `presets_of_models`: its help lists each
    model's presets."""
    listed = "; ".join(
        f"{name}: {', '.join(presets)}" if len(presets_of_models) > 1 else ", ".join(presets)
        for name, presets in presets_of_models.items()
    )
    return flag(None, f"the builder's named size ({listed}); None: tiny")


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
        TimeBudgetTooShort,
        UnknownArgument,  # a typo in --model-overrides
        InitFromError,
        OtherRunInFolder,
    ) as error:
        raise SystemExit(f"error: {error}") from None


# The groups `--help` shows the flags in, in this order; every field of every
# recipe's config is in one.
FLAG_GROUPS = {
    "data": (
        "train_file",
        "validation_file",
        "test_file",
        "held_out_share",
        "skip_bad_lines",
        "dataset",
        "source_key",
        "target_key",
        "text_key",
        "label_key",
        "reverse",
        "train_split",
        "validation_split",
        "test_split",
        "data_dir",
        "train_examples",
        "test_examples",
        "max_input_length",
        "pack_texts",
    ),
    "model": (
        "init_from",
        "model",
        "model_preset",
        "model_overrides",
        "tokenizer",
        "vocabulary_size",
        "shared_vocabulary",
        "chunk_size",
    ),
    "training": (
        "batch_size",
        "batch_tokens",
        "epochs",
        "time_budget",
        "shuffle",
        "learning_rate",
        "schedule",
        "warmup_steps",
        "final_decay",
        "ema_momentum",
        "average_last",
        "adam_beta_1",
        "adam_beta_2",
        "adam_epsilon",
        "label_smoothing",
        "similarity_scale",
        "strategy",
        "precision",
        "jit_compile",
        "join_timeout",
        "checkpoint_every",
        "seed",
        "deterministic",
        "output_dir",
        "overwrite",
    ),
    "evaluation and export": (
        "beam_size",
        "max_decoding_length",
        "length_penalty",
        "tune_decoding",
        "eval_batch_size",
        "prompt_tokens",
        "top_k",
        "export",
        "export_dir",
        "export_name",
        "export_version",
        "overwrite_export",
        "export_jit_compile",
    ),
}


def _names_of_settings(config_class):
    """What `--preset`, `--model`, `--model-preset` and `--model-overrides` each pick."""
    has_model = "model" in {field.name for field in dataclasses.fields(config_class)}
    return (
        "--preset picks settings for the whole recipe (listed below); "
        + ("--model picks the architecture, " if has_model else "")
        + "--model-preset the builder's named size (tiny, base, big), and --model-overrides "
        "single builder arguments. A flag you give wins over the preset.\n"
    )


def parse_config(config_class, presets, argv=None, description=None):
    """Builds the config from `--preset` and then one flag per field.

    Flags override the preset's values; the preset overrides the defaults.
    `--help` shows the flags in groups (`FLAG_GROUPS`), each with its default
    and choices, and what every preset sets.
    Bad values exit with a message naming the flag (argparse), not a traceback.
    """
    parser = argparse.ArgumentParser(
        prog=f"python -m {_module_name(config_class)}",
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=textwrap.fill(_names_of_settings(config_class), break_on_hyphens=False)
        + "\n\npresets:\n"
        + _describe_presets(presets),
    )
    parser.add_argument(
        "--preset",
        choices=sorted(presets),
        default=next(iter(presets)),
        help=f"named settings (listed below); the flags override them (default: "
        f"{next(iter(presets))})",
    )
    groups = {name: parser.add_argument_group(f"{name} flags") for name in FLAG_GROUPS}
    order = [(group, name) for group, names in FLAG_GROUPS.items() for name in names]
    fields = {field.name: field for field in dataclasses.fields(config_class)}
    missing = set(fields) - {name for _, name in order}
    if missing:
        raise TypeError(f"{config_class.__name__}: {sorted(missing)} in none of FLAG_GROUPS")
    for group_name, name in order:
        if name not in fields:
            continue
        field, group = fields[name], groups[group_name]
        kind = _value_type(field)
        help_text = (
            field.metadata["help"].replace("%", "%%") + f" (default: {_shown_default(field)})"
        )
        if kind is bool:
            group.add_argument(
                flag_name(field),
                action=argparse.BooleanOptionalAction,
                default=None,
                help=help_text,
            )
            continue
        choices = field.metadata["choices"]
        if kind is dict:
            metavar = "JSON"
        elif choices:
            metavar = "{" + ",".join(choices) + "}"
        else:
            metavar = kind.__name__.upper()
        group.add_argument(
            flag_name(field),
            type=_json_object if kind is dict else kind,
            default=None,
            help=help_text,
            metavar=metavar,
        )
    for old, new in RENAMED_FLAGS.items():  # hidden from --help
        field = fields[new[2:].replace("-", "_")]
        parser.add_argument(old, dest=field.name, type=_value_type(field), help=argparse.SUPPRESS)
    args = vars(parser.parse_args(argv))
    warn_of_renamed_flags(sys.argv[1:] if argv is None else argv, RENAMED_FLAGS)
    values = dict(presets[args.pop("preset")])
    values.update({name: value for name, value in args.items() if value is not None})
    try:
        config = config_class(**values)
    except ValueError as error:
        parser.error(str(error))
    return config


def _module_name(config_class):
    """The recipe's module as `python -m` names it (`__main__` when run so)."""
    module = config_class.__module__
    if module == "__main__":
        spec = sys.modules["__main__"].__spec__
        return spec.name if spec else module
    return module


def _shown_default(field):
    default = _default(field)
    if isinstance(default, bool):
        return as_flag(field.name, default)
    if isinstance(default, dict):
        return json.dumps(default)
    return default


def as_flag(name, value):
    """`name=value` as it is typed on the command line."""
    flag = "--" + name.replace("_", "-")
    if isinstance(value, bool):
        return flag if value else "--no-" + flag[2:]
    if isinstance(value, dict):
        return f"{flag} {shlex.quote(json.dumps(value))}"
    return f"{flag} {shlex.quote(str(value))}"


def _describe_presets(presets):
    """One line a preset: its name and the flags it sets."""
    lines = []
    for name, values in presets.items():
        settings = " ".join(as_flag(key, value) for key, value in values.items())
        lines.append(f"  {name}: {settings or '(the defaults)'}")
    return "\n".join(lines) + "\n"


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
