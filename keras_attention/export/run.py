"""Exporting a finished run: `export_run(run, overrides)`, the one place
that decides what a run's export is.

    from keras_attention.export.run import export_run
    export_run("runs/translate")              # serving/translate/<next version>/
    export_run("runs/translate", {"export_jit_compile": True, "quantization": "int8"})
    export_run("runs/translate", {"format": "ctranslate2"})   # runs/translate/ctranslate2/

What the run decided comes from its folder (by the `RunFiles` names): the
model (`model.keras`), its vocabularies, `config.json` and, for a
classifier, `labels.json`. The model's task says what of the config its
export takes (`Task.export_arguments`: a beam size, the decoding length
and length penalty, class names), and the folder, name and
`max_input_length` are the config's (`export_dir`, `export_name`,
`max_input_length`; by default `<run>/serving` and the run folder's
name). The caller's `overrides` go on top, by the export command's flag
names (`OVERRIDES`). What one export decides, rather than the run
(`export_version`, `overwrite_export`, `export_jit_compile`,
`quantization`, `format`), is never read from the run: a recipe's
config.json records its own, and a later `python -m keras_attention.export
RUN` must not replace the version the run wrote, so the recipe passes its
flags as overrides.

The export command (`python -m keras_attention.export RUN`, which parses
the flags and calls it), a recipe at the end of its run (with the model and
tokenisers it holds), `keras_attention.convert` and the benchmarks call
`export_run`. A SavedModel needs TensorFlow: on another Keras backend
(JAX), `export_run` runs the export command on TensorFlow
(`export_with_tensorflow`).
"""

import os
import subprocess
import sys
from pathlib import Path

from keras_attention.run_files import RunFiles, decoding_limits, read_config

# What a caller may override, by the export command's flags' names (also the
# recipes' flags and the keys of a recipe's config.json), in the order the
# command is given them.
OVERRIDES = (
    "format",
    "export_dir",
    "export_name",
    "export_version",
    "overwrite_export",
    "export_jit_compile",
    "quantization",
    "beam_size",
    "max_input_length",
    "max_decoding_length",
    "length_penalty",
)
FORMATS = ("saved_model", "ctranslate2")
# Keras's modes a SavedModel keeps and XLA compiles.
SAVED_MODEL_QUANTIZATIONS = ("int8",)
# Overrides of TF Serving's layout only (`--format saved_model`).
SAVED_MODEL_ONLY = (
    "export_name",
    "export_version",
    "beam_size",
    "export_jit_compile",
    "max_input_length",
    "max_decoding_length",
    "length_penalty",
)
# What a task that decodes takes from the run (`Task.export_arguments`) and a
# caller may override.
DECODING_OVERRIDES = ("beam_size", "max_decoding_length", "length_penalty")


class NotAFinishedRun(ValueError):
    """The folder holds no `model.keras` or no `config.json`."""


class ExportFailed(RuntimeError):
    """The export command, run on TensorFlow for a process on another
    backend, failed."""


def export_run(run, overrides=None, *, model=None, tokenizers=None):
    """Exports the finished run `run` (its folder, or the `.keras` file in
    it) as its files say, `overrides` on top, and returns what it wrote:
    the version folder `EXPORT_DIR/EXPORT_NAME/VERSION` of TF Serving's
    layout, or the CTranslate2 model folder.

    Args:
        run: the run's folder, or the model file in it.
        overrides: dict of `OVERRIDES` (None or absent: the run's, or the
            default): `format` ("saved_model", the default, or
            "ctranslate2"); `export_dir` (TF Serving's base folder, default
            the run's `export_dir` or `<run>/serving`; with ctranslate2,
            the model's folder, default `<run>/ctranslate2`);
            `export_name` (default the run's, or the folder's name);
            `export_version` (default the next one); `overwrite_export`
            (replace that version, or the CTranslate2 folder);
            `export_jit_compile` (XLA compiles the search);
            `quantization` ("int8"; for ctranslate2 any of its types);
            and the run's `beam_size`, `max_input_length`,
            `max_decoding_length` and `length_penalty`.
        model, tokenizers: the run's model and its tokenisers (in the
            order of its task's `sides`) when the caller holds them (a
            recipe that just trained and saved them), not loaded again.
            `quantization` quantizes `model` in place.

    Raises:
        NotAFinishedRun, or ValueError: no run there, an override out of
            range or not for this model or format.
        FileExistsError: the version (or CTranslate2 folder) exists and
            `overwrite_export` is not set.
        ImportError: ctranslate2 is not installed.
        ExportFailed: on another backend, the export command failed.
    """
    import keras

    overrides = check_overrides(overrides)
    run_dir, model_path = run_paths(run)
    files = RunFiles(run_dir)
    for needed in (model_path, files.config):
        if not needed.is_file():
            raise NotAFinishedRun(f"{needed} not found: is {run} a finished run?")
    config = read_config(files.config)
    if keras.backend.backend() != "tensorflow":
        return export_with_tensorflow(run, files, config, overrides)
    if overrides["format"] == "ctranslate2":
        return export_to_ctranslate2(model_path, files, config, overrides, model, tokenizers)
    return export_saved_model(model_path, files, config, overrides, model, tokenizers)


def check_overrides(overrides):
    """`overrides` (None values dropped, the format filled in), or a
    ValueError naming the flag that does not fit the format (the export
    command's `parse_arguments` shows it as its own)."""
    given = {
        name: value
        for name, value in (overrides or {}).items()
        if value is not None and value is not False  # not given (a flag left out)
    }
    unknown = sorted(set(given) - set(OVERRIDES))
    if unknown:
        raise TypeError(f"export_run() takes the overrides {OVERRIDES}. Received: {unknown}")
    given.setdefault("format", "saved_model")
    if given["format"] not in FORMATS:
        raise ValueError(f"--format must be one of {', '.join(FORMATS)}; got {given['format']!r}")
    if given["format"] == "saved_model":
        if given.get("quantization", SAVED_MODEL_QUANTIZATIONS[0]) not in (
            SAVED_MODEL_QUANTIZATIONS
        ):
            raise ValueError(
                "--quantization of a saved_model must be one of "
                f"{', '.join(SAVED_MODEL_QUANTIZATIONS)}; got {given['quantization']!r}"
            )
    else:
        for name in SAVED_MODEL_ONLY:
            if name in given:
                option = name.replace("_", "-")
                raise ValueError(f"--{option} is for --format saved_model (TF Serving's layout)")
    return given


def run_paths(run):
    """`(run folder, model file)` of `run`, a run's folder or the `.keras`
    file in it."""
    path = Path(run)
    if path.is_file():
        return path.parent, path
    return path, RunFiles(path).model


def load_run(run):
    """What an export needs of a finished run (its folder, or the `.keras`
    file in it): `(model, config, files, tokenizer(side))`, where
    `tokenizer("source")` loads that side's vocabulary (a ValueError naming
    the file when it cannot)."""
    run_dir, model_path = run_paths(run)
    files = RunFiles(run_dir)
    config = read_config(files.config)
    return load_model(model_path), config, files, tokenizer_loader(files, config)


def load_model(model_path):
    import keras

    import keras_attention  # noqa: F401  (registers the models for loading)

    return keras.saving.load_model(model_path)


def tokenizer_loader(files, config):
    """`tokenizer(side)`: the run's tokeniser of that side (`config`, its
    config.json, names the kind)."""
    from keras_attention.data.tokenizers import load_run_tokenizer

    return lambda side: load_run_tokenizer(files, config, side)


def saved_model_place(files, config, overrides):
    """`(base folder, name)` of the run's SavedModel: the overrides', else
    the run's, else `<run>/serving` and the run folder's name."""
    base = Path(overrides.get("export_dir") or config.get("export_dir") or files.serving)
    return base, overrides.get("export_name") or config.get("export_name") or files.folder.name


def export_saved_model(model_path, files, config, overrides, model=None, tokenizers=None):
    """The run in TF Serving's layout (`keras_attention.export.export_model`);
    returns the version folder."""
    from keras_attention.export import export_model
    from keras_attention.tasks import task_of

    if model is None:
        model = load_model(model_path)
    if "quantization" in overrides:
        quantize_dense_layers(model, overrides["quantization"])
    task = task_of(model)
    jit_compile = bool(overrides.get("export_jit_compile"))
    if jit_compile and not task.compiles_with_xla:
        raise ValueError(
            "--export-jit-compile compiles a search or an embedder; "
            f"{model_path} holds a {type(model).__name__}"
        )
    if tokenizers is None:
        tokenizer = tokenizer_loader(files, config)
        tokenizers = [tokenizer(side) for side in task.sides]
    arguments = task.export_arguments(config, files)
    decodes = "beam_size" in arguments
    for option in DECODING_OVERRIDES:
        if option not in overrides:
            continue
        if not decodes:
            raise ValueError(
                f"--{option.replace('_', '-')} is for a model that decodes; "
                f"{model_path} holds a {type(model).__name__}"
            )
        arguments[option] = overrides[option]
    base, name = saved_model_place(files, config, overrides)
    max_input_length, _ = decoding_limits(config)
    return export_model(
        model,
        base,
        name,
        *tokenizers,
        max_input_length=overrides.get("max_input_length", max_input_length),
        version=overrides.get("export_version"),
        overwrite=bool(overrides.get("overwrite_export")),
        config=config,
        jit_compile=jit_compile,
        **arguments,
    )


def quantize_dense_layers(model, mode):
    """Keras's `model.quantize(mode)` on the model's `Dense` layers, the
    ones that hold its matrix products: the embeddings (looked up, not
    multiplied), norms and positions stay float32."""
    import keras

    if mode not in SAVED_MODEL_QUANTIZATIONS:
        raise ValueError(
            f"`quantization` must be one of {SAVED_MODEL_QUANTIZATIONS}. Received: {mode!r}"
        )
    model.quantize(mode, filters=lambda layer: isinstance(layer, keras.layers.Dense))


def export_to_ctranslate2(model_path, files, config, overrides, model=None, tokenizers=None):
    """The run's Transformer or TransformerLM as a CTranslate2 model
    directory (default `<run>/ctranslate2`), the run's vocabulary files
    beside it; returns the directory."""
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        raise ImportError(
            "--format ctranslate2 needs the ctranslate2 package: pip install ctranslate2"
        ) from None
    from keras_attention.export.ctranslate2_model import export_ctranslate2
    from keras_attention.tasks import task_of

    if model is None:
        model = load_model(model_path)
    sides = task_of(model).sides  # ("source", "target"), or a language model's ("text",)
    if tokenizers is None:
        tokenizer = tokenizer_loader(files, config)
        tokenizers = [tokenizer(side) for side in sides]
    vocabulary_files = sorted({files.vocabulary(side, config["tokenizer"]) for side in sides})
    return export_ctranslate2(
        model,
        overrides.get("export_dir") or files.folder / "ctranslate2",
        *tokenizers,
        quantization=overrides.get("quantization"),
        vocabulary_files=vocabulary_files,
        overwrite=bool(overrides.get("overwrite_export")),
    )


def export_with_tensorflow(run, files, config, overrides):
    """On another Keras backend (a run trained on JAX), the export is made
    from the saved model file by `python -m keras_attention.export` on
    TensorFlow, in a process of its own; returns what it wrote. The
    SavedModel's folder, name and version are chosen here, so the folder
    the command writes is known."""
    flags = {name: value for name, value in overrides.items() if name != "format"}
    if overrides["format"] == "ctranslate2":
        written = Path(overrides.get("export_dir") or files.folder / "ctranslate2")
        command = ["--format", "ctranslate2"]
    else:
        from keras_attention.export.layout import next_version

        base, name = saved_model_place(files, config, overrides)
        version = overrides.get("export_version") or next_version(base / name)
        flags.update(export_dir=base, export_name=name, export_version=version)
        written = base / name / str(version)
        command = []
    for name in OVERRIDES:
        value = flags.get(name)
        if value is True:
            command.append("--" + name.replace("_", "-"))
        elif value not in (None, False):
            command += ["--" + name.replace("_", "-"), str(value)]
    command = [sys.executable, "-m", "keras_attention.export", str(run), *command]
    print(f"Exporting with TensorFlow: {' '.join(command[1:])}", flush=True)
    environment = {**os.environ, "KERAS_BACKEND": "tensorflow"}
    environment.pop("XLA_FLAGS", None)  # the JAX run's device settings
    result = subprocess.run(command, env=environment, capture_output=True, text=True)
    if result.returncode:
        raise ExportFailed(f"{' '.join(command[1:])} failed:\n{result.stderr[-3000:].strip()}")
    return written
