"""pytest-xdist's controller process hands tests out and runs none, but it
reads the conftest.py of every folder given on the command line
(`pytest -n 2 tests/export`). A conftest that imported TensorFlow or Keras
there would hold their memory in the controller and print TensorFlow's
start-up lines after the run's summary: each imports them in its fixtures."""

import os
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


READ_XLA_FLAGS = """
import os, runpy
runpy.run_path({conftest!r})
print(os.environ["XLA_FLAGS"])
"""


@pytest.mark.parametrize(
    "given, workers, expected",
    [
        # pytest alone: XLA compiles without LLVM's optimisations.
        ({}, "1", "--xla_backend_optimization_level=0"),
        # A worker of `-n 2`, whose controller set its own flags first.
        (
            {
                "XLA_FLAGS": "--xla_backend_optimization_level=0",
                "KERAS_ATTENTION_TESTS_XLA_FLAGS": "--xla_backend_optimization_level=0",
            },
            "2",
            "--xla_backend_optimization_level=0 --xla_cpu_multi_thread_eigen=false",
        ),
        # A user's own flags are kept as they are.
        ({"XLA_FLAGS": "--xla_dump_to=dumps"}, "2", "--xla_dump_to=dumps"),
    ],
)
def test_each_test_process_sets_its_xla_flags_unless_the_user_did(given, workers, expected):
    environment = {
        k: v
        for k, v in os.environ.items()
        if k not in ("XLA_FLAGS", "KERAS_ATTENTION_TESTS_XLA_FLAGS")
    }
    environment |= given | {"PYTEST_XDIST_WORKER_COUNT": workers}
    if (os.cpu_count() or 1) // int(workers) > 1:  # (more cores than workers: threads for each)
        expected = expected.replace("eigen=false", "eigen=true")
    code = READ_XLA_FLAGS.format(conftest=str(TESTS / "conftest.py"))
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=environment
    )
    assert result.stdout.strip() == expected
