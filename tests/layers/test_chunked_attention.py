"""Attention in blocks equals dense attention: outputs and the gradients of
every input, over drawn lengths, block sizes, masks and causal, on the
active backend (the suite runs on TensorFlow and on JAX)."""

import keras
import numpy as np
import pytest
from helpers import assert_layers_agree, examples, to_numpy
from hypothesis import given, settings
from hypothesis import strategies as st
from keras import ops

from keras_attention.layers._attention import (
    alibi_bias,
    alibi_slopes,
    causal_mask,
    key_mask,
    merge_masks,
    scaled_dot_product_attention,
    window_mask,
)
from keras_attention.layers._chunked_attention import chunked_attention


def dense(
    query,
    key,
    value,
    padding_mask=None,
    attention_mask=None,
    causal=False,
    sliding_window=None,
    alibi_slopes=None,
):
    """The dense path, the reference: scores [B, H, Tq, Tk], softmax, sum."""
    query_length, key_length = query.shape[1], key.shape[1]
    mask = key_mask(padding_mask, attention_mask)
    if causal:
        mask = merge_masks(mask, causal_mask(query_length, key_length))
    if sliding_window is not None:
        mask = merge_masks(mask, window_mask(query_length, key_length, sliding_window))
    if mask is not None:
        mask = ops.expand_dims(mask, 1)  # every head
    bias = None
    if alibi_slopes is not None:
        bias = alibi_bias(alibi_slopes, ops.arange(query_length), ops.arange(key_length))
    return scaled_dot_product_attention(query, key, value, mask, bias=bias)[0]


def value_and_gradients(function, inputs, upstream, graph=None):
    """`function(*inputs)` and d/d inputs of sum(function(*inputs) * upstream):
    on TensorFlow eagerly, or in a `tf.function` with `graph="plain"` or
    `graph="xla"`; on JAX always under `jax.jit`."""
    if keras.backend.backend() == "jax":
        import jax

        def loss(*args):
            return (function(*args) * upstream).sum()

        # One program for the forward and backward pass: op by op, JAX
        # would compile each loop body of the blocked path on every call.
        value, gradients = jax.jit(
            lambda *args: (function(*args), jax.grad(loss, argnums=tuple(range(len(args))))(*args))
        )(*inputs)
        return to_numpy(value), [np.asarray(g) for g in gradients]
    import tensorflow as tf

    def forward_and_backward(*inputs):
        with tf.GradientTape() as tape:
            for x in inputs:
                tape.watch(x)
            output = function(*inputs)
            loss = tf.reduce_sum(output * upstream)
        return output, tape.gradient(loss, inputs)

    if graph is not None:
        forward_and_backward = tf.function(forward_and_backward, jit_compile=graph == "xla")
    output, gradients = forward_and_backward(*[tf.constant(x) for x in inputs])
    return output.numpy(), [g.numpy() for g in gradients]


@st.composite
def problems(draw):
    batch_size = draw(st.integers(1, 2))
    query_length = draw(st.integers(1, 13))
    causal = draw(st.booleans())
    key_length = query_length if causal else draw(st.integers(1, 13))
    chunk_size = draw(st.integers(1, 6))
    heads, depth = draw(st.integers(1, 2)), draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**16))
    random = np.random.default_rng(seed)
    padding = random.random((batch_size, key_length)) < 0.8 if draw(st.booleans()) else None
    attention = (
        random.random((batch_size, query_length, key_length)) < 0.7 if draw(st.booleans()) else None
    )
    arrays = [
        random.normal(size=(batch_size, length, heads, depth)).astype("float32")
        for length in (query_length, key_length, key_length)
    ]
    # A sliding window and ALiBi, which block by block skip and bias.
    sliding_window = draw(st.one_of(st.none(), st.integers(1, 8)))
    slopes = alibi_slopes(heads) if draw(st.booleans()) else None
    options = dict(sliding_window=sliding_window, alibi_slopes=slopes)
    return arrays, padding, attention, causal, chunk_size, options


@settings(max_examples=examples(25), deadline=None, derandomize=True)
@given(problem=problems())
def test_blocks_equal_dense_outputs_and_gradients(problem):
    (query, key, value), padding, attention, causal, chunk_size, options = problem
    upstream = np.random.default_rng(1).normal(size=query.shape[:3] + value.shape[3:])
    upstream = upstream.astype("float32")
    masks = dict(padding_mask=padding, attention_mask=attention, causal=causal, **options)

    def blocked(q, k, v):
        return chunked_attention(q, k, v, chunk_size, **masks)

    expected, expected_gradients = value_and_gradients(
        lambda q, k, v: dense(q, k, v, **masks), [query, key, value], upstream
    )
    output, gradients = value_and_gradients(blocked, [query, key, value], upstream)
    np.testing.assert_allclose(output, expected, atol=1e-5, rtol=1e-5)
    for name, got, want in zip(
        ("query", "key", "value"), gradients, expected_gradients, strict=True
    ):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5, err_msg=name)
        assert np.isfinite(got).all()


def test_a_query_with_no_key_gets_zeros_and_finite_gradients():
    random = np.random.default_rng(0)
    query, key, value = (random.normal(size=(1, 5, 2, 3)).astype("float32") for _ in range(3))
    padding = np.array([[True, True, False, False, False]])
    attention = np.ones((1, 5, 5), bool)
    attention[0, 3] = False  # query 3 may read nothing
    upstream = np.ones((1, 5, 2, 3), "float32")
    output, gradients = value_and_gradients(
        lambda q, k, v: chunked_attention(q, k, v, 2, padding, attention),
        [query, key, value],
        upstream,
    )
    np.testing.assert_array_equal(output[0, 3], 0.0)
    assert all(np.isfinite(g).all() for g in gradients)
    np.testing.assert_array_equal(gradients[0][0, 3], 0.0)
    np.testing.assert_array_equal(gradients[1][0, 2:], 0.0)  # padded keys: no gradient


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_inputs_accumulate_in_float32(dtype):
    random = np.random.default_rng(0)
    query, key, value = (random.normal(size=(1, 9, 2, 4)).astype("float32") for _ in range(3))
    expected = to_numpy(dense(query, key, value, causal=True))
    halves = [ops.cast(x, dtype) for x in (query, key, value)]
    output = chunked_attention(*halves, 4, causal=True)
    assert keras.backend.standardize_dtype(output.dtype) == dtype
    tolerance = 2e-2 if dtype == "bfloat16" else 3e-3
    np.testing.assert_allclose(to_numpy(ops.cast(output, "float32")), expected, atol=tolerance)


def test_dropout_keeps_the_expected_share_and_is_the_same_in_the_backward_pass():
    """With a value of ones, each output is sum_k w_k z_k, z the dropout scale:
    about 1 on average. The gradient, from the same draws, matches a finite
    difference."""
    random = np.random.default_rng(0)
    query = random.normal(size=(2, 64, 2, 4)).astype("float32")
    key = random.normal(size=(2, 64, 2, 4)).astype("float32")
    ones = np.ones((2, 64, 2, 1), "float32")
    seed = ops.convert_to_tensor(5, "int32")
    output = to_numpy(chunked_attention(query, key, ones, 16, dropout_rate=0.25, seed=seed))
    assert abs(output.mean() - 1.0) < 0.05
    assert output.std() > 0.05  # some weights were dropped
    again = to_numpy(chunked_attention(query, key, ones, 16, dropout_rate=0.25, seed=seed))
    np.testing.assert_array_equal(output, again)
    value = random.normal(size=(2, 64, 2, 3)).astype("float32")
    upstream = random.normal(size=(2, 64, 2, 3)).astype("float32")

    def function(q, k, v):
        return chunked_attention(q, k, v, 16, dropout_rate=0.25, seed=seed)

    _, gradients = value_and_gradients(function, [query, key, value], upstream)
    # The output is linear in the value: d/dv of sum(out * g) is exact to check.
    direction = random.normal(size=value.shape).astype("float32")
    change = to_numpy(function(query, key, value + direction)) - to_numpy(
        function(query, key, value)
    )
    np.testing.assert_allclose(
        (change * upstream).sum(), (gradients[2] * direction).sum(), rtol=1e-4
    )
    # And along the query, by a central difference in float64 terms.
    step = 1e-2
    direction = random.normal(size=query.shape).astype("float32")
    plus = to_numpy(function(query + step * direction, key, value))
    minus = to_numpy(function(query - step * direction, key, value))
    numeric = ((plus - minus) * upstream).sum() / (2 * step)
    np.testing.assert_allclose(numeric, (gradients[0] * direction).sum(), rtol=2e-2)


# --- The layers with `chunk_size`: the same layer, the same answers ---


@pytest.mark.parametrize("causal", [False, True])
def test_self_attention_layer_in_blocks_equals_dense(causal):
    from keras_attention.layers import MultiHeadSelfAttention

    random = np.random.default_rng(0)
    x = random.normal(size=(2, 10, 8)).astype("float32")
    padding = np.array([[True] * 10, [True] * 6 + [False] * 4])
    attention = random.random((2, 10, 10)) < 0.8

    def make_layer(chunk_size):
        return MultiHeadSelfAttention(2, causal=causal, chunk_size=chunk_size)

    assert_layers_agree(make_layer, [x], padding_mask=padding, attention_mask=attention)


def test_cross_attention_layer_in_blocks_equals_dense():
    from keras_attention.layers import MultiHeadCrossAttention

    random = np.random.default_rng(0)
    query = random.normal(size=(2, 7, 8)).astype("float32")
    context = random.normal(size=(2, 12, 6)).astype("float32")
    context_mask = np.array([[True] * 12, [True] * 5 + [False] * 7])

    def make_layer(chunk_size):
        return MultiHeadCrossAttention(2, chunk_size=chunk_size)

    assert_layers_agree(make_layer, [query, context], context_mask=context_mask)


def test_blocks_and_models_in_chunks_equal_dense():
    """`chunk_size` reaches every attention layer of a block and of a model
    (`model_overrides` of the builders); the logits stay the same."""
    from keras_attention.layers import TransformerBlock
    from keras_attention.models import build_transformer, build_transformer_lm

    random = np.random.default_rng(0)
    x = random.normal(size=(2, 9, 8)).astype("float32")
    padding = np.array([[True] * 9, [True] * 4 + [False] * 5])

    def make_block(chunk_size):
        return TransformerBlock(2, 16, dropout=0.0, causal=True, chunk_size=chunk_size)

    assert_layers_agree(make_block, [x], padding_mask=padding)

    source = random.integers(1, 20, (2, 9)).astype("int32")
    source[1, 5:] = 0
    target = random.integers(1, 20, (2, 7)).astype("int32")
    inputs = {"source_ids": source, "target_ids": target}
    dense_model, blocked_model = (build_transformer(20, chunk_size=c) for c in (None, 4))
    dense_model(inputs)
    blocked_model(inputs)
    blocked_model.set_weights(dense_model.get_weights())
    np.testing.assert_allclose(
        to_numpy(blocked_model(inputs)), to_numpy(dense_model(inputs)), atol=1e-5
    )
    lm = build_transformer_lm(20, chunk_size=4)
    assert all(
        layer.chunk_size == 4
        for layer in lm._flatten_layers()
        if hasattr(layer, "num_heads") and hasattr(layer, "chunk_size")
    )


def test_chunk_size_survives_the_keras_file_and_is_checked(tmp_path):
    from keras_attention.layers import MultiHeadSelfAttention
    from keras_attention.models import build_transformer_lm

    model = build_transformer_lm(20, chunk_size=5)
    ids = np.array([[1, 4, 5, 6, 7, 8, 9, 3]], "int32")
    path = tmp_path / "lm.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.get_config()["chunk_size"] == 5
    np.testing.assert_allclose(to_numpy(loaded(ids)), to_numpy(model(ids)), atol=1e-6)
    with pytest.raises(ValueError, match="chunk_size=0"):
        MultiHeadSelfAttention(2, chunk_size=0)
    with pytest.raises(ValueError, match="chunk_size"):
        build_transformer_lm(20, chunk_size=-3)


def test_asking_for_the_weights_takes_the_dense_path():
    from keras_attention.layers import MultiHeadSelfAttention

    x = np.random.default_rng(0).normal(size=(1, 6, 8)).astype("float32")
    layer = MultiHeadSelfAttention(2, chunk_size=2, causal=True)
    output, weights = layer(x, return_attention_scores=True)
    assert tuple(weights.shape) == (1, 2, 6, 6)
    np.testing.assert_allclose(to_numpy(output), to_numpy(layer(x)), atol=1e-5)
    assert not to_numpy(weights)[0, :, 0, 1:].any()  # causal


def test_layer_contract_in_blocks(tmp_path):
    """Config, `.keras` file, a `fit` step with dropout, mixed precision."""
    from helpers import run_layer_test

    from keras_attention.layers import MultiHeadCrossAttention, MultiHeadSelfAttention

    random = np.random.default_rng(0)
    padding = np.array([[True] * 7, [True] * 3 + [False] * 4])
    run_layer_test(
        MultiHeadSelfAttention,
        {"num_heads": 2, "dropout": 0.1, "causal": True, "chunk_size": 3},
        {"x": random.normal(size=(2, 7, 8)).astype("float32"), "padding_mask": padding},
        expected_shape=(2, 7, 8),
        tmp_path=tmp_path,
    )
    run_layer_test(
        MultiHeadCrossAttention,
        {"num_heads": 2, "dropout": 0.1, "chunk_size": 4},
        {
            "query": random.normal(size=(2, 5, 8)).astype("float32"),
            "context": random.normal(size=(2, 7, 6)).astype("float32"),
            "context_mask": padding,
        },
        expected_shape=(2, 5, 8),
        tmp_path=tmp_path,
        shape_inputs=("query", "context"),
    )


# JAX has one compiled path, `jax.jit`; TensorFlow a graph with XLA and one without.
GRAPHS = ["xla"] if keras.backend.backend() == "jax" else ["plain", "xla"]


@pytest.mark.parametrize("graph", GRAPHS)
def test_compiled_blocks_equal_dense(graph):
    """Forward and backward in one graph: a `tf.function` with and without
    XLA (TensorFlow; the blocks are kept in TensorArrays there), `jax.jit`
    (JAX), causal and not, with a sliding window and without."""
    random = np.random.default_rng(4)
    query, key, value = (random.normal(size=(2, 11, 2, 4)).astype("float32") for _ in range(3))
    upstream = random.normal(size=(2, 11, 2, 4)).astype("float32")
    for causal, sliding_window in ((False, None), (True, None), (True, 3)):
        masks = dict(causal=causal, sliding_window=sliding_window)
        expected, expected_gradients = value_and_gradients(
            lambda q, k, v, masks=masks: dense(q, k, v, **masks), [query, key, value], upstream
        )
        output, gradients = value_and_gradients(
            lambda q, k, v, masks=masks: chunked_attention(q, k, v, 4, **masks),
            [query, key, value],
            upstream,
            graph,
        )
        np.testing.assert_allclose(output, expected, atol=1e-5, rtol=1e-5)
        for got, want in zip(gradients, expected_gradients, strict=True):
            np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)
