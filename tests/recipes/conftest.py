import pytest
import tensorflow_datasets as tfds

import keras_attention.data.multilingual_dates  # noqa: F401


@pytest.fixture(scope="session")
def dates_data_dir(tmp_path_factory):
    """The offline dates data set, prepared once for every recipe test."""
    data_dir = tmp_path_factory.mktemp("tfds")
    tfds.builder("multilingual_dates", data_dir=data_dir).download_and_prepare()
    return data_dir
