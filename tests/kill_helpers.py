"""Recipe runs killed and resumed, for the resume tests on every backend
and strategy: each run is a process of `recipes/recipe_runner.py`."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
from recipe_helpers import tiny_flags

RUNNER = Path(__file__).parent / "recipes" / "recipe_runner.py"
KILL_AT = "2:3"  # epoch 2, step 3: after the checkpoint at step 2
NEWEST_BEFORE_KILL = "epoch-00001-step-0000002"


def flags(data_dir, output_dir, *extra):
    return tiny_flags(
        data_dir,
        output_dir,
        *("--epochs", "3", "--checkpoint-every", "2", "--deterministic"),
        *extra,
    )


def run(arguments, env=None, recipe="translate", **kwargs):
    return subprocess.Popen(
        [sys.executable, str(RUNNER), recipe, *arguments],
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def finish(process, timeout=600):
    stdout, stderr = process.communicate(timeout=timeout)
    return process.returncode, stdout, stderr


def epoch_losses(stdout):
    """Every epoch's validation loss, as printed. (The training loss printed
    for the resumed epoch averages only the steps after the checkpoint.)"""
    return [
        line.split(" - val_loss: ")[1].split(" ")[0]
        for line in stdout.splitlines()
        if " - val_loss: " in line
    ]


TRANSLATION_RESULTS = ("test_examples", "exact_match", "sacrebleu")


def assert_same_run(reference_dir, resumed_dir, results=TRANSLATION_RESULTS):
    reference = json.loads((reference_dir / "evaluation.json").read_text())
    resumed = json.loads((resumed_dir / "evaluation.json").read_text())
    for key in results:
        assert resumed[key] == reference[key], key
    expected = keras.saving.load_model(reference_dir / "model.keras").get_weights()
    got = keras.saving.load_model(resumed_dir / "model.keras").get_weights()
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_array_equal(a, b)


def kill_and_keep(arguments, output_dir, env, recipe="translate"):
    """Runs until KILL_AT, SIGKILLs, checks what is left; returns the stdout."""
    killed = finish(run(arguments, {**env, "KILL_AT": KILL_AT}, recipe))
    assert killed[0] == -signal.SIGKILL, killed[2][-3000:]
    assert not (output_dir / "evaluation.json").exists()
    checkpoints = output_dir / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir())[-1] == NEWEST_BEFORE_KILL
    return killed[1]


def assert_resumed_as_reference(
    resumed, killed_stdout, reference, output_dir, results=TRANSLATION_RESULTS
):
    """Epoch 2 (resumed part way) and 3 end with the reference's losses."""
    assert resumed[0] == 0, resumed[2][-3000:]
    reference_losses = epoch_losses(reference[1])
    assert epoch_losses(killed_stdout) == reference_losses[:1]
    assert epoch_losses(resumed[1]) == reference_losses[1:]
    assert_same_run(output_dir.parent / "reference", output_dir, results)
