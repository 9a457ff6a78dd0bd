import numpy as np
import pytest
from helpers import (
    assert_implicit_mask_is_honoured,
    assert_masked_keys_change_nothing,
    assert_weights_skip_masked_keys,
    run_layer_test,
    softmax,
    to_numpy,
)
from hypothesis import given
from hypothesis import strategies as st

from keras_attention.layers import BahdanauAttention

B, TQ, TV, DQ, DV, U = 2, 3, 5, 4, 6, 7


def random(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def padding(lengths, length=TV):
    return np.arange(length)[None, :] < np.asarray(lengths)[:, None]


def bahdanau_numpy(query, value, mask, W1, W2, v):
    """The paper's formula, one (i, j) pair at a time: e_ij = v^T tanh(W1 s_i + W2 h_j)."""
    batch, tq, tv = query.shape[0], query.shape[1], value.shape[1]
    scores = np.zeros((batch, tq, tv))
    for b in range(batch):
        for i in range(tq):
            for j in range(tv):
                scores[b, i, j] = v[:, 0] @ np.tanh(query[b, i] @ W1 + value[b, j] @ W2)
    scores = np.where(mask[:, None, :], scores, -np.inf)
    weights = softmax(scores)
    return np.einsum("bij,bjd->bid", weights, value), weights


@pytest.mark.parametrize("single_step", [False, True])
def test_layer_contract(single_step, tmp_path):
    query = random(B, DQ) if single_step else random(B, TQ, DQ)
    run_layer_test(
        BahdanauAttention,
        {"units": U},
        {"query": query, "value": random(B, TV, DV), "value_mask": padding([TV, 2])},
        expected_shape=(B, DV) if single_step else (B, TQ, DV),
        tmp_path=tmp_path,
        shape_inputs=("query", "value"),
    )


@pytest.mark.parametrize("single_step", [False, True])
def test_matches_the_papers_formula(single_step):
    query, value, mask = random(B, TQ, DQ), random(B, TV, DV, seed=1), padding([TV, 3])
    layer = BahdanauAttention(units=U)
    call_query = query[:, 0] if single_step else query
    context, weights = layer(call_query, value, value_mask=mask, return_attention_scores=True)
    expected_context, expected_weights = bahdanau_numpy(
        query[:, :1] if single_step else query,
        value,
        mask,
        *(to_numpy(w) for w in (layer.W1.kernel, layer.W2.kernel, layer.v.kernel)),
    )
    if single_step:
        expected_context, expected_weights = expected_context[:, 0], expected_weights[:, 0]
    np.testing.assert_allclose(to_numpy(context), expected_context, atol=1e-5)
    np.testing.assert_allclose(to_numpy(weights), expected_weights, atol=1e-6)


@given(real_length=st.integers(1, TV), extra=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_padding_changes_nothing(real_length, extra, seed):
    layer = BahdanauAttention(units=U)
    query, value = random(1, TQ, DQ, seed=seed), random(1, real_length, DV, seed=seed + 1)
    extra_values = 50 * random(1, extra, DV, seed=seed + 2)
    assert_masked_keys_change_nothing(layer, query, value, extra_values, "value_mask")


@given(lengths=st.lists(st.integers(1, TV), min_size=B, max_size=B))
def test_weights_sum_to_one_and_skip_masked_keys(lengths):
    mask = padding(lengths)
    _, weights = BahdanauAttention(units=U)(
        random(B, TQ, DQ), random(B, TV, DV), value_mask=mask, return_attention_scores=True
    )
    assert_weights_skip_masked_keys(weights, mask)


def test_keras_implicit_mask_is_honoured():
    assert_implicit_mask_is_honoured(BahdanauAttention(units=U), random(B, DQ), DV, "value_mask")


def test_bad_arguments():
    with pytest.raises(ValueError, match="units=0"):
        BahdanauAttention(units=0)
    layer = BahdanauAttention(units=U)
    with pytest.raises(ValueError, match=r"query.shape=\(2, 3, 4, 1\)"):
        layer(random(B, TQ, DQ, 1), random(B, TV, DV))
    with pytest.raises(ValueError, match=r"value_mask.shape=\(2, 5, 1\)"):
        layer(random(B, DQ), random(B, TV, DV), value_mask=np.ones((B, TV, 1), bool))
