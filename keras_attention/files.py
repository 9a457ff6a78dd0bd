"""Files written whole or not at all: a reader (a resuming run, a model
server) never sees half of one."""

import json
import os
import tempfile
from pathlib import Path


def write_atomically(path, text):
    """Writes `text` to a temporary file beside `path`, flushes it to disk,
    then renames it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_json(path, value):
    write_atomically(path, json.dumps(value, indent=2, ensure_ascii=False) + "\n")
