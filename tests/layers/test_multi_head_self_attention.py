import keras
import numpy as np
import pytest
from helpers import numpy_attention, run_layer_test, self_attention_weights, to_numpy
from hypothesis import given
from hypothesis import strategies as st

from keras_attention.layers import MultiHeadSelfAttention

B, T, D, H = 2, 6, 8, 2


def random(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def padding(lengths, length=T):
    return np.arange(length)[None, :] < np.asarray(lengths)[:, None]


@pytest.mark.parametrize("causal", [False, True])
def test_layer_contract(causal, tmp_path):
    run_layer_test(
        MultiHeadSelfAttention,
        {"num_heads": H, "causal": causal, "dropout": 0.1},
        {"x": random(B, T, D), "padding_mask": padding([T, 3])},
        expected_shape=(B, T, D),
        tmp_path=tmp_path,
    )


def copy_into_keras_mha(ours, theirs):
    """Copies our fused Q/K/V and output weights into `keras.layers.MultiHeadAttention`."""
    kernel, bias = (to_numpy(w) for w in ours.qkv_projection.weights)
    dk, dv = ours._key_dim, ours._value_dim
    q_k, k_k, v_k = np.split(kernel, [H * dk, 2 * H * dk], axis=-1)
    q_b, k_b, v_b = np.split(bias, [H * dk, 2 * H * dk], axis=-1)
    out_k, out_b = (to_numpy(w) for w in ours.output_projection.weights)
    theirs._query_dense.set_weights([q_k.reshape(D, H, dk), q_b.reshape(H, dk)])
    theirs._key_dense.set_weights([k_k.reshape(D, H, dk), k_b.reshape(H, dk)])
    theirs._value_dense.set_weights([v_k.reshape(D, H, dv), v_b.reshape(H, dv)])
    theirs._output_dense.set_weights([out_k.reshape(H, dv, D), out_b])


@pytest.mark.parametrize("causal", [False, True])
def test_matches_keras_multi_head_attention(causal):
    value_dim = None
    x = random(B, T, D)
    mask = padding([T, 4])
    ours = MultiHeadSelfAttention(num_heads=H, value_dim=value_dim, causal=causal)
    ours_out, ours_scores = ours(x, padding_mask=mask, return_attention_scores=True)
    theirs = keras.layers.MultiHeadAttention(num_heads=H, key_dim=D // H, value_dim=value_dim)
    theirs(x, x)  # build
    copy_into_keras_mha(ours, theirs)
    attention_mask = np.repeat(mask[:, None, :], T, axis=1)
    theirs_out, theirs_scores = theirs(
        x,
        x,
        attention_mask=attention_mask,
        use_causal_mask=causal,
        return_attention_scores=True,
    )
    np.testing.assert_allclose(to_numpy(ours_out), to_numpy(theirs_out), atol=1e-5)
    np.testing.assert_allclose(to_numpy(ours_scores), to_numpy(theirs_scores), atol=1e-6)


@pytest.mark.parametrize("causal", [False, True])
def test_matches_numpy_with_a_different_value_dim(causal):
    # Keras core's MultiHeadAttention fails on JAX when value_dim != key_dim
    # (its flash-attention path rejects the shapes), so numpy is the oracle here.
    x, mask = random(B, T, D), padding([T, 4])
    layer = MultiHeadSelfAttention(num_heads=H, value_dim=3, causal=causal)
    attention_mask = mask[:, None, :]
    if causal:
        attention_mask = attention_mask & np.tril(np.ones((T, T), bool))
    output = to_numpy(layer(x, padding_mask=mask))
    expected = numpy_attention(x, x, self_attention_weights(layer), H, attention_mask)
    np.testing.assert_allclose(output, expected, atol=1e-5)


@given(
    real_length=st.integers(1, T),
    extra_padding=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_padding_does_not_change_real_positions(real_length, extra_padding, seed):
    layer = MultiHeadSelfAttention(num_heads=H)
    x = random(1, real_length, D, seed=seed)
    alone = layer(x)
    garbage = random(1, extra_padding, D, seed=seed + 1) * 100
    padded = np.concatenate([x, garbage], axis=1)
    mask = padding([real_length], real_length + extra_padding)
    with_padding = layer(padded, padding_mask=mask)
    np.testing.assert_allclose(to_numpy(with_padding)[:, :real_length], to_numpy(alone), atol=1e-5)


@given(position=st.integers(0, T - 1), seed=st.integers(0, 2**16))
def test_causal_never_sees_the_future(position, seed):
    layer = MultiHeadSelfAttention(num_heads=H, causal=True)
    x = random(B, T, D, seed=seed)
    changed = x.copy()
    changed[:, position + 1 :] = random(B, T - position - 1, D, seed=seed + 1) * 10
    before = to_numpy(layer(x))[:, : position + 1]
    after = to_numpy(layer(changed))[:, : position + 1]
    np.testing.assert_allclose(after, before, atol=1e-5)


@given(seed=st.integers(0, 2**16))
def test_permutation_equivariant_without_positions(seed):
    layer = MultiHeadSelfAttention(num_heads=H)
    x = random(B, T, D, seed=seed)
    permutation = np.random.default_rng(seed).permutation(T)
    np.testing.assert_allclose(
        to_numpy(layer(x[:, permutation])), to_numpy(layer(x))[:, permutation], atol=1e-5
    )


@given(lengths=st.lists(st.integers(1, T), min_size=B, max_size=B), seed=st.integers(0, 99))
def test_weights_sum_to_one_and_skip_masked_keys(lengths, seed):
    layer = MultiHeadSelfAttention(num_heads=H, causal=bool(seed % 2))
    mask = padding(lengths)
    extra = np.random.default_rng(seed).random((B, T, T)) > 0.3
    np.fill_diagonal(extra[0], True)
    np.fill_diagonal(extra[1], True)
    extra[:, :, 0] = True  # every query keeps at least one real key
    _, weights = layer(
        random(B, T, D, seed=seed),
        padding_mask=mask,
        attention_mask=extra,
        return_attention_scores=True,
    )
    weights = to_numpy(weights)  # [B, H, T, T]
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    allowed = mask[:, None, None, :] & extra[:, None]
    if layer.causal:
        allowed = allowed & np.tril(np.ones((T, T), bool))
    assert np.all(weights[~np.broadcast_to(allowed, weights.shape)] == 0)


@given(prefill=st.integers(1, T - 1), seed=st.integers(0, 2**16))
def test_cached_decoding_equals_full_pass(prefill, seed):
    layer = MultiHeadSelfAttention(num_heads=H, causal=True)
    x = random(B, T, D, seed=seed)
    full = to_numpy(layer(x))
    cache = layer.initial_cache(B, T)
    # A prompt of `prefill` tokens at once, then one token at a time.
    output, cache = layer(x[:, :prefill], cache=cache, cache_index=0)
    steps = [to_numpy(output)]
    for index in range(prefill, T):
        output, cache = layer(x[:, index : index + 1], cache=cache, cache_index=index)
        steps.append(to_numpy(output))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-5)


def test_keras_implicit_mask_is_honoured():
    ids = np.array([[3, 5, 7, 0, 0, 0], [2, 9, 4, 6, 1, 0]])
    embedding = keras.layers.Embedding(10, D, mask_zero=True)
    layer = MultiHeadSelfAttention(num_heads=H)
    implicit = layer(embedding(ids))
    explicit = layer(embedding(ids), padding_mask=ids != 0)
    np.testing.assert_allclose(to_numpy(implicit), to_numpy(explicit), atol=1e-6)
    no_mask = layer(ops_embedding_without_mask(embedding, ids))
    assert not np.allclose(to_numpy(no_mask)[0, :3], to_numpy(explicit)[0, :3])

    # In a functional model, the mask flows from the embedding too.
    inputs = keras.Input((T,), dtype="int32")
    model = keras.Model(inputs, layer(embedding(inputs)))
    np.testing.assert_allclose(model.predict(ids, verbose=0), to_numpy(explicit), atol=1e-5)


def ops_embedding_without_mask(embedding, ids):
    return keras.ops.take(embedding.embeddings, ids, axis=0)


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_heads=3, model width=8"):
        MultiHeadSelfAttention(num_heads=3)(random(B, T, D))
    with pytest.raises(ValueError, match="num_heads=0"):
        MultiHeadSelfAttention(num_heads=0)
    with pytest.raises(ValueError, match="dropout=1.5"):
        MultiHeadSelfAttention(num_heads=2, dropout=1.5)
    layer = MultiHeadSelfAttention(num_heads=H)
    with pytest.raises(ValueError, match=r"padding_mask.shape=\(2, 6, 6\)"):
        layer(random(B, T, D), padding_mask=np.ones((B, T, T), bool))
    with pytest.raises(ValueError, match=r"padding_mask.shape=\(2, 5\)"):
        layer(random(B, T, D), padding_mask=np.ones((B, T - 1), bool))
    with pytest.raises(ValueError, match=r"attention_mask.shape=\(2, 6\)"):
        layer(random(B, T, D), attention_mask=np.ones((B, T), bool))
    with pytest.raises(ValueError, match="padding_mask with dtype float32"):
        layer(random(B, T, D), padding_mask=np.zeros((B, T), "float32"))
    with pytest.raises(ValueError, match="cache_index"):
        layer(random(B, 1, D), cache=layer.initial_cache(B, T))


def gradient_of_weighted_sum(function, scores, upstream):
    """d/d scores of sum(function(scores) * upstream), on the active backend."""
    if keras.backend.backend() == "jax":
        import jax

        return np.asarray(jax.grad(lambda s: (function(s) * upstream).sum())(scores))
    import tensorflow as tf

    scores = tf.constant(scores)
    with tf.GradientTape() as tape:
        tape.watch(scores)
        loss = tf.reduce_sum(function(scores) * upstream)
    return tape.gradient(loss, scores).numpy()


def test_softmax_gradient_matches_the_jacobian():
    # The softmax's own backward pass (fewer [Tq, Tk] buffers) against the
    # Jacobian written out: d w_i / d s_j = w_i (delta_ij - w_j).
    from keras_attention.layers import _attention

    scores, upstream = random(2, 3, 4, 5, seed=1), random(2, 3, 4, 5, seed=2)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    jacobian = weights[..., :, None] * (np.eye(5) - weights[..., None, :])
    expected = np.einsum("...ij,...i->...j", jacobian, upstream)
    got = gradient_of_weighted_sum(_attention.softmax, scores, upstream)
    np.testing.assert_allclose(to_numpy(_attention.softmax(scores)), weights, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)

    # Masked keys get weight 0, so no gradient either.
    mask = np.arange(5) < 3
    got = gradient_of_weighted_sum(lambda s: _attention.masked_softmax(s, mask), scores, upstream)
    np.testing.assert_array_equal(got[..., 3:], 0)
    assert np.abs(got[..., :3]).sum() > 0

    # A row whose keys are all masked reads nothing: zeros, and a zero (not
    # NaN) gradient. So its output does not depend on how much padding there is.
    row_mask = np.array([True, True, True, False, False])[None, :] & (np.arange(4) < 2)[:, None]
    weights = to_numpy(_attention.masked_softmax(scores, row_mask))
    np.testing.assert_array_equal(weights[..., 2:, :], 0)
    np.testing.assert_allclose(weights[..., :2, :].sum(-1), 1.0, rtol=1e-6)
    got = gradient_of_weighted_sum(
        lambda s: _attention.masked_softmax(s, row_mask), scores, upstream
    )
    assert np.all(np.isfinite(got)) and np.all(got[..., 2:, :] == 0)


def test_an_empty_sequence_gives_the_same_output_whatever_its_padding():
    layer = MultiHeadSelfAttention(num_heads=H)
    x = random(1, T, D, seed=3)
    outputs = [
        to_numpy(layer(x[:, :width], padding_mask=np.zeros((1, width), bool)))
        for width in (1, 3, T)
    ]
    assert all(np.all(np.isfinite(output)) for output in outputs)
    # With no key to read, every position's output is the projection of zero.
    for output in outputs:
        np.testing.assert_allclose(output, np.broadcast_to(outputs[0][:, :1], output.shape))
