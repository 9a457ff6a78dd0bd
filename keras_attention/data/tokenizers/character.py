"""`CharacterTokenizer`: one id per Unicode character."""

from pathlib import Path

import tensorflow as tf

from keras_attention.data.tokenizers._common import RESERVED, _before_end, _without_reserved
from keras_attention.utils import PAD_ID, UNKNOWN_ID


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
        return tf.ragged.map_flat_values(self._table.lookup, self.tokenize_as_strings(texts))

    def tokenize_as_strings(self, texts):
        """`tf.string [B]` -> `RaggedTensor [B, None]` of strings: the token
        behind each id of `tokenize`, as the text has it (a character the
        vocabulary lacks too)."""
        return tf.strings.unicode_split(texts, "UTF-8", errors="replace")

    def detokenize(self, ids):
        """int `[B, T]` -> `tf.string [B]`: the tokens before the first end id,
        without padding, start or unknown ids."""
        ids = tf.cast(ids, tf.int32)
        ids = tf.where(_before_end(ids) & (ids >= len(RESERVED)), ids, PAD_ID)
        tokens = tf.gather(self._tokens, ids)
        tokens = tf.where(ids == PAD_ID, "", tokens)
        return tf.strings.reduce_join(tokens, axis=-1)

    def detokenize_strings(self, tokens):
        """`tf.string [B, T]` tokens ("" padding) -> `tf.string [B]`, as
        `detokenize` makes text of their ids (reserved tokens left out);
        for tokens that need not be in the vocabulary."""
        return tf.strings.reduce_join(_without_reserved(tokens), axis=-1)

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
