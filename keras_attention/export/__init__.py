"""SavedModels that TensorFlow Serving runs as they are: text in, text out.

    from keras_attention import export
    path = export.export_model(model, "serving", "dates", source_tokenizer,
                               target_tokenizer, max_length=48)
    # serving/dates/1/ : saved_model.pb, variables/, assets.extra/

`export_model` writes `BASE/NAME/VERSION/` (the next free version unless one
is given) atomically, with the signatures of `signatures.py`, TF Serving
warm-up requests, and `assets.extra/keras_attention.json` (what was exported
and how). The SavedModel loads with only `tensorflow` and
`tensorflow_text` imported: `tf.saved_model.load(path).signatures[...]`.
"""

import json
from pathlib import Path

import tensorflow as tf

from keras_attention.export.layout import (
    WARMUP_FILE,
    next_version,
    read_warmup_requests,
    versions,
    write_models_config,
    write_version,
    write_warmup_requests,
)
from keras_attention.export.signatures import MAX_BEAM_SIZE, make_server
from keras_attention.utils import check_positive_int

__all__ = [
    "MAX_BEAM_SIZE",
    "WARMUP_FILE",
    "export_model",
    "next_version",
    "read_warmup_requests",
    "versions",
    "write_models_config",
]

METADATA_FILE = Path("assets.extra") / "keras_attention.json"
WARMUP_TEXTS = ("", "2026-11-29", "a text longer than most, to warm up longer shapes too")


def export_model(
    model,
    base_path,
    name,
    tokenizer,
    target_tokenizer=None,
    *,
    max_length,
    beam_size=1,
    label_names=None,
    version=None,
    overwrite=False,
    warmup_texts=WARMUP_TEXTS,
    config=None,
    jit_compile=False,
):
    """Exports a trained zoo model and its tokenisers for TF Serving.

    Args:
        model: a `Transformer` or `Seq2SeqAttention` (translation),
            `TransformerClassifier` or `TransformerLM`.
        base_path: the model server's base folder (`--model_base_path`'s parent).
        name: the model's name in TF Serving; the export goes to `base_path/name/`.
        tokenizer: the (source) tokeniser, a `CharacterTokenizer` or
            `SubwordTokenizer`.
        target_tokenizer: the target tokeniser of a translation model.
        max_length: int, tokens kept per input (longer inputs are truncated)
            and the most tokens generated; also the largest `max_length` a
            request may ask for.
        beam_size: int, the default beam size of generating signatures
            (1: greedy); a request may ask for up to `MAX_BEAM_SIZE`.
        label_names: the class names of a classifier, in class-id order.
        version: positive int; by default one more than the highest present.
        overwrite: replace `version` if it exists (otherwise an error).
        warmup_texts: texts of the warm-up requests (one request per signature).
        config: optional dict (e.g. the recipe's resolved config), saved in the
            metadata file.
        jit_compile: bool, the search of a translation model (or of a
            language model whose positions do not end) with the export's
            beam size and `max_length` is compiled by XLA (several times
            faster on CPU). TF Serving then needs
            `--xla_cpu_compilation_enabled=true`; see docs/serving.md.

    Returns:
        The `Path` of the version folder, `base_path/name/VERSION`. Beside
        the models, `base_path` gets `models.config` (every model in it, as
        the server sees them with the folder mounted at `/models`) and
        `batching_parameters.txt` (see `write_models_config`).
    """
    check_positive_int("max_length", max_length)
    check_positive_int("beam_size", beam_size)
    if beam_size > MAX_BEAM_SIZE:
        raise ValueError(f"`beam_size` must be at most {MAX_BEAM_SIZE}. Received: {beam_size}")
    if not name or "/" in str(name) or str(name).startswith("."):
        raise ValueError(f"`name` must be a folder name. Received: name={name!r}")
    server = make_server(
        model, tokenizer, target_tokenizer, max_length, beam_size, label_names, jit_compile
    )
    metadata = {
        "model": type(model).__name__,
        "signatures": sorted(server.signatures()),
        "max_length": max_length,
        "beam_size": beam_size,
        "max_beam_size": MAX_BEAM_SIZE,
        "jit_compile": jit_compile,
        "quantization": quantization_of(model),
        "label_names": None if label_names is None else [str(n) for n in label_names],
        "config": config,
    }

    def write(folder):
        tf.saved_model.save(server, str(folder), signatures=server.signatures())
        write_warmup_requests(folder, server.warmup_inputs(list(warmup_texts)), str(name))
        metadata_path = folder / METADATA_FILE
        metadata_path.write_text(json.dumps(metadata, indent=2, ensure_ascii=False) + "\n")

    folder = write_version(Path(base_path) / str(name), write, version=version, overwrite=overwrite)
    # What the server needs to serve every model of the base folder, with the
    # folder mounted at /models (see the README's docker command).
    names = sorted(child.name for child in Path(base_path).iterdir() if versions(child))
    write_models_config(Path(base_path) / "models.config", {n: f"/models/{n}" for n in names})
    return folder


def quantization_of(model):
    """`"int8"` for a model given `model.quantize("int8")` (some of its
    weights are int8), None for float weights."""
    return "int8" if any(weight.dtype == "int8" for weight in model.weights) else None
