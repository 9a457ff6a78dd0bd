import keras
import numpy as np
import pytest
from helpers import (
    assert_masked_keys_change_nothing,
    cross_attention_weights,
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

from keras_attention.layers import TransformerDecoderBlock

B, T, S, D, H, FF = 2, 5, 4, 8, 2, 16


def random(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def padding(lengths, length):
    return np.arange(length)[None, :] < np.asarray(lengths)[:, None]


def numpy_decoder_block(block, x, context, context_mask):
    """The paper's decoder layer: masked self-attention, encoder-decoder
    attention, feed-forward, each inside LayerNorm(x + Sublayer(x))."""
    causal = np.tril(np.ones((T, T), bool))[None]
    sublayers = [
        (
            lambda y: numpy_attention(
                y, y, self_attention_weights(block.self_attention), H, causal
            ),
            block.self_attention_norm,
        ),
        (
            lambda y: numpy_attention(
                y,
                context,
                cross_attention_weights(block.cross_attention),
                H,
                context_mask[:, None, :],
            ),
            block.cross_attention_norm,
        ),
        (lambda y: numpy_feed_forward(y, *feed_forward_weights(block)), block.feed_forward_norm),
    ]
    return numpy_residual_sublayers(x, sublayers, block.norm_first)


@pytest.mark.parametrize("norm_first", [False, True])
def test_layer_contract(norm_first, tmp_path):
    run_layer_test(
        TransformerDecoderBlock,
        {"num_heads": H, "intermediate_dim": FF, "norm_first": norm_first},
        {
            "x": random(B, T, D),
            "context": random(B, S, D, seed=1),
            "context_mask": padding([S, 2], S),
        },
        expected_shape=(B, T, D),
        tmp_path=tmp_path,
    )


def test_layer_contract_decoder_only(tmp_path):
    run_layer_test(
        TransformerDecoderBlock,
        {"num_heads": H, "intermediate_dim": FF},
        {"x": random(B, T, D), "padding_mask": padding([T, 3], T)},
        expected_shape=(B, T, D),
        tmp_path=tmp_path,
    )


@pytest.mark.parametrize("norm_first", [False, True])
def test_matches_the_paper_in_numpy(norm_first):
    x, context, mask = random(B, T, D), random(B, S, D, seed=1), padding([S, 2], S)
    block = TransformerDecoderBlock(num_heads=H, intermediate_dim=FF, norm_first=norm_first)
    output = to_numpy(block(x, context, context_mask=mask))
    np.testing.assert_allclose(output, numpy_decoder_block(block, x, context, mask), atol=1e-4)


@given(position=st.integers(0, T - 2), seed=st.integers(0, 2**16))
def test_never_sees_future_target_tokens(position, seed):
    block = TransformerDecoderBlock(num_heads=H, intermediate_dim=FF)
    x, context = random(B, T, D, seed=seed), random(B, S, D, seed=seed + 1)
    changed = x.copy()
    changed[:, position + 1 :] += 5 * random(B, T - position - 1, D, seed=seed + 2)
    np.testing.assert_allclose(
        to_numpy(block(changed, context))[:, : position + 1],
        to_numpy(block(x, context))[:, : position + 1],
        atol=1e-4,
    )


@given(real_length=st.integers(1, S), extra=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_context_padding_changes_nothing(real_length, extra, seed):
    block = TransformerDecoderBlock(num_heads=H, intermediate_dim=FF)
    x, context = random(1, T, D, seed=seed), random(1, real_length, D, seed=seed + 1)
    extra_context = 50 * random(1, extra, D, seed=seed + 2)
    assert_masked_keys_change_nothing(block, x, context, extra_context, "context_mask", atol=1e-4)


@pytest.mark.parametrize("with_context", [True, False])
@given(prefill=st.integers(1, T - 1), seed=st.integers(0, 2**16))
def test_cached_decoding_equals_full_pass(with_context, prefill, seed):
    block = TransformerDecoderBlock(num_heads=H, intermediate_dim=FF)
    x, context = random(B, T, D, seed=seed), random(B, S, D, seed=seed + 1)
    context_kwargs = {"context": context} if with_context else {}
    full = to_numpy(block(x, **context_kwargs))
    if with_context:  # the encoder's keys and values, projected once
        context_kwargs = {"context_cache": block.context_cache(context)}
    cache = block.initial_cache(B, T)
    output, cache = block(x[:, :prefill], cache=cache, cache_index=0, **context_kwargs)
    steps = [to_numpy(output)]
    for index in range(prefill, T):
        output, cache = block(
            x[:, index : index + 1], cache=cache, cache_index=index, **context_kwargs
        )
        steps.append(to_numpy(output))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-4)


def test_attention_scores_and_implicit_masks():
    source_ids = np.array([[3, 5, 0, 0], [2, 9, 4, 6]])
    target_ids = np.array([[1, 2, 3, 0, 0], [4, 5, 6, 7, 8]])
    source = keras.layers.Embedding(10, D, mask_zero=True)(source_ids)
    target = keras.layers.Embedding(10, D, mask_zero=True)(target_ids)
    block = TransformerDecoderBlock(num_heads=H, intermediate_dim=FF)
    implicit, weights = block(target, source, return_attention_scores=True)
    explicit = block(target, source, padding_mask=target_ids != 0, context_mask=source_ids != 0)
    np.testing.assert_allclose(to_numpy(implicit), to_numpy(explicit), atol=1e-6)
    cross = to_numpy(weights["cross_attention"])
    assert cross.shape == (B, H, T, S)
    assert np.all(cross[0, :, :, 2:] == 0)
    assert to_numpy(weights["self_attention"]).shape == (B, H, T, T)


def test_bad_arguments():
    block = TransformerDecoderBlock(num_heads=H, intermediate_dim=FF)
    block(random(B, T, D), random(B, S, D))
    with pytest.raises(ValueError, match="built with a context"):
        block(random(B, T, D))
    with pytest.raises(ValueError, match="num_heads=3, model width=8"):
        TransformerDecoderBlock(num_heads=3, intermediate_dim=FF)(random(B, T, D))
    with pytest.raises(ValueError, match=r"context_mask.shape=\(2, 3\)"):
        block(random(B, T, D), random(B, S, D), context_mask=np.ones((B, S - 1), bool))
