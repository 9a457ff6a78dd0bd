"""Saved configs carry the version of keras_attention that wrote them, so a
`.keras` file whose config this version cannot take (an argument renamed or
added since) is refused with a message that says so, not with Keras's
generic "could not be deserialized properly"."""

import inspect

from keras_attention._version import __version__
from keras_attention.renamed import RENAMED_ARGUMENTS

VERSION_KEY = "keras_attention_version"


def versioned(config):
    """`config` with this package's version added."""
    return {**config, VERSION_KEY: __version__}


def build_from_config(cls, config, build, known=None):
    """`build(config)` without the version key. A `TypeError` (an argument
    the class does not take, or one it needs and the config lacks), or an
    argument not in `known` (for classes whose `**kwargs` would swallow it
    silently), becomes a `ValueError` naming the class, the argument and both
    versions. A renamed argument (`RENAMED_ARGUMENTS`) saved under its old
    name is read under the new one, without a warning, by a class that takes
    the new one (`known`, or its constructors' arguments; an old name may
    mean something else to another class)."""
    takes = known if known is not None else arguments_taken(cls)
    config = {
        RENAMED_ARGUMENTS[key] if RENAMED_ARGUMENTS.get(key) in takes else key: value
        for key, value in config.items()
    }
    saved = config.pop(VERSION_KEY, None)
    try:
        unknown = sorted(set(config) - set(known)) if known is not None else []
        if unknown:
            raise TypeError(f"unexpected arguments {unknown}")
        return build(config)
    except TypeError as error:
        raise ValueError(
            f"{cls.__name__} cannot be built from its saved config ({error}). The file "
            f"was saved by keras_attention {saved or 'older than 0.1.0'}; this is "
            f"{__version__}. Load it with the version that saved it, or change the saved "
            "config's arguments to this version's."
        ) from None


def arguments_taken(cls):
    """The argument names of the constructors of `cls` and its bases (a
    constructor may hand its `**kwargs` on to its base's)."""
    names = set()
    for klass in cls.__mro__:
        init = vars(klass).get("__init__")
        if inspect.isfunction(init):
            names.update(inspect.signature(init).parameters)
    return names
