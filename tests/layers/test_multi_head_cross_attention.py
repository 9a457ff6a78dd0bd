import keras
import numpy as np
import pytest
from helpers import (
    assert_implicit_mask_is_honoured,
    assert_masked_keys_change_nothing,
    assert_weights_skip_masked_keys,
    run_layer_test,
    to_numpy,
)
from hypothesis import given
from hypothesis import strategies as st

from keras_attention.layers import MultiHeadCrossAttention

B, TQ, TK, D, DC, H = 2, 3, 5, 8, 6, 2


def random(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def padding(lengths, length=TK):
    return np.arange(length)[None, :] < np.asarray(lengths)[:, None]


def test_layer_contract(tmp_path):
    run_layer_test(
        MultiHeadCrossAttention,
        {"num_heads": H, "dropout": 0.1},
        {"query": random(B, TQ, D), "context": random(B, TK, DC), "context_mask": padding([TK, 2])},
        expected_shape=(B, TQ, D),
        tmp_path=tmp_path,
        shape_inputs=("query", "context"),
    )


def test_matches_keras_multi_head_attention():
    query, context, mask = random(B, TQ, D), random(B, TK, DC, seed=1), padding([TK, 2])
    ours = MultiHeadCrossAttention(num_heads=H)
    ours_out, ours_scores = ours(query, context, context_mask=mask, return_attention_scores=True)
    theirs = keras.layers.MultiHeadAttention(num_heads=H, key_dim=D // H)
    theirs(query, context)
    q_k, q_b = (to_numpy(w) for w in ours.query_projection.weights)
    kv_k, kv_b = (to_numpy(w) for w in ours.key_value_projection.weights)
    k_k, v_k = np.split(kv_k, 2, axis=-1)
    k_b, v_b = np.split(kv_b, 2, axis=-1)
    o_k, o_b = (to_numpy(w) for w in ours.output_projection.weights)
    dk = D // H
    theirs._query_dense.set_weights([q_k.reshape(D, H, dk), q_b.reshape(H, dk)])
    theirs._key_dense.set_weights([k_k.reshape(DC, H, dk), k_b.reshape(H, dk)])
    theirs._value_dense.set_weights([v_k.reshape(DC, H, dk), v_b.reshape(H, dk)])
    theirs._output_dense.set_weights([o_k.reshape(H, dk, D), o_b])
    attention_mask = np.repeat(mask[:, None, :], TQ, axis=1)
    theirs_out, theirs_scores = theirs(
        query, context, attention_mask=attention_mask, return_attention_scores=True
    )
    np.testing.assert_allclose(to_numpy(ours_out), to_numpy(theirs_out), atol=1e-5)
    np.testing.assert_allclose(to_numpy(ours_scores), to_numpy(theirs_scores), atol=1e-6)


@given(real_length=st.integers(1, TK), extra=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_context_padding_changes_nothing(real_length, extra, seed):
    layer = MultiHeadCrossAttention(num_heads=H)
    query, context = random(1, TQ, D, seed=seed), random(1, real_length, DC, seed=seed + 1)
    extra_context = 50 * random(1, extra, DC, seed=seed + 2)
    assert_masked_keys_change_nothing(layer, query, context, extra_context, "context_mask")


@given(lengths=st.lists(st.integers(1, TK), min_size=B, max_size=B))
def test_weights_sum_to_one_and_skip_masked_keys(lengths):
    layer = MultiHeadCrossAttention(num_heads=H)
    mask = padding(lengths)
    _, weights = layer(
        random(B, TQ, D), random(B, TK, DC), context_mask=mask, return_attention_scores=True
    )
    assert_weights_skip_masked_keys(weights, mask)


def test_context_cache_gives_the_same_output():
    layer = MultiHeadCrossAttention(num_heads=H)
    query, context = random(B, TQ, D), random(B, TK, DC)
    direct = to_numpy(layer(query, context))
    cached = to_numpy(layer(query, context_cache=layer.context_cache(context)))
    np.testing.assert_allclose(cached, direct, atol=1e-6)


def test_keras_implicit_context_mask_is_honoured():
    layer = MultiHeadCrossAttention(num_heads=H)
    assert_implicit_mask_is_honoured(layer, random(B, TQ, D), DC, "context_mask")


def test_bad_arguments():
    layer = MultiHeadCrossAttention(num_heads=H)
    with pytest.raises(ValueError, match=r"context_mask.shape=\(2, 4\)"):
        layer(random(B, TQ, D), random(B, TK, DC), context_mask=np.ones((B, TK - 1), bool))
    with pytest.raises(ValueError, match="num_heads=3, model width=8"):
        MultiHeadCrossAttention(num_heads=3)(random(B, TQ, D), random(B, TK, DC))
    with pytest.raises(ValueError, match="context=None"):
        layer(random(B, TQ, D))
