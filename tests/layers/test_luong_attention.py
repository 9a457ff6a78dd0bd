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

from keras_attention.layers import LuongAttention

B, TQ, TV, D, DV = 2, 3, 5, 4, 6


def random(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def padding(lengths, length=TV):
    return np.arange(length)[None, :] < np.asarray(lengths)[:, None]


def luong_scores_numpy(layer, h_t, h_s):
    """The paper's three score functions, one (t, s) pair at a time."""
    if layer.score == "dot":
        return h_t @ h_s
    if layer.score == "general":
        W_a = to_numpy(layer.W_a.kernel)  # h_s W_a: the value in the query's space
        return h_t @ (h_s @ W_a)
    W_a = np.concatenate(
        [to_numpy(layer.W_a_query.kernel), to_numpy(layer.W_a_value.kernel)], axis=0
    )
    return to_numpy(layer.v_a.kernel)[:, 0] @ np.tanh(np.concatenate([h_t, h_s]) @ W_a)


def luong_numpy(layer, query, value, mask):
    scores = np.array(
        [
            [
                [luong_scores_numpy(layer, query[b, t], value[b, s]) for s in range(value.shape[1])]
                for t in range(query.shape[1])
            ]
            for b in range(query.shape[0])
        ]
    )
    weights = softmax(np.where(mask[:, None, :], scores, -np.inf))
    return np.einsum("bts,bsd->btd", weights, value), weights


SCORE_CASES = [("dot", None, D), ("general", None, DV), ("concat", 9, DV), ("concat", None, DV)]


@pytest.mark.parametrize("score,units,value_dim", SCORE_CASES)
def test_layer_contract(score, units, value_dim, tmp_path):
    run_layer_test(
        LuongAttention,
        {"score": score, "units": units},
        {
            "query": random(B, TQ, D),
            "value": random(B, TV, value_dim),
            "value_mask": padding([TV, 1]),
        },
        expected_shape=(B, TQ, value_dim),
        tmp_path=tmp_path,
        shape_inputs=("query", "value"),
    )


@pytest.mark.parametrize("score,units,value_dim", SCORE_CASES)
@pytest.mark.parametrize("single_step", [False, True])
def test_matches_the_papers_formulas(score, units, value_dim, single_step):
    query, value, mask = random(B, TQ, D), random(B, TV, value_dim, seed=1), padding([TV, 3])
    layer = LuongAttention(score=score, units=units)
    call_query = query[:, 0] if single_step else query
    context, weights = layer(call_query, value, value_mask=mask, return_attention_scores=True)
    expected_context, expected_weights = luong_numpy(
        layer, query[:, :1] if single_step else query, value, mask
    )
    if single_step:
        expected_context, expected_weights = expected_context[:, 0], expected_weights[:, 0]
    np.testing.assert_allclose(to_numpy(context), expected_context, atol=1e-5)
    np.testing.assert_allclose(to_numpy(weights), expected_weights, atol=1e-6)


@given(
    real_length=st.integers(1, TV),
    extra=st.integers(1, 4),
    seed=st.integers(0, 2**16),
    score=st.sampled_from(["dot", "general", "concat"]),
)
def test_padding_changes_nothing(real_length, extra, seed, score):
    layer = LuongAttention(score=score)
    query, value = random(1, TQ, D, seed=seed), random(1, real_length, D, seed=seed + 1)
    extra_values = 50 * random(1, extra, D, seed=seed + 2)
    assert_masked_keys_change_nothing(layer, query, value, extra_values, "value_mask")


@given(lengths=st.lists(st.integers(1, TV), min_size=B, max_size=B))
def test_weights_sum_to_one_and_skip_masked_keys(lengths):
    mask = padding(lengths)
    _, weights = LuongAttention()(
        random(B, TQ, D), random(B, TV, DV), value_mask=mask, return_attention_scores=True
    )
    assert_weights_skip_masked_keys(weights, mask)


def test_keras_implicit_mask_is_honoured():
    assert_implicit_mask_is_honoured(LuongAttention(), random(B, TQ, D), DV, "value_mask")


def test_bad_arguments():
    with pytest.raises(ValueError, match="score='cosine'"):
        LuongAttention(score="cosine")
    with pytest.raises(ValueError, match="units=8 with score='general'"):
        LuongAttention(units=8, score="general")
    with pytest.raises(ValueError, match="query width=4, value width=6"):
        LuongAttention(score="dot")(random(B, TQ, D), random(B, TV, DV))
    with pytest.raises(ValueError, match="value_mask with dtype float32"):
        LuongAttention()(
            random(B, TQ, D), random(B, TV, DV), value_mask=np.ones((B, TV), "float32")
        )
