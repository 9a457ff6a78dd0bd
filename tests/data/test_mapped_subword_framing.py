"""`MappedSubwordTokenizer`'s framing options (RoBERTa's and XLM-RoBERTa's
`<s> text </s>`): `prepend_start`, `max_length`, `as_spaces`, kept by
`save` / `load` and `with_max_length`."""

import pytest
import tensorflow as tf

from keras_attention.data.tokenizers import (
    END_ID,
    START_ID,
    MappedSubwordTokenizer,
    SubwordTokenizer,
)

LINES = ["the cat sat on the mat", "a dog and a cat", "hello world"] * 20


@pytest.fixture(scope="module")
def subword():
    return SubwordTokenizer.train(LINES, 40)


def mapped(subword, **options):
    return MappedSubwordTokenizer(subword.model, subword.vocabulary, **options)


def test_framed_as_roberta_frames_a_text(subword):
    plain = mapped(subword).tokenize(tf.constant(["the cat", ""])).to_list()
    framed = mapped(subword, prepend_start=True, append_end=True)
    rows = framed.tokenize(tf.constant(["the cat", ""])).to_list()
    assert rows == [[START_ID, *plain[0], END_ID], [START_ID, END_ID]]
    assert framed.tokenize(tf.constant("the cat")).numpy().tolist() == rows[0]


def test_max_length_cuts_the_pieces_and_keeps_the_frame(subword):
    framed = mapped(subword, prepend_start=True, append_end=True)
    whole = framed.tokenize(tf.constant(["the cat sat on the mat"])).to_list()[0]
    assert len(whole) > 5
    cut = framed.with_max_length(5).tokenize(tf.constant(["the cat sat on the mat", "a"]))
    assert cut.to_list()[0] == whole[:4] + [END_ID]
    assert len(cut.to_list()[1]) <= 5
    assert framed.with_max_length(5).with_max_length(None).tokenize(
        tf.constant(["the cat sat on the mat"])
    ).to_list() == [whole]
    with pytest.raises(ValueError, match="`max_length` must leave room"):
        framed.with_max_length(2)


def test_as_spaces_become_spaces_first(subword):
    tokenizer = mapped(subword, as_spaces="\x85\u2028")
    spaced = tokenizer.tokenize(tf.constant(["the cat", "the\x85cat", "the\u2028cat"])).to_list()
    assert spaced[0] == spaced[1] == spaced[2]


def test_save_and_load_keep_the_options(subword, tmp_path):
    tokenizer = mapped(subword, prepend_start=True, append_end=True, max_length=6, as_spaces="\x85")
    tokenizer.save(tmp_path / "vocabulary.json")
    loaded = MappedSubwordTokenizer.load(tmp_path / "vocabulary.json")
    assert (loaded.prepend_start, loaded.max_length, loaded.as_spaces) == (True, 6, "\x85")
    texts = tf.constant(["the cat sat on the mat", "a\x85dog"])
    assert loaded.tokenize(texts).to_list() == tokenizer.tokenize(texts).to_list()
