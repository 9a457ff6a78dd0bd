"""A recipe's console says something is wrong only when something is: no
TensorFlow C++ error line about a missing GPU, no Keras warning caused by how
we call `fit`, no traceback."""

import os
import re
import subprocess
import sys

from recipe_helpers import tiny_flags

ALARMS = re.compile(r"WARNING|UserWarning|E0000|Traceback")


def test_a_first_tiny_recipe_run_prints_no_warning_or_error(tmp_path):
    """A newcomer's first run: no data set prepared yet (an empty
    TFDS_DATA_DIR, as on a fresh machine), so the run generates it."""
    # The test suite quiets TensorFlow for itself (conftest.py); the command
    # must do it on its own.
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["TFDS_DATA_DIR"] = str(tmp_path / "tensorflow_datasets")
    command = [sys.executable, "-m", "keras_attention.recipes.translate"]
    flags = tiny_flags(None, tmp_path / "run", "--epochs", "2")
    result = subprocess.run(
        command + flags, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "exact match" in result.stdout
    first_line = result.stdout.splitlines()[0]
    assert first_line.startswith("Generating the offline multilingual_dates data set"), first_line
    assert "Downloading" not in output and "\x1b[A" not in output
    alarms = [line for line in output.splitlines() if ALARMS.search(line)]
    assert not alarms, "\n".join(alarms)
