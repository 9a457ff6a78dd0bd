"""The names of what a training run writes in its folder, in one place.

The recipes write these files; the export command
(`python -m keras_attention.export RUN`) and anything else that reads a
finished run find them here by the same names:

    runs/translate/
      config.json                 the resolved config (every flag's value)
      source_vocabulary.txt       character vocabularies (.model: SentencePiece)
      target_vocabulary.txt       (a classifier or LM: text_vocabulary.*)
      labels.json                 a classifier's class names, in id order
      checkpoints/                resume points
      logs/                       TensorBoard
      evaluation.json             the test split's results
      test_translations.tsv       a translation run's test outputs
      model.keras                 the trained model
      serving/NAME/VERSION/       the TF Serving export (default base folder)
      attention.png               an attention map
"""

import dataclasses
import json
from pathlib import Path

# The vocabulary file's extension for each tokeniser (`--tokenizer`).
# "mapped_subword" (a converted checkpoint's): the .json names the pieces'
# ids, a .model of the same name beside it is the SentencePiece model.
# "wordpiece" (a converted BERT's): the .json holds the vocabulary and the
# normalisation options. "byte_level_bpe" (GPT-2's, Qwen2's, Llama 3's):
# the .json holds the tokens, merges, pre-tokenizer regex and options.
VOCABULARY_EXTENSIONS = {
    "character": "txt",
    "subword": "model",
    "mapped_subword": "json",
    "wordpiece": "json",
    "byte_level_bpe": "json",
}


@dataclasses.dataclass(frozen=True)
class RunFiles:
    """The files of the run in `folder`."""

    folder: Path

    def __post_init__(self):
        object.__setattr__(self, "folder", Path(self.folder))

    @property
    def config(self):
        return self.folder / "config.json"

    @property
    def labels(self):
        return self.folder / "labels.json"

    @property
    def checkpoints(self):
        return self.folder / "checkpoints"

    @property
    def logs(self):
        return self.folder / "logs"

    @property
    def evaluation(self):
        return self.folder / "evaluation.json"

    @property
    def test_translations(self):
        return self.folder / "test_translations.tsv"

    @property
    def model(self):
        return self.folder / "model.keras"

    @property
    def serving(self):
        """The TF Serving base folder a run exports to unless told otherwise."""
        return self.folder / "serving"

    @property
    def attention_picture(self):
        return self.folder / "attention.png"

    def vocabulary(self, side, tokenizer):
        """The vocabulary file of `side` ("source", "target", or "text" for a
        model with one vocabulary) for a `tokenizer` kind ("character",
        "subword")."""
        return self.folder / f"{side}_vocabulary.{VOCABULARY_EXTENSIONS[tokenizer]}"


# config.json keys renamed, old -> new: a run written before still reads.
RENAMED_CONFIG_KEYS = {"max_length": "max_input_length"}


def read_config(path):
    """A run's `config.json` (at `path`) as a dict, keys renamed since it
    was written given their new names (`RENAMED_CONFIG_KEYS`)."""
    config = json.loads(Path(path).read_text("utf-8"))
    for old, new in RENAMED_CONFIG_KEYS.items():
        if old in config and new not in config:
            config[new] = config.pop(old)
    return config


def decoding_limits(config):
    """`(max_input_length, max_decoding_length)` of a run's config (the
    second defaults to the first)."""
    max_input_length = config["max_input_length"]
    return max_input_length, config.get("max_decoding_length") or max_input_length
