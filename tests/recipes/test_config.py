import dataclasses
import json

import pytest

from keras_attention.recipes import config as recipe_config
from keras_attention.recipes import run_folder, training
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
    from keras_attention import compat

    training.set_op_determinism(True)
    assert compat.is_op_determinism_enabled()
    training.set_op_determinism(False)
    assert not compat.is_op_determinism_enabled()


def test_a_folder_holding_a_run_is_resumed_only_by_the_same_settings(tmp_path):
    """A recipe pointed at a folder with another run's settings stops before
    it writes anything, names the folder and what differs, and says the two
    ways on; nothing there is moved or deleted. The same settings resume;
    those that do not change the checkpoints (`--epochs`, the export's) may
    differ; a setting left None matches what the run chose for its data."""
    output_dir = tmp_path / "run"
    first = TranslateConfig(output_dir=str(output_dir), max_input_length=48, vocabulary_size=None)
    run_folder.start_run(first)
    saved = output_dir / "config.json"
    chosen = dict(json.loads(saved.read_text()), vocabulary_size=500)  # as `prepare` writes it
    saved.write_text(json.dumps(chosen))
    checkpoint = output_dir / "checkpoints" / "epoch-00001-step-0000010" / "model.weights.h5"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"weights")

    other = dataclasses.replace(first, max_input_length=32, vocabulary_size=800)
    with pytest.raises(recipe_config.OtherRunInFolder) as refused:
        run_folder.start_run(other)
    message = str(refused.value)
    assert f"--output-dir {output_dir} holds a run with other settings" in message
    assert "--max-input-length 48 there, 32 now" in message
    assert "--vocabulary-size 500 there, 800 now" in message
    assert "a new --output-dir" in message and "--overwrite" in message
    assert json.loads(saved.read_text()) == chosen and checkpoint.read_bytes() == b"weights"

    for same in (first, dataclasses.replace(first, epochs=9, export=False, test_examples=5)):
        run_folder.start_run(same)
        assert checkpoint.read_bytes() == b"weights"
    # A run written before `--max-input-length` had its name resumes too.
    chosen["max_length"] = chosen.pop("max_input_length")
    saved.write_text(json.dumps(chosen))
    run_folder.start_run(first)
    # So does one written before a flag existed, by its default; not by another value.
    for newer in ("ema_momentum", "final_decay", "time_budget"):
        chosen.pop(newer)
    saved.write_text(json.dumps(chosen))
    run_folder.start_run(first)
    saved.write_text(json.dumps(chosen))
    with pytest.raises(recipe_config.OtherRunInFolder, match="--ema-momentum not set there, 0.9"):
        run_folder.start_run(dataclasses.replace(first, ema_momentum=0.9))
    assert checkpoint.read_bytes() == b"weights"


def test_a_resumed_run_keeps_what_it_chose_for_its_data(tmp_path):
    """Choices are read back, not made again: a run begun by an older
    recipe (sentence batches, no decay, 2 epochs) goes on so, and a flag
    newer than the run keeps the run's behaviour without it."""
    output_dir = tmp_path / "run"
    config = TranslateConfig(output_dir=str(output_dir), train_file="pairs.tsv")
    _, _, started = run_folder.start_run(config)
    assert (started.batch_tokens, started.epochs, started.final_decay) == (None, None, None)
    saved = output_dir / "config.json"
    as_prepared = dict(json.loads(saved.read_text()), tokenizer="subword", epochs=2)
    as_prepared.update(vocabulary_size=8000, model_preset="tiny", batch_tokens=0, final_decay=0.0)
    saved.write_text(json.dumps(as_prepared))
    _, _, resumed = run_folder.start_run(config)
    kept = ("tokenizer", "vocabulary_size", "model_preset", "epochs", "batch_tokens")
    assert [getattr(resumed, name) for name in (*kept, "final_decay")] == [
        "subword",
        8000,
        "tiny",
        2,
        0,
        0.0,
    ]
    assert json.loads(saved.read_text())["batch_tokens"] == 0  # and still written there
    for newer in ("batch_tokens", "final_decay"):
        as_prepared.pop(newer)
    saved.write_text(json.dumps(as_prepared))
    _, _, resumed = run_folder.start_run(config)
    assert (resumed.batch_tokens, resumed.final_decay) == (0, 0.0)
    # Given flags win (those a run may change on resuming).
    _, _, resumed = run_folder.start_run(dataclasses.replace(config, epochs=5))
    assert resumed.epochs == 5
    # A fine-tuning run takes its tokenizer and model from --init-from again.
    fine_tuning = dataclasses.replace(config, init_from=str(tmp_path / "pretrained"))
    saved.write_text(json.dumps(dict(as_prepared, init_from=fine_tuning.init_from)))
    _, _, resumed = run_folder.start_run(fine_tuning)
    assert (resumed.tokenizer, resumed.vocabulary_size, resumed.model_preset) == (None,) * 3
    assert (resumed.epochs, resumed.batch_tokens) == (2, 0)


def test_overwrite_deletes_the_run_and_nothing_else(tmp_path):
    output_dir = tmp_path / "run"
    run_folder.start_run(TranslateConfig(output_dir=str(output_dir), max_input_length=48))
    (output_dir / "checkpoints").mkdir()
    (output_dir / "checkpoints" / "position.json").write_text("{}")
    (output_dir / ".worker1").mkdir()  # another process's, cleared by that process
    run_folder.start_run(
        TranslateConfig(output_dir=str(output_dir), max_input_length=32, overwrite=True)
    )
    assert sorted(path.name for path in output_dir.iterdir()) == [".worker1", "config.json"]
    assert json.loads((output_dir / "config.json").read_text())["max_input_length"] == 32
    # A folder that holds no run is not cleared: a mistyped --output-dir loses nothing.
    kept = tmp_path / "mine" / "notes.txt"
    kept.parent.mkdir()
    kept.write_text("mine")
    run_folder.start_run(TranslateConfig(output_dir=str(kept.parent), overwrite=True))
    assert kept.read_text() == "mine"


def test_the_command_says_how_on_when_the_folder_holds_another_run(tmp_path):
    from keras_attention.recipes import translate

    output_dir = tmp_path / "run"
    run_folder.start_run(TranslateConfig(output_dir=str(output_dir)))
    with pytest.raises(SystemExit) as exit_info:
        translate.main(["--output-dir", str(output_dir), "--max-input-length", "20"])
    assert str(exit_info.value).startswith(f"error: --output-dir {output_dir} holds a run")


@pytest.mark.parametrize(
    "recipe_name,config_name",
    [
        ("translate", "TranslateConfig"),
        ("classify", "ClassifyConfig"),
        ("language_model", "LanguageModelConfig"),
    ],
)
def test_help_shows_every_default_every_choice_and_what_each_preset_sets(
    recipe_name, config_name, capsys
):
    import importlib

    module = importlib.import_module(f"keras_attention.recipes.{recipe_name}")
    config_class = getattr(module, config_name)
    with pytest.raises(SystemExit):
        recipe_config.parse_config(config_class, module.PRESETS, ["--help"])
    help_text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for group in ("data flags:", "model flags:", "training flags:", "evaluation and export flags:"):
        assert group in help_text
    listed = help_text[help_text.index("data flags:") :]  # after the usage line
    assert listed.index("--max-input-length INT") < listed.index("model flags:")
    assert "--max-length " not in help_text  # its name before: hidden, still taken
    assert listed.index("model flags:") < listed.index("--batch-size INT")
    for field in dataclasses.fields(config_class):
        assert recipe_config.flag_name(field) in help_text
    assert "--batch-size INT global batch size, split over the replicas (default: 64)" in help_text
    assert "(default: --shuffle)" in help_text and "(default: --no-jit-compile)" in help_text
    assert "--precision {float32,mixed_float16,mixed_bfloat16}" in help_text
    assert "--strategy {default,mirrored,multi_worker,tpu,data_parallel}" in help_text
    assert "--preset picks settings for the whole recipe" in help_text
    for name in module.PRESETS:
        assert f" {name}: " in help_text


def test_a_renamed_flag_still_works_with_a_warning():
    """`--max-length`, the name of `--max-input-length` before, sets it for
    one release, with a FutureWarning naming the new flag."""
    from keras_attention.recipes import translate

    with pytest.warns(FutureWarning, match="--max-length is now --max-input-length"):
        config = recipe_config.parse_config(
            translate.TranslateConfig, translate.PRESETS, ["--max-length", "20"]
        )
    assert config.max_input_length == 20
    config = recipe_config.parse_config(
        translate.TranslateConfig,
        translate.PRESETS,
        ["--max-input-length", "20", "--max-decoding-length", "12", "--length-penalty", "0.5"],
    )
    assert (config.max_input_length, config.max_decoding_length) == (20, 12)
    assert config.length_penalty == 0.5


def test_model_presets_are_listed_and_a_wrong_one_is_refused_at_once(capsys):
    """`--help` lists each model's presets; a preset the chosen model does
    not have stops the command before any data is read, naming them."""
    from keras_attention.recipes import language_model, translate

    with pytest.raises(SystemExit):
        recipe_config.parse_config(translate.TranslateConfig, translate.PRESETS, ["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "(transformer: tiny, base, big; seq2seq_attention: tiny, rnnsearch)" in help_text
    with pytest.raises(SystemExit):
        recipe_config.parse_config(
            translate.TranslateConfig,
            translate.PRESETS,
            ["--model", "seq2seq_attention", "--model-preset", "base"],
        )
    error = capsys.readouterr().err
    assert "--model-preset" in error and "'base'" in error and "rnnsearch" in error
    config = recipe_config.parse_config(
        language_model.LanguageModelConfig, language_model.PRESETS, ["--model-preset", "modern"]
    )
    assert config.model_preset == "modern"


def test_a_token_batch_must_hold_one_sequence_of_the_longest_length(capsys):
    with pytest.raises(SystemExit):
        recipe_config.parse_config(TranslateConfig, PRESETS, ["--batch-tokens", "40"])
    error = capsys.readouterr().err
    assert "--batch-tokens 40 holds no sequence of --max-input-length 48 tokens" in error
    config = recipe_config.parse_config(
        TranslateConfig, PRESETS, ["--batch-tokens", "40", "--max-input-length", "40"]
    )
    assert config.batch_tokens == 40
    with pytest.raises(SystemExit):
        recipe_config.parse_config(TranslateConfig, PRESETS, ["--batch-tokens", "-1"])
    assert "--batch-tokens must be 0 or more; got -1" in capsys.readouterr().err
    config = recipe_config.parse_config(TranslateConfig, PRESETS, ["--batch-tokens", "0"])
    assert config.batch_tokens == 0  # batches of --batch-size sentences


@pytest.mark.parametrize("flag", ["--batch-tokens", "--average-last"])
def test_a_count_that_may_be_zero_is_refused_below_zero_by_name(flag, capsys):
    with pytest.raises(SystemExit):
        recipe_config.parse_config(TranslateConfig, PRESETS, [flag, "-2"])
    assert f"{flag} must be 0 or more; got -2" in capsys.readouterr().err
    config = recipe_config.parse_config(TranslateConfig, PRESETS, [flag, "0"])
    assert getattr(config, flag[2:].replace("-", "_")) == 0
