"""Sequences longer than max_length: truncated, or refused in strict mode."""

import pytest
import tensorflow as tf

from keras_attention.data.pipeline import (
    classification_batches,
    language_model_batches,
    translation_batches,
)
from keras_attention.data.tokenizers import END_ID, START_ID, CharacterTokenizer

TOKENIZER = CharacterTokenizer.train(["abcdefgh"])


def pairs(*items):
    return tf.data.Dataset.from_tensor_slices(tuple(map(list, zip(*items, strict=True))))


def test_long_sequences_are_truncated():
    batch = next(
        iter(
            translation_batches(
                pairs(("abcdefgh", "abcdefgh")), TOKENIZER, TOKENIZER, batch_size=1, max_length=4
            )
        )
    )
    inputs, labels = batch
    assert inputs["source_ids"].shape == (1, 4)
    # The target keeps max_length - 1 tokens, plus <s> in the input, </s> in the labels.
    assert inputs["target_ids"].numpy()[0, 0] == START_ID and labels.numpy()[0, -1] == END_ID
    assert inputs["target_ids"].shape == labels.shape == (1, 4)


@pytest.mark.parametrize(
    "make, what",
    [
        (
            lambda **b: translation_batches(pairs(("abcdefgh", "ab")), TOKENIZER, TOKENIZER, **b),
            "source",
        ),
        (
            lambda **b: translation_batches(pairs(("ab", "abcd")), TOKENIZER, TOKENIZER, **b),
            "target",
        ),
        (lambda **b: classification_batches(pairs(("abcdefgh", 1)), TOKENIZER, **b), "text"),
        (
            lambda **b: language_model_batches(
                tf.data.Dataset.from_tensor_slices(["abcd"]), TOKENIZER, **b
            ),
            "text",
        ),
    ],
)
def test_strict_mode_refuses_them_with_a_message(make, what):
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"A {what} has more than [34] tokens"):
        next(iter(make(batch_size=1, max_length=4, strict=True)))
    next(iter(make(batch_size=1, max_length=4)))  # without strict: truncated
    next(iter(make(batch_size=1, max_length=8, strict=True)))  # fits


@pytest.mark.parametrize("pack", [False, True])
def test_a_shuffled_dataset_has_one_order_whenever_it_is_read(pack):
    """Keras on JAX reads a training set once to build the model and again to
    train; a resumed run must get the order the stopped one had. A new
    order comes from a new seed (the recipes use seed + epoch)."""
    texts = tf.data.Dataset.from_tensor_slices(["abcdefgh"[:n] for n in range(1, 9)] * 4)

    def order(seed):
        batches = language_model_batches(
            texts, TOKENIZER, pack=pack, batch_size=1, max_length=4, shuffle_buffer=32, seed=seed
        )
        return [batch[0].numpy().tolist() for batch in batches]

    first = order(seed=1)
    assert order(seed=1) == first
    batches = language_model_batches(
        texts, TOKENIZER, pack=pack, batch_size=1, max_length=4, shuffle_buffer=32, seed=1
    )
    read_twice = [[b[0].numpy().tolist() for b in batches] for _ in range(2)]
    assert read_twice == [first, first]
    assert order(seed=2) != first
