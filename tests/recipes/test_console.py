"""A newcomer's first run, as the README's command starts it: its console
says something is wrong only when something is (no TensorFlow C++ error line
about a missing GPU, no Keras warning caused by how we call `fit`, no
traceback), and it leaves everything a run writes. One run serves both
checks (the `first_run` fixture in conftest.py)."""

import json
import re

import keras
import numpy as np
import tensorflow as tf

import keras_attention  # noqa: F401  (registers the models for loading)

ALARMS = re.compile(r"WARNING|UserWarning|E0000|Traceback")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_a_first_tiny_recipe_run_prints_no_warning_or_error(first_run):
    output = first_run.stdout + first_run.stderr
    first_line = first_run.stdout.splitlines()[0]
    assert first_line.startswith("Generating the offline multilingual_dates data set"), first_line
    assert "Downloading" not in output and "\x1b[A" not in output
    alarms = [line for line in output.splitlines() if ALARMS.search(line)]
    assert not alarms, "\n".join(alarms)


def test_a_tiny_run_with_xla_writes_everything(first_run):
    output_dir, printed = first_run.output_dir, first_run.stdout
    assert "exact match" in printed
    config = json.loads((output_dir / "config.json").read_text())
    assert config["train_examples"] == 256 and config["output_dir"] == str(output_dir)
    assert config["jit_compile"] is True
    results = json.loads((output_dir / "evaluation.json").read_text())
    assert results["test_examples"] == 24 and 0.0 <= results["exact_match"] <= 1.0
    assert results["decoding"] == "greedy"

    model = keras.saving.load_model(output_dir / "model.keras")
    ids = np.array([[5, 6, 7]])
    assert model({"source_ids": ids, "target_ids": ids}).shape[:2] == (1, 3)
    assert (output_dir / "source_vocabulary.txt").read_text().startswith("<pad>\n<s>\n")
    assert (output_dir / "attention.png").read_bytes()[:8] == PNG_MAGIC
    assert any((output_dir / "logs").rglob("events.out.tfevents.*"))

    # The run ends with a servable export that translates as the model did.
    version = output_dir / "serving" / "translate" / "1"
    assert f"Translated by the export in {version}" in printed
    assert "translates these differently" not in printed
    metadata = json.loads((version / "assets.extra" / "keras_attention.json").read_text())
    assert metadata["config"] == config and metadata["beam_size"] == config["beam_size"]
    served = tf.saved_model.load(str(version))
    answer = served.signatures["serving_default"](text=tf.constant(["", "29.11.2026"]))
    assert answer["translation"].shape == (2,)
