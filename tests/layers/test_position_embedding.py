import keras
import numpy as np
import pytest
from helpers import run_layer_test, to_numpy

from keras_attention.layers import PositionEmbedding


def test_layer_contract(tmp_path):
    x = np.random.default_rng(0).normal(size=(2, 7, 6)).astype("float32")
    run_layer_test(
        PositionEmbedding,
        {"max_position_embeddings": 9},
        {"x": x},
        expected_shape=(2, 7, 6),
        tmp_path=tmp_path,
    )


def test_adds_the_table_rows_of_each_position():
    x = np.random.default_rng(0).normal(size=(2, 5, 4)).astype("float32")
    layer = PositionEmbedding(max_position_embeddings=8)
    full = to_numpy(layer(x))
    table = to_numpy(layer.embeddings)
    np.testing.assert_allclose(full, x + table[None, :5], atol=1e-6)
    shifted = to_numpy(layer(x[:, :2], start_index=keras.ops.convert_to_tensor(3)))
    np.testing.assert_allclose(shifted, x[:, :2] + table[None, 3:5], atol=1e-6)


def test_bad_arguments():
    with pytest.raises(ValueError, match="max_position_embeddings=None"):
        PositionEmbedding(max_position_embeddings=None)
    with pytest.raises(ValueError, match="max_position_embeddings=4"):
        PositionEmbedding(max_position_embeddings=4)(np.zeros((1, 3, 2), "float32"), start_index=2)


def test_max_length_is_the_old_name_of_max_position_embeddings():
    """`max_length` works for one release, with a FutureWarning naming the
    new name; both at once are refused; a config saved with the old key
    loads without a warning."""
    import warnings

    with pytest.warns(FutureWarning, match="`max_length` is deprecated.*`max_position_embeddings`"):
        layer = PositionEmbedding(max_length=6)
    assert layer.max_position_embeddings == 6
    config = layer.get_config()
    assert config["max_position_embeddings"] == 6 and "max_length" not in config
    with pytest.raises(TypeError, match="`max_position_embeddings`.*`max_length`"):
        PositionEmbedding(max_position_embeddings=6, max_length=6)
    old_config = {key: value for key, value in config.items() if key != "max_position_embeddings"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        reloaded = PositionEmbedding.from_config({**old_config, "max_length": 5})
    assert reloaded.max_position_embeddings == 5
