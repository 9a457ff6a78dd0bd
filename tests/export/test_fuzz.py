"""Arbitrary text at the in-graph tokenisers and the exported signature:
never an error, always one answer per input."""

import pytest
import tensorflow as tf
from export_helpers import MAX_LENGTH
from hypothesis import given
from hypothesis import strategies as st

from keras_attention.data.tokenizers import CharacterTokenizer, SubwordTokenizer, token_ids

# Any Unicode (lone surrogates too, which become bytes that are not UTF-8),
# raw bytes, empty strings and long ones.
TEXT = st.one_of(
    st.text().map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.binary(max_size=64),
    st.just(b""),
    st.text(min_size=200, max_size=400).map(lambda t: t.encode("utf-8", "surrogatepass")),
)
BATCHES = st.lists(TEXT, max_size=6)


@pytest.fixture(scope="module")
def tokenizers():
    texts = [
        f"{day} novembre {year}, le {day} nov." for day in range(1, 29) for year in (1999, 2026)
    ]
    return CharacterTokenizer.train(texts), SubwordTokenizer.train(texts, vocabulary_size=60)


@pytest.fixture(scope="module")
def served(exports):
    return tf.saved_model.load(str(exports.translator_v1)).signatures["serving_default"]


@given(texts=BATCHES)
def test_the_tokenisers_take_any_bytes(tokenizers, texts):
    for tokenizer in tokenizers:
        ids = token_ids(tokenizer, tf.constant(texts, tf.string), MAX_LENGTH).numpy()
        assert ids.shape[0] == len(texts) and 1 <= ids.shape[1] <= MAX_LENGTH
        assert ((ids >= 0) & (ids < tokenizer.vocabulary_size)).all()


@given(texts=BATCHES)
def test_the_export_answers_any_batch(served, texts):
    answer = served(text=tf.constant(texts, tf.string))["translation"].numpy()
    assert answer.shape == (len(texts),)
    for translation in answer:
        translation.decode("utf-8")  # always valid UTF-8
