"""The working-tree check (tests/working_tree.py) fails a run whose tests
write into the folder pytest runs in, and names what they did."""

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

WRITERS = """
from pathlib import Path

def test_creates():
    Path("runs").mkdir()
    Path("runs/x").write_text("written by a test")

def test_changes():
    Path("kept.txt").write_text("changed by a test")

def test_removes():
    Path("gone.txt").unlink()
"""

QUIET = """
def test_reads_only():
    assert open("kept.txt").read() == "kept"
"""


def run_pytest(folder, tests, *flags):
    (folder / "pytest.ini").write_text("[pytest]\n")
    (folder / "kept.txt").write_text("kept")
    (folder / "gone.txt").write_text("to be removed")
    (folder / "test_it.py").write_text(tests)
    environment = dict(os.environ, PYTHONPATH=str(TESTS))
    environment.pop("PYTEST_XDIST_WORKER", None)
    environment.pop("PYTEST_XDIST_WORKER_COUNT", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "working_tree", "-p", "no:cacheprovider", *flags],
        cwd=folder,
        env=environment,
        capture_output=True,
        text=True,
    )


def test_a_test_that_writes_into_the_tree_fails_the_run(tmp_path):
    result = run_pytest(tmp_path, WRITERS, "-n", "2")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "3 passed" in result.stdout  # the tests themselves pass; the check fails the run
    assert "the tests changed the working tree" in result.stdout
    for line in ("created: runs", "created: runs/x", "changed: kept.txt", "removed: gone.txt"):
        assert line in result.stdout.splitlines(), result.stdout


def test_tests_that_only_read_pass(tmp_path):
    result = run_pytest(tmp_path, QUIET)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "changed the working tree" not in result.stdout
