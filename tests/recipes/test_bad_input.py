"""What a user gets wrong, or must act on, ends with a message, not a
traceback; and what training does with numbers that go wrong."""

import math

import h5py
import keras
import numpy as np
import pytest
import tensorflow_datasets as tfds
from recipe_helpers import tiny_flags

from keras_attention.data import datasets
from keras_attention.recipes import config as recipe_config
from keras_attention.recipes import resume, tokenizing, translate


def tiny(data_dir, output_dir, *extra):
    return tiny_flags(data_dir, output_dir, *extra, test_examples=16)


def test_a_data_dir_without_the_data_set(tmp_path, monkeypatch, capsys):
    def offline(self, *args, **kwargs):
        raise ConnectionError("no route to host")

    monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare", offline)
    monkeypatch.chdir(tmp_path)  # the preset's default --output-dir, runs/translate, is relative
    with pytest.raises(SystemExit) as stop:
        translate.main(["--preset", "ted_pt_en", "--data-dir", str(tmp_path / "tfds")])
    message = str(stop.value)
    assert message.startswith("error: The TFDS data set 'ted_hrlr_translate/pt_to_en' is not in")
    assert str(tmp_path / "tfds") in message and "no route to host" in message
    assert "tfds build ted_hrlr_translate/pt_to_en" in message


@pytest.mark.parametrize(
    "error",
    [
        datasets.DataNotFound("no data"),
        resume.UnreadableCheckpoints("no checkpoint can be read"),
        resume.TrainingDiverged("the loss became nan"),
        FileExistsError("serving/m/1 already exists; pass --overwrite-export"),
    ],
)
def test_what_the_user_must_act_on_is_a_message(error):
    class Failing(translate.TranslateRecipe):
        def run(self):
            raise error

    with pytest.raises(SystemExit) as stop:
        recipe_config.main(Failing, translate.PRESETS, [])
    assert str(stop.value) == f"error: {error}"


def stored_floats(weights_file):
    """Every floating-point array in a Keras weights file."""
    arrays = []
    with h5py.File(weights_file) as store:
        store.visititems(
            lambda name, item: arrays.append(item[()]) if hasattr(item, "dtype") else None
        )
    return [a for a in arrays if np.issubdtype(np.asarray(a).dtype, np.floating)]


def test_a_typo_in_model_overrides_is_an_error_not_the_default_model(dates_data_dir, tmp_path):
    output_dir = tmp_path / "run"
    flags = tiny(dates_data_dir, output_dir, "--model-overrides", '{"num_layer": 3}')
    with pytest.raises(SystemExit) as stop:
        translate.main(flags)
    assert str(stop.value).startswith(
        "error: Transformer got an unexpected keyword argument 'num_layer'. It takes: "
    )
    assert "num_layers" in str(stop.value)
    assert not (output_dir / "checkpoints").exists()  # nothing trained


@pytest.mark.large  # a whole recipe run (see docs/testing.md)
def test_a_diverging_run_stops_with_a_message_and_keeps_no_nan(dates_data_dir, tmp_path):
    output_dir = tmp_path / "run"
    flags = tiny(dates_data_dir, output_dir, "--learning-rate", "1e12", "--checkpoint-every", "1")
    with pytest.raises(SystemExit, match=r"error: The training loss became (nan|inf) at epoch 1"):
        translate.main(flags)
    assert not (output_dir / "evaluation.json").exists()
    assert not (output_dir / "serving").exists()  # no broken model is exported
    checkpoints = list((output_dir / "checkpoints").glob("epoch-*"))
    assert checkpoints  # saved before the loss broke (a step every checkpoint)
    for checkpoint in checkpoints:
        assert all(np.isfinite(a).all() for a in stored_floats(checkpoint / resume.WEIGHTS_FILE))


@pytest.mark.large  # a whole recipe run (see docs/testing.md)
def test_mixed_float16_trains_with_loss_scaling_and_finite_numbers(
    dates_data_dir, tmp_path, capsys
):
    output_dir = tmp_path / "run"
    translate.main(
        tiny(dates_data_dir, output_dir, "--precision", "mixed_float16", "--epochs", "3")
    )
    printed = capsys.readouterr().out
    losses = [
        float(line.split(" - loss: ")[1].split(" ")[0])
        for line in printed.splitlines()
        if " - loss: " in line
    ]
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses)
    assert losses[-1] < losses[0] * 0.9  # it learns
    keras.config.set_dtype_policy("mixed_float16")
    try:
        model = keras.saving.load_model(output_dir / "model.keras")
        assert type(model.optimizer).__name__ == "LossScaleOptimizer"
        # A padded batch, including a row that is all padding: nothing inf or NaN.
        ids = np.array([[5, 6, 7, 0, 0], [0, 0, 0, 0, 0]])
        logits = keras.ops.convert_to_numpy(model({"source_ids": ids, "target_ids": ids}))
        assert np.isfinite(logits.astype("float32")).all()
    finally:
        keras.config.set_dtype_policy("float32")


def test_truncated_training_texts_are_counted_and_reported(capsys):
    from keras_attention.data.tokenizers import CharacterTokenizer

    tokenizer = CharacterTokenizer.train(["abc"])
    assert tokenizing.warn_if_truncated("sources", tokenizer, ["ab", "abcabc", "abca"], 3) == 2
    assert capsys.readouterr().out == (
        "WARNING: 2 of 3 training sources have more than 3 tokens and are truncated "
        "(raise --max-input-length to keep them whole)\n"
    )
    assert tokenizing.warn_if_truncated("sources", tokenizer, ["ab"], 3) == 0
    assert capsys.readouterr().out == ""
