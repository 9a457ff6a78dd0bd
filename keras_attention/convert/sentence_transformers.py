"""sentence-transformers folders: an encoder checkpoint with the modules that
make one vector per text (`modules.json`), into our `TransformerEmbedder`.

A sentence-transformers folder lists its modules in `modules.json`, in the
order they run: a Transformer (the Hugging Face checkpoint, at `path` "" or
a subfolder such as `0_BERT`), a Pooling (`1_Pooling/config.json`:
its mode), optionally a Dense (`2_Dense/`: `config.json` and its weights)
and a Normalize (no files: its folder is often absent). Beside them,
`sentence_bert_config.json` gives the most tokens a text keeps
(`max_seq_length`) and whether texts are lower-cased first, and
`config_sentence_transformers.json` the prompts (text put before a text,
such as E5's `"query: "`) and the default one. Both the layout the Hub's
folders have (sentence-transformers 2 to 5: `pooling_mode_mean_tokens`
and its siblings) and sentence-transformers 6's (`pooling_mode`) are read.

A plain encoder folder without `modules.json` becomes an embedder too when
asked (`--task embedding`), with mean pooling: sentence-transformers' own
fallback for such folders. What is not supported (a module kind, several
pooling modes at once, an activation) is refused by name.
"""

import dataclasses
import json
from pathlib import Path

from keras_attention.convert.checkpoint import Checkpoint, CheckpointError, read_json, read_weights
from keras_attention.models import build_transformer_embedder
from keras_attention.tasks import Embedding

TASK = Embedding.name
BUILDER = build_transformer_embedder
MODULE_KINDS = ("Transformer", "Pooling", "Dense", "Normalize")
# The `model_type`s whose family reads an encoder (`load_encoder_weights`).
ENCODER_FAMILIES = ("bert", "xlm-roberta", "mpnet")
# `pooling_mode_*` keys of the Hub's folders -> our `TokenPooling` modes.
POOLING_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
# torch activation classes a Dense module names -> Keras activations.
ACTIVATIONS = {
    "torch.nn.modules.activation.Tanh": "tanh",
    "torch.nn.modules.linear.Identity": None,
    "torch.nn.modules.activation.ReLU": "relu",
    "torch.nn.modules.activation.Sigmoid": "sigmoid",
}


@dataclasses.dataclass
class Modules:
    """What a sentence-transformers folder's modules say, beside the encoder:
    the encoder's folder, the pooling mode, the Dense module (None, or its
    folder, config and weights), whether vectors are normalized, the most
    tokens a text keeps (None: the tokenizer's own), lower-casing, and the
    prompts with the default one's name."""

    encoder_folder: Path
    pooling: str = "mean"
    dense: dict | None = None
    unit_normalize: bool = False
    max_seq_length: int | None = None
    do_lower_case: bool = False
    prompts: dict = dataclasses.field(default_factory=dict)
    default_prompt_name: str | None = None


def is_sentence_transformers(folder):
    return (Path(folder) / "modules.json").is_file()


def read_modules(folder):
    """The `Modules` of the sentence-transformers folder `folder`."""
    folder = Path(folder)
    path = folder / "modules.json"
    try:
        modules = json.loads(path.read_text("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{path} is not valid JSON: {error}") from None
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise CheckpointError(f"{path} must hold a list of modules")
    kinds = []
    for module in modules:
        kind = str(module.get("type", ""))
        name = kind.rsplit(".", 1)[-1]
        if not kind.startswith("sentence_transformers.") or name not in MODULE_KINDS:
            raise CheckpointError(
                f"{path}: module type {kind!r} is not supported "
                f"(sentence-transformers' {', '.join(MODULE_KINDS)})"
            )
        kinds.append((name, folder / str(module.get("path", ""))))
    names = [name for name, _ in kinds]
    allowed = [["Transformer", "Pooling"], ["Transformer", "Pooling", "Dense"]]
    if names[-1:] == ["Normalize"]:
        names = names[:-1]
    if names not in allowed:
        raise CheckpointError(
            f"{path}: modules {[name for name, _ in kinds]} are not supported "
            "(Transformer, Pooling, then optionally Dense, then optionally Normalize)"
        )
    places = dict(kinds)
    found = Modules(
        encoder_folder=places["Transformer"],
        pooling=pooling_mode(places["Pooling"] / "config.json"),
        unit_normalize="Normalize" in places,
    )
    if "Dense" in places:
        found.dense = read_dense(places["Dense"])
    read_encoder_settings(found)
    read_prompts(found, folder / "config_sentence_transformers.json")
    return found


def pooling_mode(path):
    """The one pooling mode `1_Pooling/config.json` names."""
    config = read_json(path)
    if "pooling_mode" in config:  # sentence-transformers 6
        mode = config["pooling_mode"]
        modes = [mode] if isinstance(mode, str) else list(mode or [])
    else:
        modes = [value for key, value in POOLING_KEYS.items() if config.get(key)]
    if len(modes) != 1 or modes[0] not in POOLING_KEYS.values():
        raise CheckpointError(
            f"{path}: pooling modes {modes} are not supported (exactly one of "
            f"{list(POOLING_KEYS.values())})"
        )
    if not config.get("include_prompt", True):
        raise CheckpointError(
            f"{path}: include_prompt=False is not supported (the prompt's tokens are pooled)"
        )
    return modes[0]


def read_dense(folder):
    """A Dense module: its width in and out, bias, activation and weights."""
    path = folder / "config.json"
    config = read_json(path)
    activation = config.get("activation_function", "torch.nn.modules.activation.Tanh")
    if activation not in ACTIVATIONS:
        raise CheckpointError(
            f"{path}: activation_function={activation!r} is not supported ({list(ACTIVATIONS)})"
        )
    for key in ("in_features", "out_features"):
        if not isinstance(config.get(key), int) or config[key] < 1:
            raise CheckpointError(f"{path}: {key}={config.get(key)!r} is not a positive integer")
    return {
        "folder": folder,
        "in_features": config["in_features"],
        "out_features": config["out_features"],
        "bias": bool(config.get("bias", True)),
        "activation": ACTIVATIONS[activation],
    }


def read_encoder_settings(modules):
    """`sentence_bert_config.json` beside the encoder (`max_seq_length`,
    `do_lower_case`), where there is one."""
    path = modules.encoder_folder / "sentence_bert_config.json"
    config = read_json(path, required=False) or {}
    length = config.get("max_seq_length")
    if length is not None and (not isinstance(length, int) or length < 3):
        raise CheckpointError(f"{path}: max_seq_length={length!r} is not an integer >= 3")
    modules.max_seq_length = length
    modules.do_lower_case = bool(config.get("do_lower_case", False))


def read_prompts(modules, path):
    config = read_json(path, required=False) or {}
    prompts = config.get("prompts") or {}
    if not isinstance(prompts, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in prompts.items()
    ):
        raise CheckpointError(f"{path}: prompts={prompts!r} is not a mapping of names to texts")
    # A prompt of "" puts nothing first: the same as no prompt.
    modules.prompts = {name: text for name, text in prompts.items() if name}
    default = config.get("default_prompt_name")
    if default is not None and default not in modules.prompts:
        raise CheckpointError(
            f"{path}: default_prompt_name={default!r} is not one of the prompts "
            f"{sorted(modules.prompts)}"
        )
    modules.default_prompt_name = default
    similarity = config.get("similarity_fn_name")
    if similarity not in (None, "cosine", "dot"):
        raise CheckpointError(
            f"{path}: similarity_fn_name={similarity!r} is not supported (cosine or dot)"
        )


class Embedder:
    """A family (`keras_attention.convert`'s interface) that makes a
    `TransformerEmbedder` of an encoder family's checkpoint (`family`, which
    has `load_encoder_weights`) and the folder's `Modules`."""

    TASK = TASK
    BUILDER = staticmethod(BUILDER)

    def __init__(self, family, modules):
        self.family, self.modules = family, modules
        if not hasattr(family, "load_encoder_weights"):
            raise CheckpointError(
                f"{modules.encoder_folder}: model_type {family.MODEL_TYPES[0]!r} cannot be an "
                f"embedder here ({', '.join(ENCODER_FAMILIES)} can)"
            )

    def read(self, checkpoint):
        arguments, sides = self.family.read(checkpoint)
        for key in ("num_classes", "pooling"):
            arguments.pop(key, None)
        arguments["pooling"] = self.modules.pooling
        arguments["unit_normalize"] = self.modules.unit_normalize
        dense = self.modules.dense
        if dense is not None:
            if dense["in_features"] != arguments["model_dim"]:
                raise CheckpointError(
                    f"{dense['folder'] / 'config.json'}: in_features={dense['in_features']} "
                    f"but the encoder's width is {arguments['model_dim']}"
                )
            arguments.update(
                output_dim=dense["out_features"],
                output_activation=dense["activation"],
                output_use_bias=dense["bias"],
            )
        return arguments, sides

    def max_length(self, checkpoint):
        """The most ids a text keeps: `max_seq_length`, or the encoder's."""
        most = self.family.max_length(checkpoint)
        if self.modules.max_seq_length is not None:
            most = min(most, self.modules.max_seq_length)
        return most

    def tokenizers(self, checkpoint, sides):
        tokenizer = self.family.tokenizers(checkpoint, sides)["text"]
        if self.modules.do_lower_case and not getattr(tokenizer, "lower_case", False):
            raise CheckpointError(
                f"{self.modules.encoder_folder / 'sentence_bert_config.json'}: do_lower_case=True "
                "with a tokenizer that keeps case is not supported"
            )
        return {"text": tokenizer.with_max_length(self.max_length(checkpoint))}

    def load_weights(self, model, weights, sides):
        prefix = self.family.load_encoder_weights(model, weights, sides)
        for name in ("dense.weight", "dense.bias"):  # BERT's pooler: not a module here
            if f"{prefix}pooler.{name}" in weights:
                weights.skip(f"{prefix}pooler.{name}")
        weights.check_all_taken()
        dense = self.modules.dense
        if dense is not None:
            folder = dense["folder"]
            tensors = read_weights_in(folder)
            if "linear.weight" not in tensors:
                raise CheckpointError(f"{folder}: no linear.weight in its model.safetensors")
            dense_weights = type(weights)(tensors, folder)
            model.output_dense.set_weights(
                dense_weights.dense(
                    "linear", dense["in_features"], dense["out_features"], bias=dense["bias"]
                )
            )
            dense_weights.check_all_taken()

    def run_settings(self, checkpoint):
        return {
            **self.family.run_settings(checkpoint),
            "max_input_length": self.max_length(checkpoint),
            "prompts": self.modules.prompts,
            "default_prompt_name": self.modules.default_prompt_name,
        }


def read_weights_in(folder):
    """A module folder's weights (`model.safetensors`; a `pytorch_model.bin`
    needs torch, so it is refused by name)."""
    if not (folder / "model.safetensors").is_file():
        raise CheckpointError(
            f"{folder}: model.safetensors not found (a pytorch_model.bin needs torch to read: "
            "save the module with safetensors)"
        )
    return read_weights(folder)


def open_folder(path):
    """`(checkpoint, modules)`: the encoder's `Checkpoint` and the folder's
    `Modules`, or `(Checkpoint(path), None)` for a plain checkpoint."""
    if not is_sentence_transformers(path):
        return Checkpoint(path), None
    modules = read_modules(path)
    return Checkpoint(modules.encoder_folder), modules
