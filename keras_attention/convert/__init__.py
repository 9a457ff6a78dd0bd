"""Hugging Face checkpoints in: a local checkpoint folder becomes one of our
models with its tokenisers, and a run folder that everything reading a
finished run (the export command, the explorer, the client) reads as it is.

    python -m keras_attention.convert CHECKPOINT_DIR --output-dir RUN [--no-export] [--overwrite]

One module per family maps the checkpoint's names and shapes onto our
builders' options and our layers' weights (`marian`: OPUS-MT; `llama`:
Llama 2 and 3, Mistral and Qwen2; `gpt2`: GPT-2; `bert`: BERT
classifiers and encoders; `xlm_roberta`, `mpnet`: XLM-RoBERTa and MPNet embedders;
`sentence_transformers`: the modules that make an encoder an embedder),
chosen by `config.json`'s `model_type`; `byte_level_bpe` reads the
byte-level BPE `tokenizer.json` of GPT-2, Qwen2 and Llama 3. The weights
are read with numpy alone (`checkpoint.py`): neither torch nor
transformers is needed. What a family does not implement (a `rope_scaling`
kind, an activation, a tokenizer) is refused by name and value, never
converted approximately.
"""

import dataclasses
import json
from pathlib import Path

from keras_attention.convert import (
    bert,
    gpt2,
    llama,
    marian,
    mpnet,
    sentence_transformers,
    xlm_roberta,
)
from keras_attention.convert.checkpoint import CheckpointError
from keras_attention.data.tokenizers import tokenizer_kind
from keras_attention.tasks import task_of

FAMILIES = {
    model_type: family
    for family in (marian, llama, gpt2, bert, xlm_roberta, mpnet)
    for model_type in family.MODEL_TYPES
}

__all__ = ["Converted", "CheckpointError", "convert", "from_huggingface"]


@dataclasses.dataclass
class Converted:
    """A converted checkpoint: `model` (a `Transformer`, `TransformerLM` or
    `TransformerClassifier`), `tokenizers` (`{"source", "target"}` or
    `{"text"}`), `config`, the run's `config.json` (task, tokenizer kind,
    beam size, length), and a classifier's `label_names` (its
    `labels.json`)."""

    model: object
    tokenizers: dict
    config: dict
    label_names: list | None = None


def family_of(checkpoint):
    """The family module for the checkpoint's `model_type` and `architectures`."""
    model_type = checkpoint.config.get("model_type")
    if model_type not in FAMILIES:
        checkpoint.refuse("model_type", model_type, f"is not one of {sorted(FAMILIES)}")
    family = FAMILIES[model_type]
    for architecture in checkpoint.config.get("architectures") or family.ARCHITECTURES[:1]:
        if architecture not in family.ARCHITECTURES:
            checkpoint.refuse(
                "architectures",
                checkpoint.config["architectures"],
                (f"names {architecture!r}; {model_type} converts {list(family.ARCHITECTURES)}"),
            )
    return family


def from_huggingface(path, task=None):
    """Reads the Hugging Face checkpoint folder `path` (config.json,
    model.safetensors or its shards, the tokenizer files,
    generation_config.json) and returns a `Converted`: our model with the
    checkpoint's weights, its tokenisers, and its run config.

    A sentence-transformers folder (one with `modules.json`) becomes a
    `TransformerEmbedder` (task `"embedding"`). `task` picks another
    conversion where a family has two: `"embedding"` makes an embedder of a
    plain BERT folder too (mean pooling, sentence-transformers' fallback),
    where by default a `BertModel` becomes a classifier with a new head.
    None: the folder's own.

    Raises `CheckpointError` (a ValueError) naming the file or key of what
    cannot be converted exactly.
    """
    checkpoint, modules = sentence_transformers.open_folder(path)
    family = family_of(checkpoint)
    tasks = (family.TASK, *getattr(family, "OTHER_TASKS", ()))
    if task is not None and task not in tasks:
        raise CheckpointError(
            f"task={task!r}: a {checkpoint.config.get('model_type')} checkpoint converts to "
            f"{list(tasks)}"
        )
    if modules is not None or (task or family.TASK) == sentence_transformers.TASK:
        if modules is None:
            modules = sentence_transformers.Modules(checkpoint.folder)
        family = sentence_transformers.Embedder(family, modules)
    if task not in (None, family.TASK):
        raise CheckpointError(
            f"task={task!r}: {path} is a sentence-transformers folder; it converts to "
            f"{family.TASK!r}"
        )
    arguments, sides = family.read(checkpoint)
    tokenizers = family.tokenizers(checkpoint, sides)
    sizes = [tokenizers[side].vocabulary_size for side in task_of(family.TASK).sides]
    model = family.BUILDER(*sizes, **arguments)
    family.load_weights(model, checkpoint.weights(), sides)
    config = {
        "task": family.TASK,
        "tokenizer": tokenizer_kind(tokenizers[task_of(family.TASK).sides[0]]),
        **family.run_settings(checkpoint),
        "converted_from": {
            "checkpoint": str(Path(path).resolve()),
            "model_type": checkpoint.config["model_type"],
            "architectures": checkpoint.config.get("architectures"),
        },
    }
    label_names = family.label_names(checkpoint) if hasattr(family, "label_names") else None
    return Converted(model, tokenizers, config, label_names)


def convert(path, output_dir, export=True, overwrite=False, task=None):
    """Converts the checkpoint folder `path` into the run folder `output_dir`
    (config.json, the vocabularies, model.keras and, with `export`, the TF
    Serving export under `serving/`), written whole or not at all; returns
    `output_dir`. An existing `output_dir` is refused unless `overwrite`.
    `task` is `from_huggingface`'s."""
    from keras_attention.files import write_folder_atomically, write_json
    from keras_attention.run_files import RunFiles

    output_dir = Path(output_dir)
    if output_dir.exists() and not overwrite:
        raise FileExistsError(f"{output_dir} already exists; pass --overwrite to replace it")
    converted = from_huggingface(path, task=task)
    config = {**converted.config, "export_name": output_dir.name}

    def write(folder):
        files = RunFiles(folder)
        files.config.write_text(json.dumps(config, indent=2) + "\n")
        for side, tokenizer in converted.tokenizers.items():
            tokenizer.save(files.vocabulary(side, config["tokenizer"]))
        if converted.label_names is not None:
            write_json(files.labels, converted.label_names)
        converted.model.save(files.model)
        if export:
            from keras_attention.export.run import export_run

            export_run(folder)

    return write_folder_atomically(output_dir, write, replace=overwrite)
