"""Command-line flags renamed: each command keeps its old names working for
one release, hidden from `--help`, and warns when one is given."""

import warnings


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
