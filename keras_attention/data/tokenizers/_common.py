"""What the tokenisers share: the reserved tokens (ids 0-3 in every
vocabulary: padding, start, end, unknown) and the graph helpers that drop
them or stop at the end id."""

import tensorflow as tf

from keras_attention.utils import END_ID

PAD, START, END, UNKNOWN = "<pad>", "<s>", "</s>", "<unk>"
RESERVED = (PAD, START, END, UNKNOWN)
WORD_BOUNDARY = "\u2581"  # SentencePiece's "▁", a space before a word


def _without_reserved(tokens):
    """String tokens with the reserved ones made ""."""
    reserved = tf.reduce_any(tokens[..., None] == tf.constant(RESERVED), axis=-1)
    return tf.where(reserved, "", tokens)


def _join_pieces(tokens):
    """SentencePiece pieces `[B, T]` ("" padding, reserved left out) ->
    text `[B]`: joined, each "▁" a space, the ends stripped."""
    text = tf.strings.reduce_join(_without_reserved(tokens), axis=-1)
    return tf.strings.strip(tf.strings.regex_replace(text, WORD_BOUNDARY, " "))


def _before_end(ids):
    """True at the ids before the first end id of each row."""
    return tf.math.cumsum(tf.cast(ids == END_ID, tf.int32), axis=-1, exclusive=True) == 0
