import dataclasses

import pytest

from keras_attention.recipes import config as recipe_config
from keras_attention.recipes import recipe
from keras_attention.recipes.translate import PRESETS, TranslateConfig


def test_flags_come_from_the_config_fields(capsys):
    fields = {field.name: field for field in dataclasses.fields(TranslateConfig)}
    assert fields["batch_size"].metadata["help"] == "global batch size, split over the replicas"
    assert "- `--batch-size` (default `64`): global batch size" in TranslateConfig.__doc__
    with pytest.raises(SystemExit):
        recipe_config.parse_config(TranslateConfig, PRESETS, ["--help"])
    help_text = capsys.readouterr().out
    assert "--batch-size" in help_text and "global batch size" in help_text
    config = recipe_config.parse_config(
        TranslateConfig, PRESETS, ["--preset", "dates_bahdanau", "--epochs", "3", "--jit-compile"]
    )
    assert (config.model, config.epochs, config.jit_compile) == ("seq2seq_attention", 3, True)
    assert config.data_dir is None and config.model_overrides == {"attention": "bahdanau"}
    config = recipe_config.parse_config(
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
        recipe_config.parse_config(TranslateConfig, PRESETS, argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_a_run_sets_deterministic_ops_either_way():
    """The setting is global to the process: a run without --deterministic
    after one with it must not stay deterministic (Keras would then drop
    --jit-compile without a word)."""
    from tensorflow.python.framework import config as tf_config

    recipe.set_op_determinism(True)
    assert tf_config.is_op_determinism_enabled()
    recipe.set_op_determinism(False)
    assert not tf_config.is_op_determinism_enabled()
