"""The real data sets' loaders, on TFDS's mock data (no download)."""

import pytest
import tensorflow_datasets as tfds

from keras_attention.data import datasets


def mock():
    return tfds.testing.mock_data(num_examples=6, policy=tfds.testing.MockPolicy.USE_CODE)


@pytest.mark.parametrize("name", ["ted_hrlr_translate/pt_to_en", "wmt14_translate/de-en"])
def test_translation_pairs(name, tmp_path):
    with mock():
        pairs = list(datasets.translation_pairs(name, "train", tmp_path).as_numpy_iterator())
        examples = list(tfds.load(name, split="train", data_dir=tmp_path).as_numpy_iterator())
        swapped = list(
            datasets.translation_pairs(name, "test", tmp_path, reverse=True).as_numpy_iterator()
        )
    source, target = datasets.TRANSLATION[name]
    assert pairs == [(e[source], e[target]) for e in examples]
    assert all(isinstance(s, bytes) and isinstance(t, bytes) for s, t in swapped)
    with mock():
        straight = list(datasets.translation_pairs(name, "test", tmp_path).as_numpy_iterator())
    assert swapped == [(t, s) for s, t in straight]


def test_imdb_reviews(tmp_path):
    with mock():
        pairs, names = datasets.labelled_texts("imdb_reviews", "train", tmp_path)
        pairs = list(pairs.as_numpy_iterator())
    assert names == ["neg", "pos"]
    assert len(pairs) == 6
    assert all(isinstance(text, bytes) and label in (0, 1) for text, label in pairs)


def test_unknown_data_sets():
    with pytest.raises(ValueError, match="'wmt99'"):
        datasets.translation_pairs("wmt99", "train")
    with pytest.raises(ValueError, match="'sst2'"):
        datasets.labelled_texts("sst2", "train")


def test_any_tfds_data_set_by_name_and_feature_keys(tmp_path):
    with mock():
        pairs = datasets.translation_pairs(
            "tfds:ted_hrlr_translate/az_to_en", "train", tmp_path, keys=("az", "en")
        )
        examples = tfds.load("ted_hrlr_translate/az_to_en", split="train", data_dir=tmp_path)
        labelled, names = datasets.labelled_texts(
            "tfds:ag_news_subset", "test", tmp_path, keys=("description", "label")
        )
        texts = datasets.plain_texts("tfds:ag_news_subset", "test", tmp_path, key="title")
        news = tfds.load("ag_news_subset", split="test", data_dir=tmp_path)
        assert list(pairs.as_numpy_iterator()) == [
            (e["az"], e["en"]) for e in examples.as_numpy_iterator()
        ]
        assert names == ["World", "Sports", "Business", "Sci/Tech"]
        assert list(labelled.as_numpy_iterator()) == [
            (e["description"], e["label"]) for e in news.as_numpy_iterator()
        ]
        assert list(texts.as_numpy_iterator()) == [e["title"] for e in news.as_numpy_iterator()]


def test_a_tfds_data_set_needs_its_feature_keys(tmp_path):
    with pytest.raises(ValueError, match="tfds:ag_news_subset needs --text-key and --label-key"):
        datasets.labelled_texts("tfds:ag_news_subset", "test", tmp_path, keys=("title", None))
    with pytest.raises(ValueError, match="needs --source-key and --target-key"):
        datasets.translation_pairs("tfds:ted_hrlr_translate/az_to_en", "train", tmp_path)
    with pytest.raises(ValueError, match="'en' of tfds:ted_hrlr_translate/az_to_en is a Text"):
        datasets.labelled_texts(
            "tfds:ted_hrlr_translate/az_to_en", "train", tmp_path, keys=("az", "en")
        )
    with pytest.raises(ValueError, match="or tfds:NAME"):
        datasets.plain_texts("tfds:", "train", tmp_path, key="text")
