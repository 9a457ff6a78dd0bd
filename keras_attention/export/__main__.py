"""Exports a finished training run to TF Serving's layout.

    python -m keras_attention.export runs/translate
    python -m keras_attention.export runs/translate/model.keras --export-dir serving \
        --export-name dates
    python -m keras_attention.export runs/translate --jit-compile
    python -m keras_attention.export runs/translate --jit-compile --quantization int8
    python -m keras_attention.export runs/translate --format ctranslate2 --quantization int8

The run's folder (or the `.keras` file in it) holds what a recipe wrote: the
model, its vocabularies (`*_vocabulary.txt` or `.model`), `config.json` and,
for a classifier, `labels.json`. The export is a TensorFlow SavedModel, so
this runs on TensorFlow: started under another Keras backend (a model
trained on JAX), it says so and runs itself again with
`KERAS_BACKEND=tensorflow`; the `.keras` file loads on either.

`--beam-size` sets the beam size `serving_default` decodes with (the
run's, by default). `--jit-compile` compiles the search of a translator or a language model
with XLA (several times faster on CPU; see docs/serving.md for TF
Serving's flag). `--quantization int8` stores the weights of every dense
layer as int8 with a scale per output unit (Keras's `model.quantize("int8")`:
inputs are quantized per row as they come, and the products run in int8);
the export is smaller and, compiled with `--jit-compile`, faster on CPU.

`--format ctranslate2` writes a Transformer or TransformerLM run as a CTranslate2 model
directory instead (`--export-dir`, default `<run>/ctranslate2`), with the
run's vocabulary files (SentencePiece models) beside it; it needs `pip
install ctranslate2`.

The flags are the recipes' export flags, by the same names. The names
before them (`--base`, `--name`, `--version`, `--overwrite`, and
`--output-dir` for CTranslate2) still work, with a warning, and go in a
later release.
"""

import argparse
import os
import sys
from pathlib import Path


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_arguments(argv)

    import keras

    if keras.backend.backend() != "tensorflow":
        print(
            f"keras_attention.export: Keras runs on {keras.backend.backend()}; a SavedModel "
            "needs TensorFlow, so this runs again with KERAS_BACKEND=tensorflow",
            flush=True,
        )
        environment = {**os.environ, "KERAS_BACKEND": "tensorflow"}
        command = [sys.executable, "-m", "keras_attention.export", *argv]
        os.execve(sys.executable, command, environment)

    from keras_attention.run_files import RunFiles

    path = Path(args.run)
    run_dir = path.parent if path.is_file() else path
    model_path = path if path.is_file() else RunFiles(run_dir).model
    for needed in (model_path, RunFiles(run_dir).config):
        if not needed.is_file():
            raise SystemExit(f"error: {needed} not found: is {args.run} a finished run?")
    try:
        if args.format == "ctranslate2":
            written = export_run_to_ctranslate2(
                model_path, run_dir, args.export_dir, args.quantization, bool(args.overwrite_export)
            )
        else:
            written = export_run(
                model_path,
                run_dir,
                args.export_dir,
                args.export_name,
                args.export_version,
                bool(args.overwrite_export),
                jit_compile=bool(args.export_jit_compile),
                beam_size=args.beam_size,
                quantization=args.quantization,
                max_input_length=args.max_input_length,
                max_decoding_length=args.max_decoding_length,
                length_penalty=args.length_penalty,
            )
    except FileExistsError as error:
        raise SystemExit(f"error: {error}") from None
    except (ValueError, ImportError) as error:
        # An option out of range (named by `export_model`), a model
        # CTranslate2 cannot hold, a bad --quantization, no ctranslate2.
        raise SystemExit(f"error: {error}") from None
    print(f"exported {model_path} to {written}")
    return written


def parse_arguments(argv):
    """The command's flags; those given by their names before warn
    (`RENAMED`), and flags of the other `--format` are refused."""
    parser = argparse.ArgumentParser(
        prog="python -m keras_attention.export", description=__doc__.splitlines()[0]
    )
    parser.add_argument("run", help="a run's folder, or the model.keras file in it")
    parser.add_argument(
        "--export-dir",
        help="TF Serving base folder (default: <run>/serving); with --format ctranslate2, "
        "the model's folder (default: <run>/ctranslate2)",
    )
    parser.add_argument("--export-name", help="the model's name in TF Serving (default: the run's)")
    parser.add_argument("--export-version", type=int, help="version number (default: the next one)")
    parser.add_argument(
        "--overwrite-export",
        action="store_true",
        default=None,
        help="replace --export-version (or the CTranslate2 folder) if it exists",
    )
    # The names before (`RENAMED`), hidden from --help.
    parser.add_argument("--base", "--output-dir", dest="export_dir", help=argparse.SUPPRESS)
    parser.add_argument("--name", dest="export_name", help=argparse.SUPPRESS)
    parser.add_argument("--version", dest="export_version", type=int, help=argparse.SUPPRESS)
    parser.add_argument(
        "--overwrite",
        dest="overwrite_export",
        action="store_true",
        default=None,
        help=argparse.SUPPRESS,
    )
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default="saved_model",
        help="saved_model (TF Serving, the default) or ctranslate2",
    )
    parser.add_argument(
        "--quantization",
        help="the weights' type: int8 (default float32); with --format ctranslate2, any of "
        "CTranslate2's types (int8, int8_float32, float16, ...)",
    )
    parser.add_argument(
        "--beam-size",
        type=int,
        help="saved_model only: the beam size serving_default decodes with (default: the run's)",
    )
    parser.add_argument(
        "--max-input-length",
        type=int,
        help="saved_model only: tokens kept per input (default: the run's)",
    )
    parser.add_argument(
        "--max-decoding-length",
        type=int,
        help="saved_model only: the most tokens generated, and the most a request may ask "
        "for (default: the run's)",
    )
    parser.add_argument(
        "--length-penalty",
        type=float,
        help="saved_model only: the length penalty of the export's beam search, CTranslate2's "
        "(default: the run's)",
    )
    parser.add_argument(
        "--export-jit-compile",
        action="store_true",
        default=None,
        help="saved_model only: compile the search with XLA (several times faster on "
        "CPU; TF Serving needs --xla_cpu_compilation_enabled=true)",
    )
    parser.add_argument(  # its name before (`RENAMED`), hidden from --help
        "--jit-compile",
        dest="export_jit_compile",
        action="store_true",
        default=None,
        help=argparse.SUPPRESS,
    )
    args = parser.parse_args(argv)
    from keras_attention.renamed import warn_of_renamed_flags

    warn_of_renamed_flags(sys.argv[1:] if argv is None else argv, RENAMED)
    if args.format == "saved_model":
        if args.quantization not in (None, *SAVED_MODEL_QUANTIZATIONS):
            parser.error(
                "--quantization of a saved_model must be one of "
                f"{', '.join(SAVED_MODEL_QUANTIZATIONS)}; got {args.quantization!r}"
            )
    else:
        saved_model_only = (
            "export_name",
            "export_version",
            "beam_size",
            "export_jit_compile",
            "max_input_length",
            "max_decoding_length",
            "length_penalty",
        )
        for name in saved_model_only:
            if getattr(args, name) is not None:
                option = name.replace("_", "-")
                parser.error(f"--{option} is for --format saved_model (TF Serving's layout)")
    return args


FORMATS = ("saved_model", "ctranslate2")
# Keras's modes a SavedModel keeps and XLA compiles.
SAVED_MODEL_QUANTIZATIONS = ("int8",)
# The export flags' names before they took the recipes' names.
RENAMED = {
    "--base": "--export-dir",
    "--output-dir": "--export-dir",
    "--name": "--export-name",
    "--version": "--export-version",
    "--overwrite": "--overwrite-export",
    "--jit-compile": "--export-jit-compile",
}


def load_run(model_path, run_dir):
    """What an export needs of a finished run: `(model, config, files,
    tokenizer(side))`, where `tokenizer("source")` loads that side's
    vocabulary."""
    import keras

    import keras_attention  # noqa: F401  (registers the models for loading)
    from keras_attention.data.tokenizers import load_run_tokenizer
    from keras_attention.run_files import RunFiles, read_config

    files = RunFiles(run_dir)
    config = read_config(files.config)
    model = keras.saving.load_model(model_path)

    def tokenizer(side):
        try:
            return load_run_tokenizer(files, config, side)
        except ValueError as error:
            raise SystemExit(f"error: {error}") from None

    return model, config, files, tokenizer


def export_run(
    model_path,
    run_dir,
    base=None,
    name=None,
    version=None,
    overwrite=False,
    jit_compile=False,
    beam_size=None,
    quantization=None,
    max_input_length=None,
    max_decoding_length=None,
    length_penalty=None,
):
    """Exports the model at `model_path` with the vocabularies and config of
    `run_dir`; returns the version folder. `base`, `name`, `beam_size`,
    `max_input_length`, `max_decoding_length` and `length_penalty` default
    to the run's; `jit_compile` as in `export_model`; `quantization="int8"`
    quantizes the dense layers' weights first (`quantize_dense_layers`)."""
    from keras_attention.export import export_model
    from keras_attention.run_files import decoding_limits
    from keras_attention.tasks import task_of

    model, config, files, tokenizer = load_run(model_path, run_dir)
    if quantization is not None:
        quantize_dense_layers(model, quantization)
    task = task_of(model)
    if jit_compile and not task.compiles_search:
        raise SystemExit(
            f"error: --export-jit-compile compiles a search; {model_path} holds a "
            f"{type(model).__name__}"
        )
    tokenizers = [tokenizer(side) for side in task.sides]
    arguments = task.export_arguments(config, files)
    run_input_length, run_decoding_length = decoding_limits(config)
    decodes = "beam_size" in arguments
    if decodes:
        arguments.update(
            max_decoding_length=run_decoding_length, length_penalty=config.get("length_penalty")
        )
    given = {
        "beam_size": beam_size,
        "max_decoding_length": max_decoding_length,
        "length_penalty": length_penalty,
    }
    for option, value in given.items():
        if value is None:
            continue
        if not decodes:
            raise SystemExit(
                f"error: --{option.replace('_', '-')} is for a model that decodes; "
                f"{model_path} holds a {type(model).__name__}"
            )
        arguments[option] = value
    base = Path(base or config.get("export_dir") or files.serving)
    folder = export_model(
        model,
        base,
        name or config.get("export_name") or run_dir.name,
        *tokenizers,
        max_input_length=run_input_length if max_input_length is None else max_input_length,
        version=version,
        overwrite=overwrite,
        config=config,
        jit_compile=jit_compile,
        **arguments,
    )
    return folder


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


def export_run_to_ctranslate2(
    model_path, run_dir, output_dir=None, quantization=None, overwrite=False
):
    """Writes the run's Transformer or TransformerLM as a CTranslate2 model directory
    (default `<run>/ctranslate2`), the run's vocabulary files beside it;
    returns the directory."""
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        raise ImportError(
            "--format ctranslate2 needs the ctranslate2 package: pip install ctranslate2"
        ) from None
    from keras_attention.export.ctranslate2_model import export_ctranslate2
    from keras_attention.tasks import task_of

    model, config, files, tokenizer = load_run(model_path, run_dir)
    sides = task_of(model).sides  # ("source", "target"), or a language model's ("text",)
    vocabulary_files = sorted({files.vocabulary(side, config["tokenizer"]) for side in sides})
    return export_ctranslate2(
        model,
        output_dir or Path(run_dir) / "ctranslate2",
        *(tokenizer(side) for side in sides),
        quantization=quantization,
        vocabulary_files=vocabulary_files,
        overwrite=overwrite,
    )


if __name__ == "__main__":
    main()
