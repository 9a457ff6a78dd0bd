"""What the zoo's models share."""

import dataclasses
import inspect

import keras
from keras import ops

from keras_attention.renamed import renamed_arguments
from keras_attention.saving import build_from_config, versioned
from keras_attention.utils import PAD_ID, check_choice


def resolve_preset(presets, preset, overrides, model_class=None):
    """The preset's arguments updated with the caller's; clear error on a bad
    name. With `model_class`, an override under the old name of one of its
    arguments (`RENAMED_ARGUMENTS`) takes the new name first, with a warning,
    so that it replaces the preset's value."""
    check_choice("preset", preset, sorted(presets))
    if model_class is not None:
        # (The warning points at the line that called the builder.)
        overrides = renamed_arguments(overrides, constructor_arguments(model_class), stacklevel=4)
    return {**presets[preset], **overrides}


def padding_mask(token_ids):
    """True at real tokens (padding id is 0), `[B, T]`."""
    return ops.not_equal(token_ids, PAD_ID)


# What a zoo model's `**kwargs` may hold: `keras.Model`'s own arguments.
MODEL_KWARGS = ("name", "trainable", "dtype")


def constructor_arguments(model_class):
    """The names of `model_class.__init__`'s own arguments, in order, then
    those of the stack options it takes through `**kwargs` (its
    `stack_defaults`)."""
    names = inspect.signature(model_class.__init__).parameters
    names = [name for name in names if name not in ("self", "kwargs")]
    if model_class.stack_defaults is not None:
        names += [field.name for field in dataclasses.fields(model_class.stack_defaults)]
    return names


class ZooModel(keras.Model):
    """A functional model built in `__init__`, whose config is its
    constructor's arguments (so it saves to and loads from `.keras` files)."""

    # A model with Transformer stacks: the `StackOptions` (defaults) it
    # takes through `**kwargs`, as arguments of its own, for its stacks.
    stack_defaults = None

    def _set_config(self, arguments, stack_options=None):
        """Keeps the constructor's arguments, as attributes and as the config.

        `arguments` is the constructor's `locals()`: of it, the names of the
        constructor's signature are kept (so each argument is written once,
        in the signature), with the values they hold at the call; then
        `stack_options`, the `StackOptions` the model took.
        """
        if stack_options is not None:
            arguments = {**arguments, **dataclasses.asdict(stack_options)}
        config = {name: arguments[name] for name in constructor_arguments(type(self))}
        # The policy every layer was given (`pop_dtype_policy`), so a model
        # trained in mixed precision reloads in mixed precision.
        config["dtype"] = arguments["policy"].name
        self._constructor_config = config
        for name, value in config.items():
            if name != "dtype":
                setattr(self, name, value)

    def get_config(self):
        return versioned(
            {"name": self.name, "trainable": self.trainable, **self._constructor_config}
        )

    @classmethod
    def from_config(cls, config):
        # keras.Model would drop an argument it does not know without a word.
        known = {*constructor_arguments(cls), *MODEL_KWARGS}
        return build_from_config(cls, config, lambda arguments: cls(**arguments), known)


class UnknownArgument(TypeError):
    """A model or builder was given an argument it does not take (a typo)."""


def pop_dtype_policy(model_class, kwargs):
    """Removes `dtype` from a model's keyword arguments and returns the dtype
    policy that every layer of the model gets (the global one by default).

    Any keyword other than `keras.Model`'s `name`, `trainable` and `dtype`
    is refused: `keras.Model` would drop it without a word, so a typo such
    as `num_layer=3` would build the default model.
    """
    unknown = sorted(set(kwargs) - set(MODEL_KWARGS))
    if unknown:
        takes = constructor_arguments(model_class)
        raise UnknownArgument(
            f"{model_class.__name__} got an unexpected keyword argument {unknown[0]!r}. "
            f"It takes: {', '.join(takes + list(MODEL_KWARGS))}"
        )
    dtype = kwargs.pop("dtype", None)
    return keras.dtype_policies.get(dtype) if dtype else keras.config.dtype_policy()
