"""pytest-xdist's controller process hands tests out and runs none, but it
reads the conftest.py of every folder given on the command line
(`pytest -n 2 tests/export`). A conftest that imported TensorFlow or Keras
there would hold their memory in the controller and print TensorFlow's
start-up lines after the run's summary: each imports them in its fixtures."""

import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
CONFTESTS = sorted(TESTS.rglob("conftest.py"))

IMPORT_ALONE = """
import runpy, sys
sys.path.insert(0, {tests!r})
runpy.run_path({conftest!r})
print(sorted(name for name in ("tensorflow", "keras", "jax") if name in sys.modules))
"""


@pytest.mark.parametrize("conftest", CONFTESTS, ids=lambda path: str(path.relative_to(TESTS)))
def test_no_conftest_imports_tensorflow_or_keras_when_read(conftest):
    code = IMPORT_ALONE.format(tests=str(TESTS), conftest=str(conftest))
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_every_conftest_is_checked():
    assert {"tests/conftest.py", "tests/export/conftest.py", "tests/convert/conftest.py"} <= {
        str(path.relative_to(TESTS.parent)) for path in CONFTESTS
    }
