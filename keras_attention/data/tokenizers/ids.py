"""Strings to a model's ids with any tokeniser: `token_ids`,
`pair_token_ids` (and their steps `repair_utf8`, `padded`), and
`prompt_start`."""

import tensorflow as tf

from keras_attention.utils import PAD_ID, START_ID


def token_ids(tokenizer, texts, max_length):
    """Strings `[B]` -> ids `[B, S]`, 1 <= S <= max_length, padded with 0.

    Bytes that are not UTF-8 become U+FFFD first, so no tokeniser sees them;
    an all-empty batch still gets one (padding) column, so the model always
    has a position to attend to.
    """
    ids = tokenizer.tokenize(repair_utf8(texts))[:, :max_length]
    return padded(ids)


def pair_token_ids(tokenizer, texts, text_pairs):
    """Two strings `[B]` -> ids `[B, S]` of each pair as the tokenizer
    frames and truncates pairs (a `WordPieceTokenizer`'s `tokenize_pairs`),
    padded with 0; bytes that are not UTF-8 become U+FFFD first."""
    return padded(tokenizer.tokenize_pairs(repair_utf8(texts), repair_utf8(text_pairs)))


def repair_utf8(texts):
    """Strings with every byte that is not UTF-8 made U+FFFD."""
    return tf.strings.unicode_transcode(
        texts, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
    )


def padded(ids):
    """Ragged ids `[B, None]` -> `[B, S]`, padded with 0, at least one column."""
    width = tf.maximum(ids.bounding_shape(axis=1), 1)
    return ids.to_tensor(default_value=PAD_ID, shape=[ids.nrows(), width])


def prompt_start(tokenizer):
    """The ids a language model's text is framed with before its own, in
    training, serving and the explorer alike: `[START_ID]` for every
    tokeniser but a byte-level BPE one whose checkpoint puts no token
    first (GPT-2, Qwen2), which gets none."""
    return [START_ID] if getattr(tokenizer, "add_start", True) else []
