import pytest
import tensorflow_datasets as tfds
from tensorflow.python.framework import config as tf_config

import keras_attention.data.multilingual_dates  # noqa: F401


@pytest.fixture(scope="session")
def dates_data_dir(tmp_path_factory):
    """The offline dates data set, prepared once for every recipe test."""
    data_dir = tmp_path_factory.mktemp("tfds")
    tfds.builder("multilingual_dates", data_dir=data_dir).download_and_prepare()
    return data_dir


@pytest.fixture(autouse=True)
def deterministic_ops_as_they_were():
    """A recipe run in the test process with --deterministic turns on
    TensorFlow's deterministic ops for the whole process (a later recipe run
    sets them as its own flags say, but a model compiled or loaded outside a
    run would find them on, and Keras would drop its jit_compile with a
    warning): each test leaves them as it found them."""
    was_on = tf_config.is_op_determinism_enabled()
    yield
    if tf_config.is_op_determinism_enabled() and not was_on:
        tf_config.disable_op_determinism()
