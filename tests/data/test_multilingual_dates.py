import pytest
import tensorflow_datasets as tfds

import keras_attention.data.multilingual_dates  # noqa: F401
from keras_attention.data import dates


def test_tfds_load_reads_it_like_any_other_data_set(tmp_path):
    test = tfds.load("multilingual_dates", split="test", data_dir=tmp_path, as_supervised=True)
    pairs = [(s.decode(), t.decode()) for s, t in test.as_numpy_iterator()]
    assert len(pairs) == dates.DEFAULT_SIZES["test"]
    expected = {(e.source, e.target) for e in dates.generate("test", dates.DEFAULT_SIZES["test"])}
    assert set(pairs) == expected

    builder = tfds.builder("multilingual_dates", data_dir=tmp_path)
    assert builder.info.splits["train"].num_examples == dates.DEFAULT_SIZES["train"]
    assert builder.info.supervised_keys == ("source", "target")


@pytest.mark.large  # a whole recipe run (see docs/testing.md)
def test_language_id_config(tmp_path):
    builder = tfds.builder("multilingual_dates/language_id", data_dir=tmp_path)
    builder.download_and_prepare()
    test = builder.as_dataset(split="test", as_supervised=True)
    names = builder.info.features["locale"].names
    for _, label in test.take(50).as_numpy_iterator():
        assert names[label] in dates.LOCALES
    formats = builder.info.features["format"].names
    for example in builder.as_dataset(split="validation").take(50).as_numpy_iterator():
        assert formats[example["format"]] == "full"
