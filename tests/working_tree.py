"""A pytest plugin: the run fails if it created, changed or removed anything
in the repository's working tree.

A new user runs the README's main job, then its tests, in one folder (or the
other way round). A test that wrote `runs/translate` there once made each
order break the other. So no test may write into the working tree: each
works in its own temporary folder. This plugin lists the tree (every file
with its size and modification time, every folder) when the session starts
and again when it ends, outside the caches below, and fails the run, naming
the paths, if the two lists differ. Under pytest-xdist only the controller
checks, once, after every worker has finished.

`tests/conftest.py` loads it; `tests/test_working_tree.py` shows that it
catches a test that writes `runs/x`.
"""

import os
from pathlib import Path

import pytest

# Folders the tools themselves keep (git, the virtual environment, Python's
# byte code, pytest's, hypothesis's and ruff's caches, setuptools' egg-info).
CACHES = {".git", ".venv", "__pycache__", ".pytest_cache", ".hypothesis", ".ruff_cache"}


def _is_cache(name):
    return name in CACHES or name.endswith(".egg-info")


def snapshot(root):
    """{relative path: (size, modification time) for a file, None for a folder}."""
    entries = {}
    for folder, folders, files in os.walk(root):
        folders[:] = [name for name in folders if not _is_cache(name)]
        relative = Path(folder).relative_to(root)
        for name in folders:
            entries[str(relative / name)] = None
        for name in files:
            path = Path(folder) / name
            try:
                status = path.lstat()
            except FileNotFoundError:  # removed while we walked
                continue
            entries[str(relative / name)] = (status.st_size, status.st_mtime_ns)
    return entries


def differences(before, after):
    """Lines naming what was created, changed and removed, sorted by path."""
    lines = []
    for path in sorted(before.keys() | after.keys()):
        if path not in before:
            lines.append(f"created: {path}")
        elif path not in after:
            lines.append(f"removed: {path}")
        elif before[path] != after[path]:
            lines.append(f"changed: {path}")
    return lines


def _checks(config):
    # An xdist worker (it has `workerinput`) leaves the check to the controller.
    return not hasattr(config, "workerinput")


def pytest_sessionstart(session):
    if _checks(session.config):
        session.config.stash[_BEFORE] = snapshot(session.config.rootpath)


def pytest_sessionfinish(session):
    config = session.config
    if not _checks(config) or _BEFORE not in config.stash:
        return
    lines = differences(config.stash[_BEFORE], snapshot(config.rootpath))
    config.stash[_CHANGES] = lines
    if lines and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, config):
    lines = config.stash.get(_CHANGES, [])
    if lines:
        terminalreporter.write_sep(
            "=", f"the tests changed the working tree {config.rootpath}", red=True
        )
        for line in lines[:50]:
            terminalreporter.write_line(line)
        if len(lines) > 50:
            terminalreporter.write_line(f"... and {len(lines) - 50} more")
        terminalreporter.write_line(
            "A test must work in a temporary folder (tmp_path, monkeypatch.chdir(tmp_path)), "
            "never in the working tree."
        )


_BEFORE = pytest.StashKey[dict]()
_CHANGES = pytest.StashKey[list]()
