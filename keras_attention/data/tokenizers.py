"""Tokenisers that run inside the TensorFlow graph, so they can go into a
SavedModel and run in TF Serving unchanged.

Ids 0-3 are reserved in every vocabulary: 0 padding, 1 start, 2 end,
3 unknown. Both tokenisers offer `train`, `tokenize` (strings -> ragged
ids, no start or end id), `detokenize` (ids -> strings, up to the first end
id), `vocabulary`, `vocabulary_size`, `save` and `load`.
"""

import hashlib
import io
from pathlib import Path

import tensorflow as tf

from keras_attention.utils import END_ID, PAD_ID, START_ID, UNKNOWN_ID  # noqa: F401

PAD, START, END, UNKNOWN = "<pad>", "<s>", "</s>", "<unk>"
RESERVED = (PAD, START, END, UNKNOWN)
TOKENIZERS = ("character", "subword")


def _before_end(ids):
    """True at the ids before the first end id of each row."""
    return tf.math.cumsum(tf.cast(ids == END_ID, tf.int32), axis=-1, exclusive=True) == 0


class CharacterTokenizer(tf.Module):
    """One id per Unicode character, with TensorFlow ops only. A vocabulary
    file has one token per line; line i is id i.

    Args:
        vocabulary: the characters, in id order (after the reserved tokens),
            or a full vocabulary list that starts with the reserved tokens.

    Example:

    >>> tokenizer = CharacterTokenizer.train(["2026-11-29"])
    >>> ids = tokenizer.tokenize(tf.constant(["2026"]))
    >>> tokenizer.detokenize(ids.to_tensor()).numpy()
    array([b'2026'], dtype=object)
    """

    def __init__(self, vocabulary, name=None):
        super().__init__(name=name)
        vocabulary = list(vocabulary)
        if tuple(vocabulary[: len(RESERVED)]) != RESERVED:
            vocabulary = list(RESERVED) + vocabulary
        for token in vocabulary[len(RESERVED) :]:
            if len(token) != 1:
                raise ValueError(
                    f"A character vocabulary holds single characters. Received: {token!r}"
                )
        if len(set(vocabulary)) != len(vocabulary):
            raise ValueError("The vocabulary repeats a token.")
        self.vocabulary = vocabulary
        self._tokens = tf.constant(vocabulary)
        self._table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                self._tokens, tf.range(len(vocabulary), dtype=tf.int32)
            ),
            default_value=UNKNOWN_ID,
        )

    @classmethod
    def train(cls, texts):
        """The characters of `texts`, most frequent first (ties by code point)."""
        counts = {}
        for text in texts:
            for character in text:
                counts[character] = counts.get(character, 0) + 1
        return cls(sorted(counts, key=lambda c: (-counts[c], c)))

    @property
    def vocabulary_size(self):
        return len(self.vocabulary)

    def tokenize(self, texts):
        """`tf.string [B]` -> int32 `RaggedTensor [B, None]`, no start or end id.

        Bytes that are not UTF-8 become U+FFFD (unknown, unless it is in the
        vocabulary) instead of an error.
        """
        characters = tf.strings.unicode_split(texts, "UTF-8", errors="replace")
        return tf.ragged.map_flat_values(self._table.lookup, characters)

    def detokenize(self, ids):
        """int `[B, T]` -> `tf.string [B]`: the tokens before the first end id,
        without padding, start or unknown ids."""
        ids = tf.cast(ids, tf.int32)
        ids = tf.where(_before_end(ids) & (ids >= len(RESERVED)), ids, PAD_ID)
        tokens = tf.gather(self._tokens, ids)
        tokens = tf.where(ids == PAD_ID, "", tokens)
        return tf.strings.reduce_join(tokens, axis=-1)

    def save(self, path):
        """Writes the vocabulary, one token per line."""
        Path(path).write_text("\n".join(self.vocabulary) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path):
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"No vocabulary file at {path}")
        lines = path.read_text(encoding="utf-8").split("\n")
        if lines[-1] != "" or tuple(lines[: len(RESERVED)]) != RESERVED:
            raise ValueError(
                f"{path} is not a vocabulary file: it must start with the lines "
                f"{', '.join(RESERVED)} and end with a newline"
            )
        return cls(lines[:-1])


def _named_model_resource(model):
    """TF Text's SentencePiece model resource, named after the model's hash."""
    from tensorflow_text.python.ops import sentencepiece_tokenizer as ops

    class NamedModelResource(ops._SentencepieceModelResource):
        def _create_resource(self):
            return ops.gen_sentencepiece_tokenizer.sentencepiece_op(
                model=self._model,
                shared_name="sentencepiece_" + hashlib.sha256(self._model).hexdigest()[:24],
            )

    return NamedModelResource(model, name=None)


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
        self._tokenizer = self._make_tokenizer()

    def _make_tokenizer(self):
        import tensorflow_text

        tokenizer = tensorflow_text.SentencepieceTokenizer(model=self.model, out_type=tf.int32)
        # TF Text's SentencePiece resource has no name of its own: in a
        # reloaded SavedModel with two of them (a translation model's source
        # and target vocabularies), both ops used one model, the last made
        # (seen with tensorflow-text 2.20). Named by a hash of the model,
        # each resource is its own, and equal models may share one.
        tokenizer._model_resource = _named_model_resource(self.model)
        return tokenizer

    def _call(self, method, argument):
        """`self._tokenizer.method(argument)`. `tf.random.set_seed` (which
        `keras.utils.set_random_seed` calls) clears TensorFlow's eager caches
        and with them the SentencePiece resource made when this tokeniser
        was: eagerly, it is made again once."""
        try:
            return getattr(self._tokenizer, method)(argument)
        except tf.errors.NotFoundError:
            if not tf.executing_eagerly():
                raise
            self._tokenizer = self._make_tokenizer()
            return getattr(self._tokenizer, method)(argument)

    @classmethod
    def train(cls, texts, vocabulary_size):
        """Trains a unigram model on `texts` (an iterable of str).

        `vocabulary_size` counts the 4 reserved ids; a corpus too small for
        it gets a smaller vocabulary rather than an error.
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
            minloglevel=2,
        )
        return cls(model.getvalue())

    @property
    def vocabulary_size(self):
        return len(self.vocabulary)

    def tokenize(self, texts):
        """`tf.string [B]` -> int32 `RaggedTensor [B, None]`, no start or end id."""
        return self._call("tokenize", texts)

    def detokenize(self, ids):
        """int `[B, T]` -> `tf.string [B]`, up to the first end id."""
        ids = tf.cast(ids, tf.int32)
        keep = _before_end(ids) & (ids >= len(RESERVED))
        return self._call("detokenize", tf.ragged.boolean_mask(ids, keep))

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


def token_ids(tokenizer, texts, max_length):
    """Strings `[B]` -> ids `[B, S]`, 1 <= S <= max_length, padded with 0.

    Bytes that are not UTF-8 become U+FFFD first, so no tokeniser sees them;
    an all-empty batch still gets one (padding) column, so the model always
    has a position to attend to.
    """
    texts = tf.strings.unicode_transcode(
        texts, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
    )
    ids = tokenizer.tokenize(texts)[:, :max_length]
    width = tf.maximum(ids.bounding_shape(axis=1), 1)
    return ids.to_tensor(default_value=PAD_ID, shape=[ids.nrows(), width])


def load_run_tokenizer(files, config, side):
    """The tokeniser a recipe saved for `side` ("source", "target", or
    "text" for a model with one vocabulary) in a run's folder: `files` its
    `RunFiles`, `config` its `config.json` as a dict, whose "tokenizer"
    names the kind. A ValueError that names the file when the kind or the
    vocabulary file is missing."""
    kinds = {"character": CharacterTokenizer, "subword": SubwordTokenizer}
    kind = config.get("tokenizer")
    if kind not in kinds:
        raise ValueError(
            f"{files.config} names no tokenizer (character or subword): tokenizer={kind!r}"
        )
    file = files.vocabulary(side, kind)
    if not file.is_file():
        raise ValueError(f"{files.folder} has no {side} vocabulary: {file} not found")
    return kinds[kind].load(file)
