"""The tokeniser kinds a run folder names (its config.json's "tokenizer"),
and loading a run's tokenisers by kind."""

from keras_attention.data.tokenizers.byte_level_bpe import ByteLevelBPETokenizer
from keras_attention.data.tokenizers.character import CharacterTokenizer
from keras_attention.data.tokenizers.mapped_subword import MappedSubwordTokenizer
from keras_attention.data.tokenizers.subword import SubwordTokenizer
from keras_attention.data.tokenizers.wordpiece import WordPieceTokenizer

# The kinds a recipe trains itself (the others come with converted checkpoints).
TOKENIZERS = ("character", "subword")


def tokenizer_kinds():
    """`{kind: class}` of the tokenisers a run folder may name (its
    config.json's "tokenizer")."""
    return {
        "character": CharacterTokenizer,
        "subword": SubwordTokenizer,
        "mapped_subword": MappedSubwordTokenizer,
        "wordpiece": WordPieceTokenizer,
        "byte_level_bpe": ByteLevelBPETokenizer,
    }


def tokenizer_kind(tokenizer):
    """The kind a run folder records for `tokenizer`."""
    return next(kind for kind, cls in tokenizer_kinds().items() if type(tokenizer) is cls)


def load_run_tokenizer(files, config, side):
    """The tokeniser a recipe saved for `side` ("source", "target", or
    "text" for a model with one vocabulary) in a run's folder: `files` its
    `RunFiles`, `config` its `config.json` as a dict, whose "tokenizer"
    names the kind. A ValueError that names the file when the kind or the
    vocabulary file is missing."""
    kinds = tokenizer_kinds()
    kind = config.get("tokenizer")
    if kind not in kinds:
        raise ValueError(
            f"{files.config} names no tokenizer ({', '.join(kinds)}): tokenizer={kind!r}"
        )
    file = files.vocabulary(side, kind)
    if not file.is_file():
        raise ValueError(f"{files.folder} has no {side} vocabulary: {file} not found")
    return kinds[kind].load(file)
