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

The command parses its flags and calls
`keras_attention.export.run.export_run` (by which the recipes, the
converter and the benchmarks export a run too), the flags given
overriding what the run says. They are the recipes' export flags, by the
same names. The names before them (`--base`, `--name`, `--version`,
`--overwrite`, and `--output-dir` for CTranslate2) still work, with a
warning, and go in a later release.
"""

import argparse
import os
import sys

from keras_attention.export.run import FORMATS, check_overrides, export_run, run_paths


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

    try:
        written = export_run(args.run, overrides_of(args))
    except FileExistsError as error:
        raise SystemExit(f"error: {error}") from None
    except (ValueError, ImportError) as error:
        # Not a finished run, an option out of range (named by
        # `export_model`), a model CTranslate2 cannot hold, no ctranslate2.
        raise SystemExit(f"error: {error}") from None
    _, model_path = run_paths(args.run)
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
    try:
        check_overrides(overrides_of(args))
    except ValueError as error:
        parser.error(str(error))
    return args


# The export flags' names before they took the recipes' names.
RENAMED = {
    "--base": "--export-dir",
    "--output-dir": "--export-dir",
    "--name": "--export-name",
    "--version": "--export-version",
    "--overwrite": "--overwrite-export",
    "--jit-compile": "--export-jit-compile",
}


def overrides_of(args):
    """The flags given, as `export_run`'s overrides (by the same names)."""
    return {name: value for name, value in vars(args).items() if name != "run"}


if __name__ == "__main__":
    main()
