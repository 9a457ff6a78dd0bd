"""A user's own data in plain text files: tab-separated pairs, or one text a
line.

    pairs, skipped = read_columns("spa.txt")          # [(source, target), ...]
    texts = read_lines("corpus.txt")                 # ["a text", ...]
    train, validation, test = hold_out(pairs, 0.05)  # by a hash of the source

Files are UTF-8, with or without a byte-order mark, with `\\n` or `\\r\\n`
line ends. A pair file has two columns, `source<TAB>target` (or
`text<TAB>label`); a third and later column, such as the attribution column
of the Tatoeba/Anki files, is ignored. A file that cannot be used is a
`DataFileError` whose message names the file and, where it applies, the line.
"""

import hashlib
from pathlib import Path

BYTE_ORDER_MARK = b"\xef\xbb\xbf"


class DataFileError(ValueError):
    """A data file that cannot be used: missing, empty, not UTF-8, or a line
    without the columns it needs. The message names the file and line."""


def read_lines(path):
    """The file's lines as strings, empty lines left out."""
    return [line for _, line in _numbered_lines(path) if line]


def read_columns(path, skip_bad_lines=False, labels=None):
    """`(first column, second column)` of every line, and how many lines were
    skipped.

    A line without a tab, or with an empty first or second column, is an
    error naming the file and line; with `skip_bad_lines` it is skipped and
    counted instead. Empty lines are skipped silently. With `labels` (a
    collection of strings), a second column that is not one of them is an
    error naming the file, the line and the label, skipped or not.

    Returns:
        `(pairs, skipped)`: a list of `(str, str)` and an int.
    """
    pairs, skipped = [], 0
    for number, line in _numbered_lines(path):
        if not line:
            continue
        columns = line.split("\t")
        if len(columns) < 2 or not columns[0].strip() or not columns[1].strip():
            if skip_bad_lines:
                skipped += 1
                continue
            problem = "has no tab" if len(columns) < 2 else "has an empty column"
            raise DataFileError(
                f"{path}, line {number} {problem}: {line[:80]!r}. Each line must be "
                "`source<TAB>target`; pass --skip-bad-lines to skip such lines."
            )
        if labels is not None and columns[1] not in labels:
            raise DataFileError(
                f"{path}, line {number} has the label {columns[1]!r}, which the training "
                f"file does not have (its labels: {', '.join(sorted(labels))})"
            )
        pairs.append((columns[0], columns[1]))
    if not pairs:
        raise DataFileError(f"{path} has no usable line ({skipped} skipped)")
    return pairs, skipped


def hold_out(examples, share, salt="keras_attention"):
    """Splits `examples` into `(train, validation, test)`, `share` of them in
    each held-out split, by a hash of the source (the first column of a
    pair, or the text itself): the same source always falls in the same
    split, so no source is in two splits, and the split does not depend on
    the order of the file.

    Args:
        examples: a list of `(source, target)` pairs, or of strings.
        share: float in (0, 0.5), the share of each held-out split.
        salt: str; another salt gives another split.
    """
    if not 0 < share < 0.5:
        raise ValueError(f"`share` must be in (0, 0.5). Received: share={share!r}")
    splits = ([], [], [])
    for example in examples:
        source = example if isinstance(example, str) else example[0]
        digest = hashlib.sha256(f"{salt}\t{source}".encode()).digest()
        position = int.from_bytes(digest[:8], "big") / 2**64  # uniform in [0, 1)
        index = 1 if position < share else 2 if position < 2 * share else 0
        splits[index].append(example)
    return splits


def _numbered_lines(path):
    """`(line number, line)` pairs, 1-based, without line ends or the BOM."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise DataFileError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise DataFileError(f"{path} is a folder, not a file") from None
    if data.startswith(BYTE_ORDER_MARK):
        data = data[len(BYTE_ORDER_MARK) :]
    if not data.strip():
        raise DataFileError(f"{path} is empty")
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()  # the file ends with a line end
    for number, raw in enumerate(lines, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise DataFileError(
                f"{path}, line {number} is not UTF-8 (byte {raw[error.start]:#04x} at "
                f"column {error.start + 1}). Convert the file to UTF-8, e.g. with iconv."
            ) from None
        yield number, line.removesuffix("\r")
