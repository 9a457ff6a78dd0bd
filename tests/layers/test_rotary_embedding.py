import math

import keras
import keras_hub
import numpy as np
import pytest
from helpers import (
    layer_gradients,
    numpy_attention,
    run_layer_test,
    self_attention_weights,
    to_numpy,
)
from hypothesis import given
from hypothesis import strategies as st

from keras_attention.layers import MultiHeadSelfAttention, RotaryEmbedding


def random(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def turned(x, start=0, max_wavelength=10000.0, scaling_factor=1.0, back=False):
    """The paper's rotation, pair by pair: (x_i, x_{i + d/2}) turned by
    (pos / scaling_factor) * max_wavelength^(-2i / d) (`scaling_factor` a
    number, or one per pair). x `[B, T, H, d]`. `back`: turned the other
    way (the transpose, R^T)."""
    out = np.empty_like(x, dtype="float64")
    depth = x.shape[-1]
    factors = np.broadcast_to(np.asarray(scaling_factor, "float64"), (depth // 2,))
    for t in range(x.shape[1]):
        for i in range(depth // 2):
            angle = (start + t) / factors[i] * max_wavelength ** (-2 * i / depth)
            angle = -angle if back else angle
            first, second = x[:, t, ..., i], x[:, t, ..., i + depth // 2]
            out[:, t, ..., i] = first * math.cos(angle) - second * math.sin(angle)
            out[:, t, ..., i + depth // 2] = second * math.cos(angle) + first * math.sin(angle)
    return out


def test_layer_contract(tmp_path):
    run_layer_test(
        RotaryEmbedding,
        {"max_wavelength": 500.0, "scaling_factor": 2.0},
        {"x": random(2, 7, 3, 8)},
        expected_shape=(2, 7, 3, 8),
        tmp_path=tmp_path,
    )


@given(
    length=st.integers(1, 20),
    half=st.integers(1, 8),
    start=st.integers(0, 300),
    max_wavelength=st.sampled_from([10000.0, 500.0]),
    scaling_factor=st.sampled_from([1.0, 4.0]),
)
def test_equals_the_papers_rotation_and_keras_hub(
    length, half, start, max_wavelength, scaling_factor
):
    x = random(2, length, 3, 2 * half, seed=length)
    ours = to_numpy(RotaryEmbedding(max_wavelength, scaling_factor)(x, start_index=start))
    np.testing.assert_allclose(
        ours, turned(x, start, max_wavelength, scaling_factor), atol=2e-4, rtol=1e-4
    )
    theirs = keras_hub.layers.RotaryEmbedding(
        max_wavelength=max_wavelength, scaling_factor=scaling_factor
    )(x, start_index=start)
    np.testing.assert_allclose(ours, to_numpy(theirs), atol=2e-4, rtol=1e-4)


@pytest.mark.parametrize("start,scaling_factor", [(0, 1.0), (37, 4.0)])
def test_the_gradient_is_the_rotation_turned_back(start, scaling_factor):
    """d/dx sum(R x * u) = R^T u: the upstream turned back by the same
    angles (numpy, from the paper), and equal to KerasHub's gradient."""
    x, upstream = random(2, 9, 3, 8), random(2, 9, 3, 8, seed=1)
    layer = RotaryEmbedding(500.0, scaling_factor)
    layer(x)  # built, for a stateless call on JAX
    _, (gradient,) = layer_gradients(layer, [x], upstream, start_index=start)
    expected = turned(upstream, start, 500.0, scaling_factor, back=True)
    np.testing.assert_allclose(gradient, expected, atol=1e-5)
    theirs = keras_hub.layers.RotaryEmbedding(max_wavelength=500.0, scaling_factor=scaling_factor)
    theirs(x)
    _, (their_gradient,) = layer_gradients(theirs, [x], upstream, start_index=start)
    np.testing.assert_allclose(gradient, their_gradient, atol=1e-5)


@given(shift=st.integers(1, 200), seed=st.integers(0, 2**16))
def test_scores_see_only_the_distance_and_lengths_are_kept(shift, seed):
    """q at m . k at n depends on m - n alone: the same pair moved by
    `shift` positions scores the same."""
    query, key = random(1, 6, 1, 8, seed=seed), random(1, 6, 1, 8, seed=seed + 1)
    layer = RotaryEmbedding()

    def scores(start):
        q = to_numpy(layer(query, start_index=start))[0, :, 0]
        k = to_numpy(layer(key, start_index=start))[0, :, 0]
        return q @ k.T

    np.testing.assert_allclose(scores(0), scores(shift), atol=2e-4)
    np.testing.assert_allclose(
        np.linalg.norm(to_numpy(layer(query)), axis=-1), np.linalg.norm(query, axis=-1), rtol=1e-5
    )


def test_self_attention_with_rotary_positions_matches_numpy():
    """The queries and keys of the fused projection, turned by the paper's
    rotation, then attention written out in numpy."""
    B, T, D, H = 2, 6, 16, 2
    x, mask = random(B, T, D), np.arange(T)[None, :] < np.array([[T], [4]])
    layer = MultiHeadSelfAttention(
        num_heads=H, causal=True, positions="rotary", rotary_max_wavelength=100.0
    )
    output = to_numpy(layer(x, padding_mask=mask))
    W_q, b_q, W_k, b_k, W_v, b_v, W_o, b_o = self_attention_weights(layer)
    depth = D // H

    def turn(projected):  # [B, T, H * d] -> turned, same shape
        heads = projected.reshape(B, T, H, depth)
        return turned(heads, max_wavelength=100.0).reshape(B, T, H * depth)

    query, key = turn(x @ W_q + b_q), turn(x @ W_k + b_k)
    identity = np.eye(H * depth, dtype="float64")
    zeros = np.zeros(H * depth)
    causal = np.tril(np.ones((T, T), bool))[None] & mask[:, None, :]
    # The turned Q and K go in as they are (identity projections), V and W^O as ours.
    expected = numpy_attention(
        np.concatenate([query, key], -1),
        np.concatenate([key, x @ W_v + b_v], -1),
        (
            np.vstack([identity, 0 * identity]),
            zeros,
            np.vstack([identity, 0 * identity]),
            zeros,
            np.vstack([0 * identity, identity]),
            zeros,
            W_o,
            b_o,
        ),
        H,
        causal,
    )
    np.testing.assert_allclose(output, expected, atol=1e-4)


def test_a_factor_per_pair_divides_each_frequency():
    """Llama 3.1's `llama3` scaling, as the converter gives it: one factor
    per pair of features."""
    x = random(2, 9, 3, 8)
    factors = [1.0, 2.5, 8.0, 8.0]
    layer = RotaryEmbedding(500.0, factors)
    np.testing.assert_allclose(
        to_numpy(layer(x, start_index=5)), turned(x, 5, 500.0, factors), atol=2e-4, rtol=1e-4
    )
    assert RotaryEmbedding.from_config(layer.get_config()).scaling_factor == factors
    with pytest.raises(ValueError, match="has 3 factors, one per pair of features; x has 4"):
        RotaryEmbedding(scaling_factor=[1.0, 1.0, 1.0])(x)
    with pytest.raises(ValueError, match=r"`scaling_factor\[1\]` must be a number >= 1"):
        RotaryEmbedding(scaling_factor=[1.0, 0.5])


def test_bad_arguments_are_refused_by_name():
    for kwargs, pattern in [
        (
            {"max_wavelength": 1},
            r"`max_wavelength` must be a number > 1. Received: max_wavelength=1",
        ),
        ({"scaling_factor": 0.5}, r"`scaling_factor` must be a number >= 1.*=0.5"),
        ({"max_wavelength": "big"}, r"max_wavelength='big'"),
    ]:
        with pytest.raises(ValueError, match=pattern):
            RotaryEmbedding(**kwargs)
    with pytest.raises(ValueError, match=r"last dimension must be even.*\(1, 2, 5\)"):
        RotaryEmbedding()(np.zeros((1, 2, 5), "float32"))
    with pytest.raises(ValueError, match="key size must be even. Received: key_dim=3"):
        MultiHeadSelfAttention(num_heads=2, key_dim=3, positions="rotary")(random(1, 2, 6))
    with pytest.raises(ValueError, match=r"`positions` must be one of \(None, 'rotary'"):
        MultiHeadSelfAttention(num_heads=2, positions="sinusoidal")
    assert keras.saving.get_registered_object("keras_attention>RotaryEmbedding") is RotaryEmbedding
