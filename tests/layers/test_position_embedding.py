import keras
import numpy as np
import pytest
from helpers import run_layer_test, to_numpy

from keras_attention.layers import PositionEmbedding


def test_layer_contract(tmp_path):
    x = np.random.default_rng(0).normal(size=(2, 7, 6)).astype("float32")
    run_layer_test(
        PositionEmbedding, {"max_length": 9}, {"x": x}, expected_shape=(2, 7, 6), tmp_path=tmp_path
    )


def test_adds_the_table_rows_of_each_position():
    x = np.random.default_rng(0).normal(size=(2, 5, 4)).astype("float32")
    layer = PositionEmbedding(max_length=8)
    full = to_numpy(layer(x))
    table = to_numpy(layer.embeddings)
    np.testing.assert_allclose(full, x + table[None, :5], atol=1e-6)
    shifted = to_numpy(layer(x[:, :2], start_index=keras.ops.convert_to_tensor(3)))
    np.testing.assert_allclose(shifted, x[:, :2] + table[None, 3:5], atol=1e-6)


def test_bad_arguments():
    with pytest.raises(ValueError, match="max_length=None"):
        PositionEmbedding(max_length=None)
    with pytest.raises(ValueError, match="max_length=4"):
        PositionEmbedding(max_length=4)(np.zeros((1, 3, 2), "float32"), start_index=2)
