import json
import math

import keras
import numpy as np
import pytest
import tensorflow as tf
from recipe_helpers import check_language_model_export, run_on_mock_data

import keras_attention  # noqa: F401  (registers the models for loading)
from keras_attention.recipes import language_model

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.mark.large  # a whole recipe run (see docs/testing.md)
def test_a_tiny_run_writes_everything(tmp_path, capsys):
    """The `tiny` preset; the `modern` options (rotary positions, sliding
    windows) are tests/recipes/test_resume_after_kill.py's windowed run."""
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
    assert model.get_config()["positions"] == "sinusoidal"
    assert (output_dir / "attention.png").read_bytes()[:8] == PNG_MAGIC
    assert printed.count(" -> ") >= 6  # the completions
    check_language_model_export(output_dir / "serving" / "language_model" / "1")


@pytest.mark.large  # a whole recipe run (see docs/testing.md)
def test_imdb_preset_on_mock_data(tmp_path):
    output_dir = run_on_mock_data(language_model.main, "imdb", tmp_path, 32)
    assert (output_dir / "text_vocabulary.model").is_file()
    assert json.loads((output_dir / "evaluation.json").read_text())["perplexity"] > 1.0


# A long-context run, even at tiny sizes: `pytest -m large`.
@pytest.mark.large
def test_long_context_preset_at_tiny_sizes(tmp_path, capsys):
    """`--preset long_context` (packed windows, attention in blocks), at a
    window of 96 tokens in blocks of 32 so that it runs in seconds."""
    output_dir = tmp_path / "run"
    language_model.main(
        [
            "--preset",
            "long_context",
            "--data-dir",
            str(tmp_path / "tfds"),
            "--output-dir",
            str(output_dir),
            "--train-examples",
            "300",
            "--test-examples",
            "100",
            "--max-input-length",
            "96",
            "--chunk-size",
            "32",
            "--batch-size",
            "2",
        ]
    )
    printed = capsys.readouterr().out
    assert "per-token perplexity on the test split" in printed
    model = keras.saving.load_model(output_dir / "model.keras")
    assert model.get_config()["chunk_size"] == 32
    assert model.get_config()["positions"] == "rotary"  # the modern decoder
    config = json.loads((output_dir / "config.json").read_text())
    assert config["pack_texts"] and config["max_input_length"] == 96
    results = json.loads((output_dir / "evaluation.json").read_text())
    assert 1.0 < results["perplexity"] < 1000.0
    with pytest.raises(SystemExit, match="--pack-texts: the training split has"):
        language_model.main(
            ["--preset", "long_context", "--data-dir", str(tmp_path / "tfds"),
             "--output-dir", str(tmp_path / "other"), "--train-examples", "3"]
        )  # fmt: skip


def test_packed_windows_are_the_stream_cut_in_equal_parts():
    from keras_attention.data.pipeline import language_model_batches
    from keras_attention.data.tokenizers import END_ID, START_ID, CharacterTokenizer

    tokenizer = CharacterTokenizer("abc")
    texts = tf.data.Dataset.from_tensor_slices(["abc", "a", "bbcc", "c"])
    batches = list(language_model_batches(texts, tokenizer, pack=True, batch_size=2, max_length=4))
    stream = []
    for text in ["abc", "a", "bbcc", "c"]:
        stream += [START_ID, *tokenizer.tokenize(tf.constant([text]))[0].numpy(), END_ID]
    # 17 tokens: windows of 5 (4 inputs + the next as label), 3 of them, 1 full batch.
    assert len(batches) == 1
    inputs, labels = (x.numpy() for x in batches[0])
    np.testing.assert_array_equal(inputs, [stream[0:4], stream[5:9]])
    np.testing.assert_array_equal(labels, [stream[1:5], stream[6:10]])
