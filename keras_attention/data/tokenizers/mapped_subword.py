"""`MappedSubwordTokenizer`: a converted checkpoint's SentencePiece model,
its pieces looked up in a vocabulary of their own."""

import json
from pathlib import Path

import tensorflow as tf

from keras_attention.data.tokenizers._common import (
    END,
    RESERVED,
    START,
    WORD_BOUNDARY,
    _before_end,
    _join_pieces,
)
from keras_attention.data.tokenizers.sentencepiece_ops import SentencePieceOps
from keras_attention.utils import UNKNOWN_ID


class MappedSubwordTokenizer(tf.Module):
    """A SentencePiece model whose pieces are looked up in a vocabulary of
    their own: the tokenisers of converted checkpoints (OPUS-MT's
    `source.spm` with its `vocab.json`, Llama's `tokenizer.model`), applied
    in the graph by `tensorflow_text`.

    The vocabulary is in this package's id order: ids 0-3 are padding,
    start, end and unknown, and the checkpoint's other ids follow
    (`keras_attention.convert` makes the order).

    Args:
        model: the serialized SentencePiece model (bytes).
        pieces: list of str, the token of each id.
        append_end: bool, end every tokenised text with the end id (Marian's
            sources end with `</s>`). Default False.
        language_codes: bool, a text that starts with `>>code<<` keeps that
            code whole, as one token, before its pieces (multi-target
            OPUS-MT models). Default False.
        byte_fallback: bool, detokenise through the SentencePiece model,
            which turns byte pieces (`<0xE2>`) back into bytes (Llama);
            otherwise the pieces are joined, "▁" becomes a space and the
            ends are stripped, as `MarianTokenizer` does. Default False.
        space_as_prefix: bool, a text that starts with a space takes that
            space as SentencePiece's word-boundary prefix instead of getting
            a second one (transformers' Llama tokenizer, `legacy=False`).
            Default False.
        prepend_start: bool, start every tokenised text with the start id
            (RoBERTa and XLM-RoBERTa frame a text as `<s> text </s>`, with
            `append_end`). Default False.
        max_length: optional int, the most ids a tokenised text has, the
            start and end ids included: the pieces are cut to fit, as
            transformers truncates a text. Default None (no limit).
        as_spaces: str, characters made spaces before SentencePiece sees the
            text: the white space that transformers' `WhitespaceSplit`
            splits on and the model's normalizer keeps (XLM-RoBERTa's
            `nmt_nfkc` keeps U+0085). Default "" (none).
    """

    def __init__(
        self,
        model,
        pieces,
        append_end=False,
        language_codes=False,
        byte_fallback=False,
        space_as_prefix=False,
        prepend_start=False,
        max_length=None,
        as_spaces="",
        name=None,
    ):
        super().__init__(name=name)
        import sentencepiece

        self.model = bytes(model)
        self.vocabulary = list(pieces)
        self.append_end = bool(append_end)
        self.language_codes = bool(language_codes)
        self.byte_fallback = bool(byte_fallback)
        self.space_as_prefix = bool(space_as_prefix)
        self.prepend_start = bool(prepend_start)
        self.max_length = None if max_length is None else int(max_length)
        self.as_spaces = str(as_spaces)
        framing = int(self.prepend_start) + int(self.append_end)
        if self.max_length is not None and self.max_length < framing + 1:
            raise ValueError(
                "`max_length` must leave room for the start and end ids and a piece. "
                f"Received: max_length={max_length}"
            )
        if tuple(self.vocabulary[: len(RESERVED)]) != RESERVED:
            raise ValueError(
                f"A mapped vocabulary starts with {', '.join(RESERVED)}. "
                f"Received: {self.vocabulary[: len(RESERVED)]}"
            )
        ids = tf.range(len(self.vocabulary), dtype=tf.int32)
        self._tokens = tf.constant(self.vocabulary)
        self._ids = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(self._tokens, ids), default_value=UNKNOWN_ID
        )
        if self.byte_fallback:
            processor = sentencepiece.SentencePieceProcessor(model_proto=self.model)
            model_ids = [processor.piece_to_id(piece) for piece in self.vocabulary]
            self._model_ids = tf.constant(model_ids, tf.int32)  # ours -> the model's
        self._sentencepiece = SentencePieceOps(self.model, tf.string)

    @property
    def vocabulary_size(self):
        return len(self.vocabulary)

    def tokenize(self, texts):
        """`tf.string [B]` -> int32 `RaggedTensor [B, None]`: the start id
        only with `prepend_start`, the end id only with `append_end`, at most
        `max_length` ids. (A scalar string -> its ids `[None]`.)"""
        texts = tf.convert_to_tensor(texts, tf.string)
        if texts.shape.rank == 0:
            return self.tokenize(texts[None])[0]
        return tf.ragged.map_flat_values(self._ids.lookup, self.tokenize_as_strings(texts))

    def tokenize_as_strings(self, texts):
        """`tf.string [B]` -> `RaggedTensor [B, None]` of strings: the piece
        behind each id of `tokenize` (a piece the vocabulary lacks too)."""
        codes = tf.zeros([tf.shape(texts)[0], 0], tf.string)
        if self.language_codes:
            # `MarianTokenizer.remove_language_code`: ">>" up to the first "<<".
            has_code = tf.strings.regex_full_match(texts, "(?s)>>.*?<<.*")
            code = tf.strings.regex_replace(texts, "(?s)^(>>.*?<<).*$", "\\1")
            codes = tf.ragged.boolean_mask(code[:, None], has_code[:, None])
            texts = tf.where(has_code, tf.strings.regex_replace(texts, "(?s)^>>.*?<<", ""), texts)
        if self.space_as_prefix:
            texts = tf.strings.regex_replace(texts, "^ ", "")
        if self.as_spaces:
            characters = "".join(f"\\x{{{ord(c):X}}}" for c in self.as_spaces)
            texts = tf.strings.regex_replace(texts, f"[{characters}]", " ")
        pieces = tf.concat([codes, self._sentencepiece("tokenize", texts)], axis=1)
        if self.max_length is not None:
            pieces = pieces[:, : self.max_length - self.prepend_start - self.append_end]
        rows = pieces.nrows()
        if self.prepend_start:
            starts = tf.RaggedTensor.from_tensor(tf.fill([rows, 1], START))
            pieces = tf.concat([starts, pieces], axis=1)
        if self.append_end:
            ends = tf.RaggedTensor.from_tensor(tf.fill([rows, 1], END))
            pieces = tf.concat([pieces, ends], axis=1)
        return pieces

    def detokenize(self, ids):
        """int `[B, T]` -> `tf.string [B]`, up to the first end id, without
        the reserved ids (Hugging Face's `skip_special_tokens=True`)."""
        ids = tf.cast(ids, tf.int32)
        kept = tf.ragged.boolean_mask(ids, _before_end(ids) & (ids >= len(RESERVED)))
        if self.byte_fallback:
            model_ids = tf.ragged.map_flat_values(tf.gather, self._model_ids, kept)
            return self._sentencepiece("detokenize", model_ids)
        text = tf.strings.reduce_join(tf.gather(self._tokens, kept), axis=-1)
        return tf.strings.strip(tf.strings.regex_replace(text, WORD_BOUNDARY, " "))

    def detokenize_strings(self, tokens):
        """`tf.string [B, T]` pieces ("" padding) -> `tf.string [B]`, as
        `detokenize` joins the pieces of ids (without byte fallback); for
        pieces that need not be in the vocabulary."""
        return _join_pieces(tokens)

    def with_max_length(self, max_length):
        """The same tokenizer, its tokenised texts at most `max_length` ids."""
        return MappedSubwordTokenizer(
            self.model,
            self.vocabulary,
            append_end=self.append_end,
            language_codes=self.language_codes,
            byte_fallback=self.byte_fallback,
            space_as_prefix=self.space_as_prefix,
            prepend_start=self.prepend_start,
            max_length=max_length,
            as_spaces=self.as_spaces,
        )

    def save(self, path):
        """Writes the vocabulary and options as JSON to `path` and the
        SentencePiece model beside it (`path` with the suffix `.model`)."""
        path = Path(path)
        path.with_suffix(".model").write_bytes(self.model)
        options = {
            "pieces": self.vocabulary,
            "append_end": self.append_end,
            "language_codes": self.language_codes,
            "byte_fallback": self.byte_fallback,
            "space_as_prefix": self.space_as_prefix,
            "prepend_start": self.prepend_start,
            "max_length": self.max_length,
            "as_spaces": self.as_spaces,
        }
        path.write_text(json.dumps(options, ensure_ascii=False, indent=0) + "\n", "utf-8")

    @classmethod
    def load(cls, path):
        path = Path(path)
        model = path.with_suffix(".model")
        for file in (path, model):
            if not file.is_file():
                raise FileNotFoundError(f"No mapped vocabulary file at {file}")
        try:
            options = json.loads(path.read_text("utf-8"))
            return cls(model.read_bytes(), **options)
        except (ValueError, TypeError, RuntimeError) as error:
            raise ValueError(f"{path} is not a mapped vocabulary: {error}") from None
