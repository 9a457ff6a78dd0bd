"""The export at the end of a run: the trained model and its tokenisers in
TF Serving's layout. A TensorFlow run exports in its own process; a run on
another backend (JAX) from its saved `model.keras`, by `python -m
keras_attention.export` on TensorFlow."""

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import keras

from keras_attention.export import export_model, next_version


class ExportFailed(RuntimeError):
    """The export command, run for a model trained on another backend, failed."""


def export_run(model, output_dir, base, config, tokenizer, target_tokenizer, **arguments):
    """Exports the run's `model` (saved in `output_dir`) with its tokenisers
    to TF Serving's layout under `base`, as the run's config says
    (`--export-name`, `--export-version`, `--overwrite-export`,
    `--max-input-length`, `--export-jit-compile`, ...; `arguments` are the
    recipe's own, see `keras_attention.export.export_model`), and returns
    the version folder."""
    if keras.backend.backend() != "tensorflow":
        return export_with_tensorflow(output_dir, base, config)
    return export_model(
        model,
        base,
        config.export_name,
        tokenizer,
        target_tokenizer,
        max_input_length=config.max_input_length,
        version=config.export_version,
        jit_compile=config.export_jit_compile,
        overwrite=config.overwrite_export,
        config=dataclasses.asdict(config),
        **arguments,
    )


def export_with_tensorflow(output_dir, base, config):
    """A run trained on another backend (JAX) is exported from its saved
    `model.keras` by `python -m keras_attention.export`, which runs on
    TensorFlow; returns the version folder."""
    # The version is chosen here, so the folder the command writes is known.
    version = config.export_version or next_version(Path(base) / config.export_name)
    command = [sys.executable, "-m", "keras_attention.export", str(output_dir)]
    command += ["--export-dir", str(base), "--export-name", config.export_name]
    command += ["--export-version", str(version)]
    if config.overwrite_export:
        command.append("--overwrite-export")
    if config.export_jit_compile:
        command.append("--export-jit-compile")
    print(f"Exporting with TensorFlow: {' '.join(command[1:])}", flush=True)
    environment = {**os.environ, "KERAS_BACKEND": "tensorflow"}
    environment.pop("XLA_FLAGS", None)  # the JAX run's device settings
    result = subprocess.run(command, env=environment, capture_output=True, text=True)
    if result.returncode:
        raise ExportFailed(f"{' '.join(command[1:])} failed:\n{result.stderr[-3000:].strip()}")
    return Path(base) / config.export_name / str(version)
