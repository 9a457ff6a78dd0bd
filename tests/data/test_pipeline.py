"""Sequences longer than max_length: truncated, or refused in strict mode;
batches of a few widths for a compiled step; batches cut by tokens."""

import numpy as np
import pytest
import tensorflow as tf

from keras_attention.data.pipeline import (
    batch_rows,
    classification_batches,
    language_model_batches,
    length_buckets,
    pad_to_bucket,
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


def test_sequences_are_padded_to_a_few_lengths():
    assert length_buckets(40) == [8, 16, 32, 40]
    assert length_buckets(8) == [8] and length_buckets(5) == [5]
    for length, bucket in ((0, 0), (1, 8), (8, 8), (9, 16), (33, 40), (40, 40)):
        ids = tf.ones([2, length], tf.int32)
        padded = pad_to_bucket(ids, length_buckets(40)).numpy()
        assert padded.shape == (2, bucket)
        assert (padded[:, :length] == 1).all() and (padded[:, length:] == 0).all()
    labels = tf.constant([1, 0])  # a classifier's: left as they are
    assert pad_to_bucket(labels, [8]) is labels


@pytest.mark.parametrize("make", ["translation", "classification", "language_model"])
def test_bucket_shapes_give_the_same_batches_in_a_few_widths(make):
    """With `bucket_shapes` (a compiled step) every training batch is the
    batch it would be without, padded with 0 to a width of
    `length_buckets`; evaluation batches keep every example, in order,
    padded to `max_length`."""
    rng = np.random.default_rng(0)
    texts = ["".join(rng.choice(list("abcdefgh"), rng.integers(1, 40))) for _ in range(64)]
    data = {
        "translation": lambda **b: translation_batches(
            pairs(*zip(texts, texts[::-1], strict=True)), TOKENIZER, TOKENIZER, **b
        ),
        "classification": lambda **b: classification_batches(
            pairs(*zip(texts, [i % 2 for i in range(64)], strict=True)), TOKENIZER, **b
        ),
        "language_model": lambda **b: language_model_batches(
            tf.data.Dataset.from_tensor_slices(texts), TOKENIZER, **b
        ),
    }[make]
    arguments = dict(batch_size=4, max_length=40, shuffle_buffer=64, seed=3, drop_remainder=True)
    plain = [tf.nest.flatten(batch) for batch in data(**arguments)]
    bucketed = [tf.nest.flatten(batch) for batch in data(bucket_shapes=True, **arguments)]
    assert len(plain) == len(bucketed) > 8
    widths = set()
    for plain_batch, bucketed_batch in zip(plain, bucketed, strict=True):
        for x, y in zip(plain_batch, bucketed_batch, strict=True):
            x, y = x.numpy(), y.numpy()
            if x.ndim == 2:
                widths.add(y.shape[1])
                assert y.shape[1] == min(b for b in length_buckets(40) if b >= x.shape[1])
                assert (y[:, x.shape[1] :] == 0).all()
                y = y[:, : x.shape[1]]
            np.testing.assert_array_equal(x, y)
    assert widths <= {8, 16, 32, 40} and len(widths) > 1

    # Batches of one keep the examples' order, each at its own width.
    alone = [tf.nest.flatten(batch) for batch in data(batch_size=1, max_length=40)]
    padded = [
        tf.nest.flatten(batch) for batch in data(batch_size=5, max_length=40, bucket_shapes=True)
    ]
    assert [len(batch[0]) for batch in padded] == [5] * 12 + [4]
    for part, part_alone in zip(zip(*padded, strict=True), zip(*alone, strict=True), strict=True):
        rows = np.concatenate([x.numpy() for x in part])
        for row, x in zip(rows, part_alone, strict=True):
            x = x.numpy()[0]
            if x.ndim:
                assert row.shape == (40,) and (row[len(x) :] == 0).all()
                row = row[: len(x)]
            np.testing.assert_array_equal(row, x)


@pytest.mark.parametrize("pack", [False, True])
def test_a_tokenizer_whose_prompts_start_with_no_token_trains_without_one(pack):
    """GPT-2's and Qwen2's texts start with their first token, as the
    export's prompts do: no start id in, the text's tokens and the end id
    out."""
    from keras_attention.data.tokenizers import RESERVED
    from keras_attention.data.tokenizers.byte_level_bpe import ByteLevelBPETokenizer

    tokenizer = ByteLevelBPETokenizer(
        [*RESERVED, "a", "b", "Ġ"], [], r" ?\p{L}+|\s+", add_start=False
    )
    texts = tf.data.Dataset.from_tensor_slices(["ab a", "ba b"])
    batches = language_model_batches(texts, tokenizer, pack=pack, batch_size=2, max_length=4)
    inputs, labels = (tensor.numpy().tolist() for tensor in next(iter(batches)))
    assert inputs == [[4, 5, 6, 4], [5, 4, 6, 5]]  # "ab a": a b Ġ a
    assert labels == [[5, 6, 4, 2], [4, 6, 5, 2]]


def ragged_pairs(count=200, seed=0):
    """`count` pairs of 1 to 40 characters on each side, drawn apart."""
    rng = np.random.default_rng(seed)

    def text():
        return "".join(rng.choice(list("abcdefgh"), rng.integers(1, 41)))

    return [(text(), text()) for _ in range(count)]


@pytest.mark.parametrize("bucket_shapes", [False, True])
def test_token_batches_hold_a_count_of_tokens_and_every_example_once(bucket_shapes):
    """`batch_tokens`: a batch of width W (its bucket's, 8, 16, 32 or 40
    here) holds `batch_tokens // W` pairs, so no batch holds more tokens
    than that on either side; training batches keep only full ones,
    evaluation keeps every pair once, and the same seed gives the same
    batches."""
    examples = ragged_pairs()
    dataset = pairs(*examples)

    def make(**batching):
        batches = translation_batches(
            dataset,
            TOKENIZER,
            TOKENIZER,
            batch_size=3,  # not used under batch_tokens
            batch_tokens=160,
            max_length=40,
            bucket_shapes=bucket_shapes,
            **batching,
        )
        return [tf.nest.map_structure(lambda x: x.numpy(), batch) for batch in batches]

    training = make(shuffle_buffer=200, seed=5, drop_remainder=True)
    widths = set()
    for inputs, labels in training:
        source, target = inputs["source_ids"], inputs["target_ids"]
        longest = max(
            np.count_nonzero(source, axis=1).max(), np.count_nonzero(labels, axis=1).max()
        )
        width = next((b for b in (8, 16, 32) if longest < b), 40)  # its bucket's widest
        assert len(labels) == 160 // width  # full batches only, rows set by the width
        assert source.size <= 160 and target.size <= 160
        widths.add(width)
    assert {16, 32, 40} <= widths  # 10, 5 and 4 pairs a batch
    again = make(shuffle_buffer=200, seed=5, drop_remainder=True)
    assert all(
        np.array_equal(a, b)
        for x, y in zip(training, again, strict=True)
        for a, b in zip(tf.nest.flatten(x), tf.nest.flatten(y), strict=True)
    )

    evaluation = make()
    kept = sorted(
        (tuple(row[row > 0]), tuple(label[label > 0]))
        for inputs, labels in evaluation
        for row, label in zip(inputs["source_ids"], labels, strict=True)
    )
    expected = sorted(
        (
            tuple(TOKENIZER.tokenize(source).numpy()),
            (*TOKENIZER.tokenize(target).numpy()[:39], END_ID),
        )
        for source, target in examples
    )
    assert kept == expected
    for inputs, labels in evaluation:
        assert inputs["source_ids"].size <= 160 and labels.size <= 160


def test_token_batches_of_packed_windows_and_the_rows_of_a_width():
    assert batch_rows(40, batch_size=3) == 3
    assert batch_rows(40, batch_size=3, batch_tokens=160) == 4
    assert batch_rows(40, batch_size=3, batch_tokens=199) == 4
    with pytest.raises(ValueError, match="batch_tokens=39 holds no sequence of 40 tokens"):
        batch_rows(40, batch_size=3, batch_tokens=39)
    texts = tf.data.Dataset.from_tensor_slices(["abcdefgh"] * 20)
    batches = language_model_batches(
        texts, TOKENIZER, pack=True, batch_size=1, batch_tokens=16, max_length=4
    )
    assert {tuple(ids.shape) for ids, _ in batches} == {(4, 4)}
