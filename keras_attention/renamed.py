"""Arguments and command-line flags renamed: the old names keep working for
one release, with a `FutureWarning` (flags hidden from `--help`), and saved
configs are read under the new names (`keras_attention.saving`)."""

import warnings

# Arguments renamed, old name -> new: the old name still works for one
# release, with a FutureWarning; saved configs are read with the new, without
# a warning, by the classes that take the new (`keras_attention.saving`).
RENAMED_ARGUMENTS = {
    "window_size": "sliding_window",
    # The positions a model's table has (Hugging Face's name); `max_length`
    # also meant the tokens kept per sequence and the tokens generated.
    "max_length": "max_position_embeddings",
}


def renamed_argument(kwargs, new, value, old=None, stacklevel=3):
    """`value`, the argument `new`, or where `kwargs` holds its old name
    (`old`, by default `RENAMED_ARGUMENTS`'s) that one, popped, with a
    FutureWarning (shown to users, as a `DeprecationWarning` is not) that
    points at the line `stacklevel` frames up: the user's, by default that
    of the caller's caller. Both names at once are a `TypeError` naming
    both."""
    if old is None:
        (old,) = [old for old, name in RENAMED_ARGUMENTS.items() if name == new]
    if old not in kwargs:
        return value
    old_value = kwargs.pop(old)
    if value is not None:
        raise TypeError(f"give `{new}` only, not also `{old}` (its old name)")
    warnings.warn(
        f"`{old}` is deprecated and will be removed in the next release: use `{new}`",
        FutureWarning,
        stacklevel=stacklevel,
    )
    return old_value


def renamed_arguments(kwargs, takes, stacklevel=3):
    """A copy of `kwargs` where each old name (`RENAMED_ARGUMENTS`) of an
    argument in `takes` is replaced by the new one, as `renamed_argument`
    does: for a builder's overrides, before they meet its preset's."""
    kwargs = dict(kwargs)
    for old, new in RENAMED_ARGUMENTS.items():
        if old in kwargs and new in takes:
            kwargs[new] = renamed_argument(kwargs, new, kwargs.get(new), stacklevel=stacklevel + 1)
    return kwargs


def warn_of_renamed_flags(argv, renamed):
    """A `FutureWarning` for each flag of `argv` given by its old name
    (`renamed`: old flag -> new)."""
    for argument in argv:
        old = argument.split("=", 1)[0]
        if old in renamed:
            warnings.warn(
                f"{old} is now {renamed[old]}; {old} goes in a later release",
                FutureWarning,
                stacklevel=3,
            )
