import json

import keras
import numpy as np
import pytest
import tensorflow as tf
from recipe_helpers import run_on_mock_data

import keras_attention  # noqa: F401  (registers the models for loading)
from keras_attention.recipes import classify

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.mark.large  # a whole recipe run (see docs/testing.md)
def test_a_tiny_language_id_run_writes_everything(tmp_path, capsys):
    output_dir = tmp_path / "run"
    classify.main(
        [
            "--data-dir",
            str(tmp_path / "tfds"),
            "--output-dir",
            str(output_dir),
            "--train-examples",
            "256",
            "--test-examples",
            "32",
            "--epochs",
            "1",
            "--batch-size",
            "32",
        ]
    )
    assert "accuracy on the test split" in capsys.readouterr().out
    results = json.loads((output_dir / "evaluation.json").read_text())
    assert results["test_examples"] == 32 and 0.0 <= results["accuracy"] <= 1.0
    labels = json.loads((output_dir / "labels.json").read_text())
    assert len(labels) == 28 and "fr" in labels
    model = keras.saving.load_model(output_dir / "model.keras")
    assert model(np.array([[5, 6, 7]])).shape == (1, 28)
    assert (output_dir / "attention.png").read_bytes()[:8] == PNG_MAGIC
    served = tf.saved_model.load(str(output_dir / "serving" / "classify" / "1"))
    answer = served.signatures["serving_default"](text=tf.constant(["29 novembre 2026"]))
    assert answer["label"].numpy()[0].decode() in labels
    assert answer["probabilities"].shape == (1, 28)


@pytest.mark.large  # a whole recipe run (see docs/testing.md)
def test_imdb_preset_on_mock_data(tmp_path):
    output_dir = run_on_mock_data(classify.main, "imdb", tmp_path, 32)
    assert json.loads((output_dir / "labels.json").read_text()) == ["neg", "pos"]
    assert json.loads((output_dir / "evaluation.json").read_text())["test_examples"] == 8
    assert (output_dir / "text_vocabulary.model").is_file()
