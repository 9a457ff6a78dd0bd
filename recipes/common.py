"""What every recipe shares: config and flags, strategies, precision, the
loss and learning-rate schedule of the paper, callbacks, safe file writes."""

import argparse
import dataclasses
import inspect
import json
import math
import os
import re
import tempfile
from pathlib import Path

import keras
import tensorflow as tf
from keras import ops

STRATEGIES = ("default", "mirrored", "multi_worker", "tpu")
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")


# --- Config: a dataclass, a flag per field, the field's comment as its help ---


def field_comments(config_class):
    """`{field: comment}` from the `name: type = default  # comment` lines."""
    source = inspect.getsource(config_class)
    return dict(re.findall(r"^\s+(\w+):[^#\n]*#\s*(.+)$", source, flags=re.MULTILINE))


def parse_config(config_class, presets, argv=None, description=None):
    """Builds the config from `--preset` and then one flag per field.

    Flags override the preset's values; the preset overrides the defaults.
    Bad values exit with a message naming the flag (argparse), not a traceback.
    """
    comments = field_comments(config_class)
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--preset",
        choices=sorted(presets),
        default=next(iter(presets)),
        help="named settings; the flags below override them",
    )
    for field in dataclasses.fields(config_class):
        kind = _base_type(field.type)
        flag = "--" + field.name.replace("_", "-")
        help_text = comments.get(field.name, "")
        if kind is bool:
            parser.add_argument(
                flag, action=argparse.BooleanOptionalAction, default=None, help=help_text
            )
        else:
            parser.add_argument(
                flag, type=kind, default=None, help=help_text, metavar=kind.__name__.upper()
            )
    args = vars(parser.parse_args(argv))
    values = dict(presets[args.pop("preset")])
    values.update({name: value for name, value in args.items() if value is not None})
    try:
        config = config_class(**values)
    except ValueError as error:
        parser.error(str(error))
    return config


def _base_type(annotation):
    """`int`, `float`, `str` or `bool` from an annotation like `int | None`."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    for kind in (bool, int, float, str):
        if re.search(rf"\b{kind.__name__}\b", str(text) or str(annotation)):
            return kind
    return str


def check_choice(name, value, choices):
    if value not in choices:
        raise ValueError(
            f"--{name.replace('_', '-')} must be one of {', '.join(choices)}; got {value!r}"
        )


def check_positive(name, value):
    if value is not None and not value > 0:
        raise ValueError(f"--{name.replace('_', '-')} must be positive; got {value!r}")


# --- Strategy and precision ---


def make_strategy(name):
    """The tf.distribute strategy, made before the model (`strategy.scope()`)."""
    check_choice("strategy", name, STRATEGIES)
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    raise ValueError(
        "--strategy multi_worker is not available yet: Keras 3's model.fit needs a fix "
        "under MultiWorkerMirroredStrategy (see the README)"
    )


def set_precision(precision):
    check_choice("precision", precision, PRECISIONS)
    keras.config.set_dtype_policy(precision)


# --- The paper's loss and schedule ---


@keras.saving.register_keras_serializable(package="keras_attention")
class MaskedSparseCrossentropy(keras.losses.Loss):
    """Cross-entropy from logits with label smoothing, on integer labels.

    Label smoothing epsilon spreads epsilon of the target mass uniformly over
    the vocabulary (Szegedy et al. 2016; 0.1 in the Transformer paper)
    without building one-hot labels. Keras skips the positions that the
    logits' padding mask marks, so padding never counts.
    """

    def __init__(self, label_smoothing=0.0, name="masked_sparse_crossentropy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.label_smoothing = float(label_smoothing)

    def call(self, y_true, y_pred):
        log_probs = ops.log_softmax(ops.cast(y_pred, "float32"), axis=-1)
        labels = ops.cast(y_true, "int32")
        true_log_prob = ops.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]
        mean_log_prob = ops.mean(log_probs, axis=-1)
        epsilon = self.label_smoothing
        return -((1.0 - epsilon) * true_log_prob + epsilon * mean_log_prob)

    def get_config(self):
        return {**super().get_config(), "label_smoothing": self.label_smoothing}


@keras.saving.register_keras_serializable(package="keras_attention")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)
    ("Attention Is All You Need", 5.3): linear warm-up, then 1/sqrt(step)."""

    def __init__(self, model_dim, warmup_steps=4000, scale=1.0):
        self.model_dim = model_dim
        self.warmup_steps = warmup_steps
        self.scale = scale

    def __call__(self, step):
        step = ops.cast(step, "float32") + 1.0
        return (self.scale / math.sqrt(self.model_dim)) * ops.minimum(
            ops.rsqrt(step), step * self.warmup_steps**-1.5
        )

    def get_config(self):
        return {"model_dim": self.model_dim, "warmup_steps": self.warmup_steps, "scale": self.scale}


@keras.saving.register_keras_serializable(package="keras_attention")
class MaskedAccuracy(keras.metrics.Mean):
    """Token accuracy over real (unpadded) positions only."""

    def __init__(self, name="token_accuracy", **kwargs):
        super().__init__(name=name, **kwargs)

    def update_state(self, y_true, y_pred, sample_weight=None):
        correct = ops.cast(
            ops.equal(ops.argmax(y_pred, axis=-1), ops.cast(y_true, "int64")), "float32"
        )
        real = ops.cast(ops.not_equal(y_true, 0), "float32")  # padding labels are 0
        return super().update_state(correct, sample_weight=real)


# --- Files: written whole or not at all ---


def write_atomically(path, text):
    """Writes to a temporary file beside `path`, then renames it into place,
    so a reader never sees a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_json(path, value):
    write_atomically(path, json.dumps(value, indent=2, ensure_ascii=False) + "\n")
