import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

from keras_attention.data.tokenizers import (
    END_ID,
    UNKNOWN_ID,
    CharacterTokenizer,
    MappedSubwordTokenizer,
    SubwordTokenizer,
    load_run_tokenizer,
)
from keras_attention.run_files import RunFiles


def test_round_trip_and_reserved_ids(tmp_path):
    tokenizer = CharacterTokenizer.train(["29 novembre 2026", "2026年11月29日"])
    ids = tokenizer.tokenize(tf.constant(["29 novembre", "年月"])).to_tensor()
    assert ids.dtype == tf.int32 and int(tf.reduce_min(tf.where(ids > 0, ids, 99))) >= 4
    assert tokenizer.detokenize(ids).numpy().tolist() == [b"29 novembre", "年月".encode()]
    # Stops at the end id; drops padding, start and unknown.
    ids = np.array([[1, *tokenizer.tokenize(tf.constant(["29"])).numpy()[0], END_ID, 5, 0]])
    assert tokenizer.detokenize(ids).numpy().tolist() == [b"29"]
    assert tokenizer.tokenize(tf.constant(["Z"])).numpy()[0].tolist() == [UNKNOWN_ID]

    path = tmp_path / "vocabulary.txt"
    tokenizer.save(path)
    loaded = CharacterTokenizer.load(path)
    assert loaded.vocabulary == tokenizer.vocabulary
    assert " " in loaded.vocabulary


@given(st.lists(st.text(max_size=30), min_size=1, max_size=5))
def test_any_text_made_of_known_characters_round_trips(texts):
    tokenizer = CharacterTokenizer.train(texts)
    ids = tokenizer.tokenize(tf.constant(texts)).to_tensor()
    assert [t.decode() for t in tokenizer.detokenize(ids).numpy()] == texts


def test_invalid_utf8_is_not_an_error():
    tokenizer = CharacterTokenizer.train(["abc"])
    ids = tokenizer.tokenize(tf.constant([b"a\xffb"]))
    assert ids.numpy()[0].tolist() == [
        tokenizer.vocabulary.index("a"),
        UNKNOWN_ID,
        tokenizer.vocabulary.index("b"),
    ]


def test_bad_vocabularies(tmp_path):
    with pytest.raises(ValueError, match="single characters"):
        CharacterTokenizer(["ab"])
    with pytest.raises(ValueError, match="repeats"):
        CharacterTokenizer(["a", "a"])
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        CharacterTokenizer.load(tmp_path / "missing.txt")
    (tmp_path / "bad.txt").write_text("a\nb\n")
    with pytest.raises(ValueError, match="not a vocabulary file"):
        CharacterTokenizer.load(tmp_path / "bad.txt")


CORPUS = ["the cat sat on the mat", "a dog ran in the park", "o gato sentou no tapete"] * 40


def test_subword_tokenizer_round_trip_in_a_graph(tmp_path):
    tokenizer = SubwordTokenizer.train(CORPUS, vocabulary_size=60)
    assert tokenizer.vocabulary[:4] == ["<pad>", "<s>", "</s>", "<unk>"]
    assert 4 < tokenizer.vocabulary_size <= 60

    @tf.function
    def round_trip(texts):
        return tokenizer.detokenize(tokenizer.tokenize(texts).to_tensor())

    texts = ["the cat ran in the park", "o gato"]
    assert [t.decode() for t in round_trip(tf.constant(texts)).numpy()] == texts
    ids = tokenizer.tokenize(tf.constant(["the cat"])).numpy()[0].tolist()
    assert min(ids) >= 4  # no reserved id inside a text
    with_end = np.array([[1, *ids, END_ID, *ids, 0]])  # stops at the end id
    assert tokenizer.detokenize(with_end).numpy().tolist() == [b"the cat"]

    path = tmp_path / "source.model"
    tokenizer.save(path)
    assert SubwordTokenizer.load(path).vocabulary == tokenizer.vocabulary


def test_subword_symbols_are_one_piece_wherever_they_are():
    """Placeholders given as symbols are never cut, and come back whole;
    `<s>` (HTML's strike-through, and the start token) is left to the text."""
    texts = [f"{text} %s" for text in CORPUS] + ["cat%sdog <b>x</b>"] * 5
    tokenizer = SubwordTokenizer.train(texts, 80, symbols=["%s", "<b>", "</b>", "<s>"])
    assert tokenizer.vocabulary[:4] == ["<pad>", "<s>", "</s>", "<unk>"]
    pieces = tokenizer.tokenize_as_strings(tf.constant(["the cat%sdog <b>x</b>"])).numpy()[0]
    assert {b"%s", b"<b>", b"</b>"} <= set(pieces.tolist())
    ids = tokenizer.tokenize(tf.constant(["the cat%sdog <b>x</b>"])).to_tensor()
    assert tokenizer.detokenize(ids).numpy()[0] == b"the cat%sdog <b>x</b>"
    plain = SubwordTokenizer.train(texts, 80)
    assert b"%s" not in plain.tokenize_as_strings(tf.constant(["cat%sdog"])).numpy()[0].tolist()


@pytest.mark.parametrize("kind", ["character", "subword", "mapped"])
def test_tokens_as_strings_are_the_tokens_of_the_ids_and_make_their_text(kind):
    """`tokenize_as_strings`: one string per id of `tokenize`, the
    vocabulary's token where it has one, the text's own piece where it
    lacks it (replacing unknowns needs it); `detokenize_strings` makes of
    the tokens the text `detokenize` makes of the ids, and keeps a token
    the vocabulary lacks."""
    subword = SubwordTokenizer.train(CORPUS, vocabulary_size=60)
    tokenizer = {
        "character": lambda: CharacterTokenizer.train(CORPUS),
        "subword": lambda: subword,
        "mapped": lambda: MappedSubwordTokenizer(
            subword.model, subword.vocabulary, append_end=True
        ),
    }[kind]()
    texts = tf.constant(["the cat ran in the park", "o gato \u03a9"])  # Ω: in no vocabulary
    ids = tokenizer.tokenize(texts).to_tensor().numpy()
    strings = tokenizer.tokenize_as_strings(texts).to_tensor().numpy()
    assert strings.shape == ids.shape
    known = (ids != 0) & (ids != UNKNOWN_ID)
    vocabulary = np.array([t.encode() for t in tokenizer.vocabulary], object)
    assert (strings[known] == vocabulary[ids[known]]).all()
    (unknown,) = strings[ids == UNKNOWN_ID]
    assert "\u03a9" in unknown.decode()
    tokens = np.where(ids == 0, b"", vocabulary[ids])
    assert tokenizer.detokenize_strings(tokens).numpy()[0] == tokenizer.detokenize(ids).numpy()[0]
    assert tokenizer.detokenize_strings(strings).numpy()[1].decode() == "o gato \u03a9"


def test_subword_tokenizer_bad_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.model"):
        SubwordTokenizer.load(tmp_path / "missing.model")
    (tmp_path / "corrupt.model").write_bytes(b"not a model")
    with pytest.raises(ValueError, match="not a SentencePiece model"):
        SubwordTokenizer.load(tmp_path / "corrupt.model")


def test_subword_tokenizer_survives_set_random_seed():
    """`tf.random.set_seed` clears TensorFlow's eager caches, which held the
    SentencePiece resource; the tokeniser makes it again (found by fuzzing)."""
    import keras

    texts = [f"{day} novembre 2026" for day in range(1, 29)]
    tokenizer = SubwordTokenizer.train(texts, vocabulary_size=40)
    before = tokenizer.tokenize(tf.constant(texts[:3])).to_list()
    keras.utils.set_random_seed(1)
    assert tokenizer.tokenize(tf.constant(texts[:3])).to_list() == before
    keras.utils.set_random_seed(2)
    ids = tokenizer.tokenize(tf.constant(texts[:1])).to_tensor()
    assert tokenizer.detokenize(ids).numpy().tolist() == [texts[0].encode()]


def test_two_subword_tokenizers_keep_their_own_models_in_a_saved_model(tmp_path):
    """Reloaded, a SavedModel with two SentencePiece models (a translation
    export's source and target) once tokenised both sides with the last."""
    english = SubwordTokenizer.train(CORPUS[:80], vocabulary_size=40)
    portuguese = SubwordTokenizer.train(["o gato sentou no tapete da casa"] * 40, 30)
    module = tf.Module()
    module.english, module.portuguese = english, portuguese
    texts = tf.constant(["the cat sat", "o gato sentou"])
    module.both = tf.function(
        lambda texts: (english.tokenize(texts).to_tensor(), portuguese.tokenize(texts).to_tensor()),
        input_signature=[tf.TensorSpec([None], tf.string)],
    )
    expected = [side.numpy().tolist() for side in module.both(texts)]
    assert expected[0] != expected[1]
    tf.saved_model.save(module, str(tmp_path / "both"))
    reloaded = tf.saved_model.load(str(tmp_path / "both"))
    assert [side.numpy().tolist() for side in reloaded.both(texts)] == expected


def test_a_run_s_tokenizer_is_loaded_by_side_or_the_missing_file_is_named(tmp_path):
    """What the export command and the explorer load from a run's folder."""
    files = RunFiles(tmp_path)
    config = {"tokenizer": "character"}
    CharacterTokenizer.train(["abc"]).save(files.vocabulary("source", "character"))
    source = load_run_tokenizer(files, config, "source")
    assert source.detokenize(source.tokenize(tf.constant(["cab"]))).numpy()[0] == b"cab"
    with pytest.raises(ValueError, match="has no target vocabulary: .*target_vocabulary.txt"):
        load_run_tokenizer(files, config, "target")
    with pytest.raises(ValueError, match=r"config.json names no tokenizer .*tokenizer='bpe'"):
        load_run_tokenizer(files, {"tokenizer": "bpe"}, "source")
