"""`SubwordTokenizer`: a SentencePiece (unigram) vocabulary trained here."""

import io
from pathlib import Path

import tensorflow as tf

from keras_attention.data.tokenizers._common import (
    END,
    PAD,
    RESERVED,
    START,
    UNKNOWN,
    _before_end,
    _join_pieces,
)
from keras_attention.data.tokenizers.sentencepiece_ops import SentencePieceOps
from keras_attention.utils import END_ID, PAD_ID, START_ID, UNKNOWN_ID


class SubwordTokenizer(tf.Module):
    """A SentencePiece (unigram) subword vocabulary, trained with
    `sentencepiece` and applied in the graph by `tensorflow_text`, whose ops
    the TF Serving model server links in.

    Args:
        model: the serialized SentencePiece model (bytes), as written by
            `save` or `train`.
    """

    def __init__(self, model, name=None):
        super().__init__(name=name)
        import sentencepiece

        self.model = bytes(model)
        processor = sentencepiece.SentencePieceProcessor(model_proto=self.model)
        self.vocabulary = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
        self._sentencepiece = SentencePieceOps(self.model, tf.int32)
        self._pieces = SentencePieceOps(self.model, tf.string)

    @classmethod
    def train(cls, texts, vocabulary_size, symbols=()):
        """Trains a unigram model on `texts` (an iterable of str).

        `vocabulary_size` counts the 4 reserved ids; a corpus too small for
        it gets a smaller vocabulary rather than an error. `symbols` (str
        without spaces, such as placeholders like `%s`) are kept as one
        piece each wherever they occur (SentencePiece's user-defined symbols).
        """
        import sentencepiece

        model = io.BytesIO()
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(texts),
            model_writer=model,
            vocab_size=vocabulary_size,
            model_type="unigram",
            pad_id=PAD_ID,
            bos_id=START_ID,
            eos_id=END_ID,
            unk_id=UNKNOWN_ID,
            pad_piece=PAD,
            bos_piece=START,
            eos_piece=END,
            unk_piece=UNKNOWN,
            hard_vocab_limit=False,
            character_coverage=1.0,
            user_defined_symbols=[s for s in symbols if s not in RESERVED],  # <s>: a tag too
            minloglevel=2,
        )
        return cls(model.getvalue())

    @property
    def vocabulary_size(self):
        return len(self.vocabulary)

    def tokenize(self, texts):
        """`tf.string [B]` -> int32 `RaggedTensor [B, None]`, no start or end id."""
        return self._sentencepiece("tokenize", texts)

    def tokenize_as_strings(self, texts):
        """`tf.string [B]` -> `RaggedTensor [B, None]` of strings: the piece
        behind each id of `tokenize` (a piece the vocabulary lacks too)."""
        return self._pieces("tokenize", texts)

    def detokenize(self, ids):
        """int `[B, T]` -> `tf.string [B]`, up to the first end id."""
        ids = tf.cast(ids, tf.int32)
        keep = _before_end(ids) & (ids >= len(RESERVED))
        return self._sentencepiece("detokenize", tf.ragged.boolean_mask(ids, keep))

    def detokenize_strings(self, tokens):
        """`tf.string [B, T]` pieces ("" padding) -> `tf.string [B]`, as
        SentencePiece decodes the pieces of a unigram model (joined, "▁" a
        space, the ends stripped; reserved pieces left out); for pieces
        that need not be in the vocabulary."""
        return _join_pieces(tokens)

    def save(self, path):
        Path(path).write_bytes(self.model)

    @classmethod
    def load(cls, path):
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"No SentencePiece model at {path}")
        try:
            return cls(path.read_bytes())
        except RuntimeError as error:
            raise ValueError(f"{path} is not a SentencePiece model: {error}") from None
