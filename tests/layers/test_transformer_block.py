import keras
import numpy as np
import pytest
from helpers import (
    feed_forward_weights,
    numpy_attention,
    numpy_feed_forward,
    numpy_residual_sublayers,
    run_layer_test,
    self_attention_weights,
    to_numpy,
)
from hypothesis import given
from hypothesis import strategies as st

from keras_attention.layers import TransformerBlock

B, T, D, H, FF = 2, 6, 8, 2, 16


def random(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def padding(lengths, length=T):
    return np.arange(length)[None, :] < np.asarray(lengths)[:, None]


def numpy_encoder_block(block, x, mask):
    """The paper's encoder layer: LayerNorm(x + Sublayer(x)), twice."""
    attention_mask = mask[:, None, :]
    if block.causal:
        attention_mask = attention_mask & np.tril(np.ones((T, T), bool))
    weights = self_attention_weights(block.self_attention)
    sublayers = [
        (lambda y: numpy_attention(y, y, weights, H, attention_mask), block.self_attention_norm),
        (lambda y: numpy_feed_forward(y, *feed_forward_weights(block)), block.feed_forward_norm),
    ]
    return numpy_residual_sublayers(x, sublayers, block.norm_first)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_layer_contract(norm_first, causal, tmp_path):
    run_layer_test(
        TransformerBlock,
        {"num_heads": H, "intermediate_dim": FF, "norm_first": norm_first, "causal": causal},
        {"x": random(B, T, D), "padding_mask": padding([T, 2])},
        expected_shape=(B, T, D),
        tmp_path=tmp_path,
    )


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_matches_the_paper_in_numpy(norm_first, causal):
    x, mask = random(B, T, D), padding([T, 4])
    block = TransformerBlock(num_heads=H, intermediate_dim=FF, norm_first=norm_first, causal=causal)
    output = to_numpy(block(x, padding_mask=mask))
    np.testing.assert_allclose(output, numpy_encoder_block(block, x, mask), atol=1e-4)


@given(real_length=st.integers(1, T), extra=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_padding_changes_nothing(real_length, extra, seed):
    block = TransformerBlock(num_heads=H, intermediate_dim=FF)
    x = random(1, real_length, D, seed=seed)
    alone = to_numpy(block(x))
    padded = np.concatenate([x, 50 * random(1, extra, D, seed=seed + 1)], axis=1)
    mask = padding([real_length], real_length + extra)
    np.testing.assert_allclose(
        to_numpy(block(padded, padding_mask=mask))[:, :real_length], alone, atol=1e-4
    )


@given(position=st.integers(0, T - 2), seed=st.integers(0, 2**16))
def test_causal_never_sees_the_future(position, seed):
    block = TransformerBlock(num_heads=H, intermediate_dim=FF, causal=True)
    x = random(B, T, D, seed=seed)
    changed = x.copy()
    changed[:, position + 1 :] += 5 * random(B, T - position - 1, D, seed=seed + 1)
    np.testing.assert_allclose(
        to_numpy(block(changed))[:, : position + 1],
        to_numpy(block(x))[:, : position + 1],
        atol=1e-4,
    )


@given(seed=st.integers(0, 2**16))
def test_permutation_equivariant_without_positions(seed):
    block = TransformerBlock(num_heads=H, intermediate_dim=FF)
    x = random(B, T, D, seed=seed)
    permutation = np.random.default_rng(seed).permutation(T)
    np.testing.assert_allclose(
        to_numpy(block(x[:, permutation])), to_numpy(block(x))[:, permutation], atol=1e-4
    )


def test_returns_attention_scores_and_honours_implicit_mask():
    ids = np.array([[3, 5, 7, 0, 0, 0], [2, 9, 4, 6, 1, 0]])
    embedding = keras.layers.Embedding(10, D, mask_zero=True)
    block = TransformerBlock(num_heads=H, intermediate_dim=FF)
    implicit, weights = block(embedding(ids), return_attention_scores=True)
    explicit = block(embedding(ids), padding_mask=ids != 0)
    np.testing.assert_allclose(to_numpy(implicit), to_numpy(explicit), atol=1e-6)
    weights = to_numpy(weights)
    assert weights.shape == (B, H, T, T)
    assert np.all(weights[0, :, :, 3:] == 0)


def test_dropout_is_active_only_in_training():
    block = TransformerBlock(num_heads=H, intermediate_dim=FF, dropout=0.5)
    x = random(B, T, D)
    np.testing.assert_allclose(to_numpy(block(x)), to_numpy(block(x)))
    assert not np.allclose(to_numpy(block(x, training=True)), to_numpy(block(x)))


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_heads=3, model width=8"):
        TransformerBlock(num_heads=3, intermediate_dim=FF)(random(B, T, D))
    with pytest.raises(ValueError, match="intermediate_dim=-1"):
        TransformerBlock(num_heads=H, intermediate_dim=-1)
    with pytest.raises(ValueError, match=r"padding_mask.shape=\(2,\)"):
        TransformerBlock(num_heads=H, intermediate_dim=FF)(
            random(B, T, D), padding_mask=np.ones(B, bool)
        )
