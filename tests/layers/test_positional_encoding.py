import math

import keras
import numpy as np
import pytest
from helpers import run_layer_test, to_numpy
from hypothesis import given
from hypothesis import strategies as st

from keras_attention.layers import PositionalEncoding


def paper_encoding(length, depth, start=0):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...), entry by entry."""
    table = np.zeros((length, depth))
    for pos in range(start, start + length):
        for dim in range(depth):
            angle = pos / 10000 ** (2 * (dim // 2) / depth)
            table[pos - start, dim] = math.sin(angle) if dim % 2 == 0 else math.cos(angle)
    return table


def test_layer_contract(tmp_path):
    x = np.random.default_rng(0).normal(size=(2, 7, 6)).astype("float32")
    run_layer_test(
        PositionalEncoding,
        {"max_position_embeddings": 16},
        {"x": x},
        expected_shape=(2, 7, 6),
        tmp_path=tmp_path,
    )


@given(length=st.integers(1, 60), depth=st.integers(1, 33), start=st.integers(0, 500))
def test_equals_the_papers_formula(length, depth, start):
    x = np.zeros((1, length, depth), "float32")
    encoded = to_numpy(PositionalEncoding()(x, start_index=start))[0]
    np.testing.assert_allclose(encoded, paper_encoding(length, depth, start), atol=2e-4)


def test_adds_to_the_input_and_start_index_matches_slicing():
    x = np.random.default_rng(0).normal(size=(2, 10, 8)).astype("float32")
    layer = PositionalEncoding()
    full = to_numpy(layer(x))
    np.testing.assert_allclose(full - x, np.broadcast_to(paper_encoding(10, 8), x.shape), atol=1e-5)
    tail = to_numpy(layer(x[:, 4:], start_index=keras.ops.convert_to_tensor(4)))
    np.testing.assert_allclose(tail, full[:, 4:], atol=1e-5)


def test_implicit_mask_flows_through_to_attention():
    from keras_attention.layers import MultiHeadSelfAttention

    ids = np.array([[1, 2, 0, 0], [3, 1, 4, 0]])
    inputs = keras.Input((4,), dtype="int32")
    embedding = keras.layers.Embedding(5, 4, mask_zero=True)
    attention = MultiHeadSelfAttention(num_heads=2)
    model = keras.Model(inputs, attention(PositionalEncoding()(embedding(inputs))))
    explicit = attention(PositionalEncoding()(embedding(ids)), padding_mask=ids != 0)
    np.testing.assert_allclose(model.predict(ids, verbose=0), to_numpy(explicit), atol=1e-5)


def test_bad_arguments():
    with pytest.raises(ValueError, match="max_position_embeddings=0"):
        PositionalEncoding(max_position_embeddings=0)
    with pytest.raises(ValueError, match="max_position_embeddings=4"):
        PositionalEncoding(max_position_embeddings=4)(np.zeros((1, 5, 2), "float32"))


def test_max_length_is_the_old_name_of_max_position_embeddings():
    """`max_length` works for one release, with a FutureWarning naming the
    new name; both at once are refused; a config saved with the old key
    loads without a warning."""
    import warnings

    with pytest.warns(FutureWarning, match="`max_length` is deprecated.*`max_position_embeddings`"):
        layer = PositionalEncoding(max_length=6)
    assert layer.max_position_embeddings == 6
    config = layer.get_config()
    assert config["max_position_embeddings"] == 6 and "max_length" not in config
    with pytest.raises(TypeError, match="`max_position_embeddings`.*`max_length`"):
        PositionalEncoding(max_position_embeddings=6, max_length=6)
    old_config = {key: value for key, value in config.items() if key != "max_position_embeddings"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        reloaded = PositionalEncoding.from_config({**old_config, "max_length": 5})
    assert reloaded.max_position_embeddings == 5


def halves_encoding(length, depth, start=0):
    """Marian's table (transformers' `MarianSinusoidalPositionalEmbedding`):
    every sine first, then every cosine, from the paper's angles."""
    angles = np.array(
        [[pos / 10000 ** (2 * (j // 2) / depth) for j in range(depth)] for pos in range(length)]
    )
    half = depth // 2 + depth % 2
    table = np.zeros((length, depth))
    table[:, :half] = np.sin(angles[:, 0::2])
    table[:, half:] = np.cos(angles[:, 1::2])
    return table[start:]


@given(length=st.integers(1, 60), depth=st.integers(1, 33), start=st.integers(0, 200))
def test_halves_equal_marians_table(length, depth, start):
    x = np.zeros((1, length, depth), "float32")
    encoded = to_numpy(PositionalEncoding(layout="halves")(x, start_index=start))[0]
    np.testing.assert_allclose(encoded, halves_encoding(start + length, depth)[start:], atol=2e-4)


def test_halves_round_trip_and_bad_layout(tmp_path):
    x = np.random.default_rng(1).normal(size=(2, 5, 8)).astype("float32")
    run_layer_test(
        PositionalEncoding,
        {"layout": "halves"},
        {"x": x},
        expected_shape=(2, 5, 8),
        tmp_path=tmp_path,
    )
    with pytest.raises(ValueError, match="layout"):
        PositionalEncoding(layout="concatenated")
