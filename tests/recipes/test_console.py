"""A recipe's console says something is wrong only when something is: no
TensorFlow C++ error line about a missing GPU, no Keras warning caused by how
we call `fit`, no traceback."""

import os
import re
import subprocess
import sys

from recipe_helpers import tiny_flags

ALARMS = re.compile(r"WARNING|UserWarning|E0000|Traceback")


def test_a_tiny_recipe_prints_no_warning_or_error(dates_data_dir, tmp_path):
    # The test suite quiets TensorFlow for itself (conftest.py); the command
    # must do it on its own.
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    command = [sys.executable, "-m", "keras_attention.recipes.translate"]
    flags = tiny_flags(dates_data_dir, tmp_path / "run", "--epochs", "2")
    result = subprocess.run(
        command + flags, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "exact match" in result.stdout
    alarms = [line for line in output.splitlines() if ALARMS.search(line)]
    assert not alarms, "\n".join(alarms)
