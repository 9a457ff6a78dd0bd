"""`python -m keras_attention.export RUN`: a finished run's folder to TF
Serving's layout, from either Keras backend."""

import json
import os
import subprocess
import sys

import pytest
import tensorflow as tf
from export_helpers import (
    MAX_LENGTH,
    as_bytes,
    ask_a_fresh_process,
    decode_in_process,
    make_run,
    reversal_pairs,
)

from keras_attention import export


def test_a_run_exports_from_either_backend_quantized_and_compiled(exports, tmp_path):
    """Started on JAX, the command runs itself again on TensorFlow (which a
    SavedModel needs): that second process is the same command as one
    started on TensorFlow, so this one run checks both. With another beam
    size and another decoding length than the run's, `--quantization int8`
    (Keras's int8 weights kept in the SavedModel) and `--export-jit-compile`
    (XLA compiles the search over them): loaded as TF Serving loads it, the
    export answers at least 95% of 400 held-out sources exactly as the
    float32 model does. (One export checks them all: each takes most of a
    minute. The run's config.json has the name of `--max-input-length`
    before, `max_length`.)"""
    run = make_run(exports, tmp_path / "run")
    sources = [source for source, _ in reversal_pairs(400, seed=7)]
    expected = decode_in_process(
        exports.translator, exports.tokenizer, sources, beam_size=3, max_length=4
    )
    result = subprocess.run(
        [sys.executable, "-m", "keras_attention.export", str(run / "model.keras")]
        + ["--export-dir", str(tmp_path / "serving"), "--export-name", "from_jax"]
        + ["--export-jit-compile", "--beam-size", "3", "--max-decoding-length", "4"]
        + ["--quantization", "int8"],
        env={**os.environ, "KERAS_BACKEND": "jax"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (
        "Keras runs on jax; a SavedModel needs TensorFlow, so this runs again with "
        "KERAS_BACKEND=tensorflow"
    ) in result.stdout
    version = tmp_path / "serving" / "from_jax" / "1"
    assert f"to {version}" in result.stdout
    assert "from_jax" in (tmp_path / "serving" / "models.config").read_text()
    metadata = json.loads((version / export.METADATA_FILE).read_text())
    assert metadata["jit_compile"] is True and metadata["beam_size"] == 3
    assert (metadata["max_input_length"], metadata["max_decoding_length"]) == (MAX_LENGTH, 4)
    assert metadata["quantization"] == "int8"
    checkpoint = tf.train.load_checkpoint(str(version / "variables" / "variables"))
    assert tf.int8 in checkpoint.get_variable_to_dtype_map().values()
    request = ("serving_default", {"text": as_bytes(sources)})
    answers = ask_a_fresh_process({str(version): [request]}, tmp_path)[str(version)]["answers"]
    same = sum(a == b for a, b in zip(answers[0]["translation"], expected, strict=True))
    assert same >= 0.95 * len(sources), f"{same} of {len(sources)} answers as float32's"


def test_a_bad_quantization_is_refused_by_name():
    """(The command's flag: tests/export/test_ctranslate2.py, with the other
    flags each format refuses.)"""
    from keras_attention.export.run import quantize_dense_layers

    with pytest.raises(ValueError, match="`quantization` must be one of .* Received: 'int3'"):
        quantize_dense_layers(None, "int3")


def test_a_folder_that_is_not_a_run_is_refused(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "keras_attention.export", str(tmp_path)],
        env={**os.environ, "KERAS_BACKEND": "tensorflow"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 1
    assert f"error: {tmp_path / 'model.keras'} not found" in result.stderr
    assert export.versions(tmp_path) == []


def test_the_export_flags_are_the_recipes_and_the_names_before_still_work():
    from keras_attention.export.__main__ import parse_arguments

    new = ["run", "--export-dir", "b", "--export-name", "n", "--export-version", "3"]
    args = parse_arguments([*new, "--overwrite-export"])
    assert (args.export_dir, args.export_name, args.export_version) == ("b", "n", 3)
    assert args.overwrite_export
    old = ["run", "--base", "b", "--name", "n", "--version", "3", "--overwrite"]
    with pytest.warns(FutureWarning) as warned:
        args = parse_arguments(old)
    assert (args.export_dir, args.export_name, args.export_version) == ("b", "n", 3)
    assert args.overwrite_export
    assert [str(w.message).split(";")[0] for w in warned] == [
        "--base is now --export-dir",
        "--name is now --export-name",
        "--version is now --export-version",
        "--overwrite is now --overwrite-export",
    ]
    with pytest.warns(FutureWarning, match="--output-dir is now --export-dir"):
        args = parse_arguments(["run", "--format", "ctranslate2", "--output-dir", "c"])
    assert args.export_dir == "c"
    with pytest.warns(FutureWarning, match="--jit-compile is now --export-jit-compile"):
        assert parse_arguments(["run", "--jit-compile"]).export_jit_compile


def test_help_shows_the_new_names_only(capsys):
    """The names before still work (above) but `--help` shows only today's."""
    from keras_attention.export import client
    from keras_attention.export.__main__ import parse_arguments

    for parse in (parse_arguments, client.main):
        with pytest.raises(SystemExit):
            parse(["--help"])
        shown = capsys.readouterr().out
        assert "--export-jit-compile" in shown or "--max-decoding-length" in shown
        for old in ("--jit-compile", "--max-length", "--base", "--overwrite "):
            assert f" {old}" not in shown.replace("--export-jit-compile", ""), old


def test_bad_decoding_flags_are_refused_by_name(exports, tmp_path, capsys):
    """A bad `--max-decoding-length` or `--length-penalty` stops the
    command with a message naming it, before anything is written; the
    decoding flags are the SavedModel's only."""
    from keras_attention.export.__main__ import main

    run = make_run(exports, tmp_path / "run")
    serving = ["--export-dir", str(tmp_path / "s")]
    with pytest.raises(SystemExit, match="`max_decoding_length` must be a positive integer"):
        main([str(run), "--max-decoding-length", "0", *serving])
    with pytest.raises(SystemExit, match="`length_penalty` must be a number >= 0"):
        main([str(run), "--length-penalty", "-1", *serving])
    assert export.versions(tmp_path / "s" / "reverse") == []
    with pytest.raises(SystemExit):
        main([str(run), "--format", "ctranslate2", "--max-decoding-length", "4"])
    assert "--max-decoding-length is for --format saved_model" in capsys.readouterr().err


def test_export_run_takes_the_run_s_settings_with_the_caller_s_overrides(tmp_path, monkeypatch):
    """`export_run`, the one export of a run (the command, the recipes,
    the converter and the benchmarks call it): what the run decided comes
    from its config.json (beam size, lengths, length penalty, folder and
    name), the caller's overrides on top. What a recipe's config.json
    records of its own export (`export_version`, `overwrite_export`,
    `export_jit_compile`) is never read: a later export must not replace
    the version the run wrote. (`export_model` is recorded, not run.)"""
    from keras_attention.data.tokenizers import CharacterTokenizer
    from keras_attention.export.run import NotAFinishedRun, export_run
    from keras_attention.models import build_transformer, build_transformer_classifier
    from keras_attention.run_files import RunFiles

    calls = []
    monkeypatch.setattr(
        export, "export_model", lambda *args, **kwargs: calls.append((args, kwargs)) or "written"
    )
    tokenizer = CharacterTokenizer("0123456789")
    tiny = dict(num_layers=1, model_dim=16, num_heads=2, intermediate_dim=32)
    files = RunFiles(tmp_path / "run")
    files.folder.mkdir()
    build_transformer(tokenizer.vocabulary_size, tokenizer.vocabulary_size, **tiny).save(
        files.model
    )
    for side in ("source", "target"):
        tokenizer.save(files.vocabulary(side, "character"))
    config = {
        "tokenizer": "character",
        "max_input_length": 12,
        "beam_size": 3,
        "length_penalty": 0.8,
        "export_name": "dates",
        "export_version": 1,
        "overwrite_export": True,
        "export_jit_compile": True,
    }
    files.config.write_text(json.dumps(config))

    assert export_run(files.folder) == "written"
    (args, kwargs), *_ = calls
    assert args[1:3] == (files.serving, "dates") and len(args) == 5  # model, 2 tokenizers
    assert kwargs == {
        "max_input_length": 12,
        "version": None,
        "overwrite": False,
        "config": config,
        "jit_compile": False,
        "beam_size": 3,
        "max_decoding_length": 12,
        "length_penalty": 0.8,
    }
    overrides = {"export_dir": str(tmp_path / "elsewhere"), "export_version": 4}
    overrides.update(beam_size=2, max_decoding_length=5, export_jit_compile=True)
    export_run(files.model, overrides)
    args, kwargs = calls[-1]
    assert args[1:3] == (tmp_path / "elsewhere", "dates")
    assert (kwargs["version"], kwargs["jit_compile"], kwargs["max_input_length"]) == (4, True, 12)
    assert (kwargs["beam_size"], kwargs["max_decoding_length"]) == (2, 5)

    build_transformer_classifier(tokenizer.vocabulary_size, 2, **tiny).save(files.model)
    files.labels.write_text('["no", "yes"]')
    tokenizer.save(files.vocabulary("text", "character"))
    export_run(files.folder)
    assert calls[-1][1]["label_names"] == ["no", "yes"]
    with pytest.raises(ValueError, match="--beam-size is for a model that decodes; .* holds a"):
        export_run(files.folder, {"beam_size": 2})
    with pytest.raises(ValueError, match="--export-jit-compile compiles a search"):
        export_run(files.folder, {"export_jit_compile": True})
    with pytest.raises(ValueError, match="--export-name is for --format saved_model"):
        export_run(files.folder, {"format": "ctranslate2", "export_name": "x"})
    with pytest.raises(NotAFinishedRun, match="is .*empty a finished run"):
        export_run(tmp_path / "empty")
