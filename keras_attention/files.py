"""Files and folders written whole or not at all: a reader (a resuming run,
a model server) never sees half of one."""

import json
import os
import shutil
import tempfile
from pathlib import Path


def write_atomically(path, text):
    """Writes `text` (a str, or bytes) to a temporary file beside `path`,
    flushes it to disk, then renames it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        binary = isinstance(text, bytes)
        with os.fdopen(
            handle, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})
        ) as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_folder_atomically(final, write, replace=False):
    """Writes the folder `final` whole or not at all.

    `write(staging)` fills a temporary folder beside `final` (named
    `.tmp-...`, which neither a checkpoint reader nor TF Serving takes for a
    real one); every file is flushed to disk; then the folder is renamed to
    `final`. With `replace`, an existing `final` is moved aside first and
    removed only once the new one is in place. Without it, the rename
    refuses a `final` that exists and is not empty, so two writers racing
    for one name cannot clobber each other. On any error nothing is left.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=final.parent))
    try:
        write(staging)
        for path in sorted(staging.rglob("*")):
            if path.is_file():
                with open(path, "rb") as file:
                    os.fsync(file.fileno())
        if replace and final.exists():
            retired = Path(tempfile.mkdtemp(prefix=f".old-{final.name}-", dir=final.parent))
            os.replace(final, retired / final.name)
            os.rename(staging, final)
            shutil.rmtree(retired)
        else:
            os.rename(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final


def write_json(path, value):
    write_atomically(path, json.dumps(value, indent=2, ensure_ascii=False) + "\n")
