import dataclasses
import math

import keras
import numpy as np
import pytest
from helpers import to_numpy

from keras_attention.recipes import common
from keras_attention.recipes.translate import PRESETS, TranslateConfig


def test_label_smoothed_loss_matches_the_formula_and_skips_padding():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 3, 5)).astype("float32")
    labels = np.array([[1, 4, 0], [2, 3, 3]])
    epsilon = 0.1
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    per_token = -(
        (1 - epsilon) * np.take_along_axis(log_probs, labels[..., None], -1)[..., 0]
        + epsilon * log_probs.mean(-1)
    )
    loss = common.MaskedSparseCrossentropy(epsilon)
    np.testing.assert_allclose(float(loss(labels, logits)), per_token.mean(), rtol=1e-5)

    # With the logits' padding mask, padded positions do not count.
    mask = labels != 0
    masked_logits = keras.ops.convert_to_tensor(logits)
    masked_logits._keras_mask = keras.ops.convert_to_tensor(mask)
    np.testing.assert_allclose(
        float(loss(labels, masked_logits)), per_token[mask].mean(), rtol=1e-5
    )


def test_schedule_is_the_papers():
    schedule = common.TransformerSchedule(512, warmup_steps=4000)
    for step in (1, 100, 3999, 4000, 10000, 100000):
        expected = 512**-0.5 * min(step**-0.5, step * 4000**-1.5)
        np.testing.assert_allclose(float(schedule(step - 1)), expected, rtol=1e-5)
    peak = float(schedule(3999))
    assert peak == pytest.approx(512**-0.5 * 4000**-0.5, rel=1e-5)
    assert float(schedule(2000)) < peak and float(schedule(20000)) < peak
    assert math.isclose(
        float(
            keras.optimizers.schedules.deserialize(keras.optimizers.schedules.serialize(schedule))(
                10
            )
        ),
        float(schedule(10)),
    )


def test_token_accuracy_ignores_padding():
    metric = common.MaskedAccuracy()
    logits = np.zeros((1, 4, 3), "float32")
    logits[0, [0, 1, 2, 3], [1, 2, 2, 0]] = 1.0  # predicts 1, 2, 2, 0
    metric.update_state(np.array([[1, 1, 2, 0]]), logits)
    assert float(to_numpy(metric.result())) == pytest.approx(2 / 3)


def test_flags_come_from_the_config_fields(capsys):
    fields = {field.name: field for field in dataclasses.fields(TranslateConfig)}
    assert fields["batch_size"].metadata["help"] == "global batch size, split over the replicas"
    assert "- `--batch-size` (default `64`): global batch size" in TranslateConfig.__doc__
    with pytest.raises(SystemExit):
        common.parse_config(TranslateConfig, PRESETS, ["--help"])
    help_text = capsys.readouterr().out
    assert "--batch-size" in help_text and "global batch size" in help_text
    config = common.parse_config(
        TranslateConfig, PRESETS, ["--preset", "dates_bahdanau", "--epochs", "3", "--jit-compile"]
    )
    assert (config.model, config.epochs, config.jit_compile) == ("seq2seq_attention", 3, True)
    assert config.data_dir is None and config.model_overrides == {"attention": "bahdanau"}
    config = common.parse_config(
        TranslateConfig, PRESETS, ["--model-overrides", '{"dropout": 0.0, "num_layers": 1}']
    )
    assert config.model_overrides == {"dropout": 0.0, "num_layers": 1}
    # Each config gets its own copy of a dict default.
    assert TranslateConfig().model_overrides is not TranslateConfig().model_overrides


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--strategy", "parameter_server"], "`--strategy` must be one of"),
        (["--batch-size", "0"], "--batch-size must be positive"),
        (["--batch-size", "many"], "invalid int value: 'many'"),
        (["--preset", "wmt99"], "invalid choice: 'wmt99'"),
        (["--model-overrides", "dropout=0.1"], "--model-overrides: not JSON"),
        (["--model-overrides", "[1, 2]"], "a JSON object is needed"),
        (["--model", "lstm"], "`--model` must be one of"),
        (["--precision", "float8"], "`--precision` must be one of"),
        (["--learning-rate", "-1"], "--learning-rate must be positive"),
        (["--label-smoothing", "1.5"], "--label-smoothing must be in [0, 1)"),
        (["--export-version", "0"], "--export-version must be positive"),
        (["--jit-compile", "--deterministic"], "--jit-compile and --deterministic do not combine"),
    ],
)
def test_bad_flags_exit_with_a_message(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        common.parse_config(TranslateConfig, PRESETS, argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_a_run_sets_deterministic_ops_either_way():
    """The setting is global to the process: a run without --deterministic
    after one with it must not stay deterministic (Keras would then drop
    --jit-compile without a word)."""
    from tensorflow.python.framework import config as tf_config

    common.set_op_determinism(True)
    assert tf_config.is_op_determinism_enabled()
    common.set_op_determinism(False)
    assert not tf_config.is_op_determinism_enabled()
