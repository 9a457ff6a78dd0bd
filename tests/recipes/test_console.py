"""A newcomer's first run, as the README's command starts it: its console
says something is wrong only when something is (no TensorFlow C++ error line
about a missing GPU, no Keras warning caused by how we call `fit`, no
traceback), and it leaves everything a run writes. One run serves both
checks (the `first_run` fixture in conftest.py)."""

import re

import pytest
from recipe_helpers import check_a_tiny_translate_run

# Large: the first run trains and exports (a minute and a half); the
# explorer's browser tests share it (tests/recipes/test_explore_page.py).
pytestmark = pytest.mark.large

ALARMS = re.compile(r"WARNING|UserWarning|E0000|Traceback")


def test_a_first_tiny_recipe_run_prints_no_warning_or_error(first_run):
    output = first_run.stdout + first_run.stderr
    first_line = first_run.stdout.splitlines()[0]
    assert first_line.startswith("Generating the offline multilingual_dates data set"), first_line
    assert "Downloading" not in output and "\x1b[A" not in output
    alarms = [line for line in output.splitlines() if ALARMS.search(line)]
    assert not alarms, "\n".join(alarms)


def test_a_tiny_run_with_xla_writes_everything(first_run):
    config = check_a_tiny_translate_run(first_run.output_dir, first_run.stdout, "greedy")
    assert config["jit_compile"] is True
