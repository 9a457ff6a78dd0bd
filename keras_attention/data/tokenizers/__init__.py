"""Tokenisers that run inside the TensorFlow graph, so they can go into a
SavedModel and run in TF Serving unchanged.

Ids 0-3 are reserved in every vocabulary: 0 padding, 1 start, 2 end,
3 unknown. Every tokeniser offers `tokenize` (strings -> ragged ids),
`detokenize` (ids -> strings, up to the first end id), `vocabulary`,
`vocabulary_size`, `save` and `load`; the two a recipe trains
(`CharacterTokenizer`, `SubwordTokenizer`) also `train`.

The package, a file per tokeniser, each named after its kind:
`character.py` (`CharacterTokenizer`), `subword.py` (`SubwordTokenizer`,
a SentencePiece vocabulary trained here), `mapped_subword.py`
(`MappedSubwordTokenizer`, a converted checkpoint's SentencePiece model),
`wordpiece.py` (`WordPieceTokenizer`, BERT's), `byte_level_bpe.py`
(`ByteLevelBPETokenizer`, GPT-2's, Qwen2's and Llama 3's); beside them
`sentencepiece_ops.py` (`SentencePieceOps`, TF Text's SentencePiece ops
for the two SentencePiece tokenisers), `_common.py` (the reserved tokens
and the helpers the tokenisers share), `ids.py` (`token_ids`,
`pair_token_ids`, `repair_utf8`, `padded`, `prompt_start`: strings to a
model's ids with any tokeniser) and `registry.py` (`tokenizer_kinds`,
`tokenizer_kind`, `load_run_tokenizer`: the kinds a run folder names).
Imports go one way: `_common.py` <- the tokenisers <- `registry.py` <-
this file.
"""

from keras_attention.data.tokenizers._common import (
    END,
    PAD,
    RESERVED,
    START,
    UNKNOWN,
    WORD_BOUNDARY,
)
from keras_attention.data.tokenizers.byte_level_bpe import ByteLevelBPETokenizer
from keras_attention.data.tokenizers.character import CharacterTokenizer
from keras_attention.data.tokenizers.ids import (
    padded,
    pair_token_ids,
    prompt_start,
    repair_utf8,
    token_ids,
)
from keras_attention.data.tokenizers.mapped_subword import MappedSubwordTokenizer
from keras_attention.data.tokenizers.registry import (
    TOKENIZERS,
    load_run_tokenizer,
    tokenizer_kind,
    tokenizer_kinds,
)
from keras_attention.data.tokenizers.sentencepiece_ops import SentencePieceOps
from keras_attention.data.tokenizers.subword import SubwordTokenizer
from keras_attention.data.tokenizers.wordpiece import (
    BERT_DROPPED,
    BERT_WHITESPACE,
    WordPieceTokenizer,
)
from keras_attention.utils import END_ID, PAD_ID, START_ID, UNKNOWN_ID

__all__ = [
    "BERT_DROPPED",
    "BERT_WHITESPACE",
    "END",
    "END_ID",
    "PAD",
    "PAD_ID",
    "RESERVED",
    "START",
    "START_ID",
    "TOKENIZERS",
    "UNKNOWN",
    "UNKNOWN_ID",
    "WORD_BOUNDARY",
    "ByteLevelBPETokenizer",
    "CharacterTokenizer",
    "MappedSubwordTokenizer",
    "SentencePieceOps",
    "SubwordTokenizer",
    "WordPieceTokenizer",
    "load_run_tokenizer",
    "padded",
    "pair_token_ids",
    "prompt_start",
    "repair_utf8",
    "token_ids",
    "tokenizer_kind",
    "tokenizer_kinds",
]
