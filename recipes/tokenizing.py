"""A run's tokenisers learned from its training texts, and a warning for
the texts longer than the model takes."""

import tensorflow as tf

from keras_attention.data.placeholders import frequent_placeholders
from keras_attention.data.tokenizers import CharacterTokenizer, SubwordTokenizer


def train_tokenizer(config, texts):
    """The tokeniser `config.tokenizer` names, learned from `texts` (a list).
    A subword vocabulary keeps the placeholders frequent in `texts` (`%s`,
    `{name}`, `<b>`: `keras_attention.data.placeholders`) as one token each."""
    if config.tokenizer == "character":
        return CharacterTokenizer.train(texts)
    return SubwordTokenizer.train(texts, config.vocabulary_size, frequent_placeholders(texts))


def warn_if_truncated(what, tokenizer, texts, limit):
    """Says how many training texts have more than `limit` tokens (they are
    truncated); returns that number."""
    lengths = tokenizer.tokenize(tf.constant(texts)).row_lengths().numpy()
    longer = int((lengths > limit).sum())
    if longer:
        print(
            f"WARNING: {longer:,} of {len(texts):,} training {what} have more than {limit} "
            "tokens and are truncated (raise --max-input-length to keep them whole)"
        )
    return longer
