import json
import math

import keras
import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

import keras_attention  # noqa: F401  (registers the models for loading)
from keras_attention.recipes import language_model

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_a_tiny_run_writes_everything(tmp_path, capsys):
    output_dir = tmp_path / "run"
    language_model.main(
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
    printed = capsys.readouterr().out
    assert "per-token perplexity on the test split" in printed
    results = json.loads((output_dir / "evaluation.json").read_text())
    assert math.isclose(results["perplexity"], math.exp(results["test_loss"]), rel_tol=1e-6)
    assert 1.0 < results["perplexity"] < 1000.0
    model = keras.saving.load_model(output_dir / "model.keras")
    assert model(np.array([[1, 5, 6]])).shape[:2] == (1, 3)
    assert (output_dir / "attention.png").read_bytes()[:8] == PNG_MAGIC
    assert printed.count(" -> ") >= 6  # the completions
    served = tf.saved_model.load(str(output_dir / "serving" / "language_model" / "1"))
    answer = served.signatures["serving_default"](prompt=tf.constant(["29 nov", ""]))
    assert answer["completion"].shape == (2,)
    with_options = served.signatures["complete_with_options"](
        prompt=tf.constant(["29 nov", ""]),
        beam_size=tf.constant([1, 2]),
        max_length=tf.constant([5, 3]),
    )
    assert with_options["completion"].shape == (2,)


def test_imdb_preset_on_mock_data(tmp_path):
    output_dir = tmp_path / "run"
    with tfds.testing.mock_data(num_examples=40, policy=tfds.testing.MockPolicy.USE_CODE):
        language_model.main(
            [
                "--preset",
                "imdb",
                "--data-dir",
                str(tmp_path / "tfds"),
                "--output-dir",
                str(output_dir),
                "--vocabulary-size",
                "40",
                "--epochs",
                "1",
                "--batch-size",
                "8",
                "--max-length",
                "32",
                "--test-examples",
                "8",
            ]
        )
    assert (output_dir / "text_vocabulary.model").is_file()
    assert json.loads((output_dir / "evaluation.json").read_text())["perplexity"] > 1.0
