"""The options of today's attention on our two attention layers:
grouped-query heads (`num_key_value_heads`), a sliding window
(`sliding_window`) and an output gate (`use_gate`), alone and together, and
with rotary positions (`positions="rotary"`, see test_rotary_embedding.py)
and ALiBi (`positions="alibi"`, against KerasHub's `AlibiBias`).

The reference is Keras core's `GroupedQueryAttention` (its `sliding_window`
and `use_gate`) with our weights copied in; beside it, the blocked path
(`chunk_size`) and the KV cache must give the dense layer's answers, and
properties that need no reference: a key outside the window changes nothing,
the blocked path never reads a block outside it."""

import itertools

import keras
import keras_hub
import numpy as np
import pytest
from helpers import assert_layers_agree, examples, layer_gradients, run_layer_test, to_numpy
from hypothesis import given, settings
from hypothesis import strategies as st

from keras_attention.layers import MultiHeadCrossAttention, MultiHeadSelfAttention
from keras_attention.layers._attention import alibi_slopes
from keras_attention.layers._chunked_attention import chunked_attention

B, T, S, D, H = 2, 7, 5, 16, 4
DEPTH = D // H


def random(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def padding(lengths, length):
    return np.arange(length)[None, :] < np.asarray(lengths)[:, None]


def split_heads(kernel, bias, heads):
    """A fused `[D, heads * d]` projection as Keras core's `[D, heads, d]`."""
    return [kernel.reshape(kernel.shape[0], heads, DEPTH), bias.reshape(heads, DEPTH)]


def visible(key_padding, query_length, sliding_window, causal=False):
    """`[B, Tq, Tk]`: which keys each query may read, and `[B, Tq]`: whether
    it may read any."""
    i, j = np.arange(query_length)[:, None], np.arange(key_padding.shape[1])[None, :]
    allowed = np.ones_like(i >= j) if sliding_window is None else abs(i - j) < sliding_window
    if causal:
        allowed = allowed & (j <= i)
    may_read = key_padding[:, None, :] & allowed[None]
    return may_read, may_read.any(-1)


def keras_copy(ours):
    """Keras core's `GroupedQueryAttention` holding our layer's weights."""
    kv_heads = ours.num_key_value_heads or H
    theirs = keras.layers.GroupQueryAttention(
        head_dim=DEPTH,
        num_query_heads=H,
        num_key_value_heads=kv_heads,
        sliding_window=ours.sliding_window,
        use_gate=ours.use_gate,
    )
    theirs(random(1, 3, D), random(1, 3, D))
    if isinstance(ours, MultiHeadSelfAttention):
        kernel, bias = (to_numpy(w) for w in ours.qkv_projection.weights)
        edges = np.cumsum(ours._qkv_widths)[:-1]
        q_k, k_k, v_k = np.split(kernel, edges, axis=-1)
        q_b, k_b, v_b = np.split(bias, edges, axis=-1)
    else:
        q_k, q_b = (to_numpy(w) for w in ours.query_projection.weights)
        kernel, bias = (to_numpy(w) for w in ours.key_value_projection.weights)
        k_k, v_k = np.split(kernel, 2, axis=-1)
        k_b, v_b = np.split(bias, 2, axis=-1)
    theirs._query_dense.set_weights(split_heads(q_k, q_b, H))
    theirs._key_dense.set_weights(split_heads(k_k, k_b, kv_heads))
    theirs._value_dense.set_weights(split_heads(v_k, v_b, kv_heads))
    out_k, out_b = (to_numpy(w) for w in ours.output_projection.weights)
    theirs._output_dense.set_weights([out_k.reshape(H, DEPTH, D), out_b])
    if ours.use_gate:
        gate_k, gate_b = (to_numpy(w) for w in ours.gate_projection.weights)
        theirs._gate_dense.set_weights(split_heads(gate_k, gate_b, H))
    return theirs


OPTIONS = list(itertools.product([None, 2, 1], [None, 3], [False, True]))  # kv heads, W, gate


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("num_key_value_heads,sliding_window,use_gate", OPTIONS)
def test_self_attention_matches_keras_grouped_query_attention(
    num_key_value_heads, sliding_window, use_gate, causal
):
    x, mask = random(B, T, D), padding([T, 4], T)
    ours = MultiHeadSelfAttention(
        num_heads=H,
        causal=causal,
        num_key_value_heads=num_key_value_heads,
        sliding_window=sliding_window,
        use_gate=use_gate,
    )
    ours_out, ours_scores = ours(x, padding_mask=mask, return_attention_scores=True)
    theirs = keras_copy(ours)
    theirs_out, theirs_scores = theirs(
        x, x, value_mask=mask, use_causal_mask=causal, return_attention_scores=True
    )
    assert_same_where_keys(ours, ours_out, theirs_out, *visible(mask, T, sliding_window, causal))
    ours_scores, theirs_scores = to_numpy(ours_scores), to_numpy(theirs_scores)
    _, has_key = visible(mask, T, sliding_window, causal)
    for b, i in zip(*np.nonzero(has_key), strict=True):
        np.testing.assert_allclose(ours_scores[b, :, i], theirs_scores[b, :, i], atol=1e-6)


def assert_same_where_keys(ours, ours_out, theirs_out, may_read, has_key):
    """Equal outputs for every query that may read a key. One that may read
    none (all its window is padding) gets a uniform row over every key from
    Keras core, and from ours nothing: the output projection's bias alone."""
    ours_out, theirs_out = to_numpy(ours_out), to_numpy(theirs_out)
    np.testing.assert_allclose(ours_out[has_key], theirs_out[has_key], atol=1e-5)
    bias = to_numpy(ours.output_projection.weights[1])
    np.testing.assert_allclose(ours_out[~has_key], np.broadcast_to(bias, ours_out[~has_key].shape))


@pytest.mark.parametrize(
    "num_key_value_heads,sliding_window,use_gate", [(None, None, False), (2, 3, True), (1, 5, True)]
)
def test_input_gradients_match_keras_grouped_query_attention(
    num_key_value_heads, sliding_window, use_gate
):
    """d/dx of sum(output * g): ours against Keras core's, where x is both
    its query and its value, so its two input gradients add up."""
    x, upstream = random(B, T, D), random(B, T, D, seed=5)
    ours = MultiHeadSelfAttention(
        num_heads=H,
        causal=True,
        num_key_value_heads=num_key_value_heads,
        sliding_window=sliding_window,
        use_gate=use_gate,
    )
    ours(x)
    theirs = keras_copy(ours)
    output, (d_x, *_) = layer_gradients(ours, [x], upstream)
    expected, (d_query, d_value, *_) = layer_gradients(
        theirs, [x, x], upstream, use_causal_mask=True
    )
    np.testing.assert_allclose(output, expected, atol=1e-5)
    np.testing.assert_allclose(d_x, d_query + d_value, atol=1e-5)


@pytest.mark.parametrize("num_key_value_heads,sliding_window,use_gate", OPTIONS)
def test_cross_attention_matches_keras_grouped_query_attention(
    num_key_value_heads, sliding_window, use_gate
):
    query, context, mask = random(B, T, D), random(B, S, D, seed=1), padding([S, 3], S)
    ours = MultiHeadCrossAttention(
        num_heads=H,
        num_key_value_heads=num_key_value_heads,
        sliding_window=sliding_window,
        use_gate=use_gate,
    )
    ours_out = ours(query, context, context_mask=mask)
    theirs = keras_copy(ours)
    theirs_out = theirs(query, context, value_mask=mask)
    may_read, has_key = visible(mask, T, sliding_window)
    assert has_key.all() == (sliding_window is None)  # queries past the context's window
    assert_same_where_keys(ours, ours_out, theirs_out, may_read, has_key)


@pytest.mark.parametrize("causal", [False, True])
def test_grouped_windowed_gated_layers_in_blocks_equal_dense(causal):
    """Outputs and every gradient (inputs and weights), with padding, a window
    that spans block edges and reaches past a whole block, and dropout off."""
    x, mask = random(B, 13, D), padding([13, 9], 13)
    context, context_mask = random(B, 11, D, seed=3), padding([11, 6], 11)
    for sliding_window in (2, 5):
        options = dict(
            num_heads=H, num_key_value_heads=2, sliding_window=sliding_window, use_gate=True
        )

        for positions in ("rotary", "alibi"):

            def make_self(chunk_size, options=options, positions=positions):
                keras.utils.set_random_seed(1)
                return MultiHeadSelfAttention(
                    causal=causal, chunk_size=chunk_size, positions=positions, **options
                )

            assert_layers_agree(make_self, [x], padding_mask=mask)

        def make_cross(chunk_size, options=options):
            keras.utils.set_random_seed(2)
            return MultiHeadCrossAttention(chunk_size=chunk_size, **options)

        assert_layers_agree(make_cross, [x, context], context_mask=context_mask)


@pytest.mark.parametrize("causal", [False, True])
def test_the_blocks_outside_the_window_are_never_read(causal):
    """Values of NaN in the last block: a block that is read multiplies them
    in (0 * NaN is NaN), so the queries of the first blocks, whose window
    ends before it, are finite only if it is skipped."""
    chunk_size, sliding_window, length = 4, 3, 16
    query, key = random(1, length, 2, 3), random(1, length, 2, 3, seed=1)
    value = random(1, length, 2, 3, seed=2)
    value[:, -chunk_size:] = np.nan
    output = to_numpy(
        chunked_attention(
            query, key, value, chunk_size, causal=causal, sliding_window=sliding_window
        )
    )
    # Block 3 holds keys 12..15. Without causal, block 2's queries (8..11)
    # reach key 13 and read it; blocks 0 and 1 (queries up to 7, keys up to
    # 9) do not. With causal only block 3's own queries read it.
    first_reader = 12 if causal else 8
    assert np.isfinite(output[:, :first_reader]).all()
    assert np.isnan(output[:, first_reader:]).all()


@settings(max_examples=examples(15), deadline=None, derandomize=True)
@given(
    query_position=st.integers(0, T - 1),
    sliding_window=st.integers(1, T),
    causal=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_a_token_outside_the_window_changes_nothing(query_position, sliding_window, causal, seed):
    layer = MultiHeadSelfAttention(
        num_heads=H,
        num_key_value_heads=2,
        sliding_window=sliding_window,
        causal=causal,
        use_gate=True,
    )
    x = random(1, T, D, seed=seed)
    outside = [j for j in range(T) if abs(j - query_position) >= sliding_window]
    changed = x.copy()
    changed[:, outside] = random(1, len(outside), D, seed=seed + 1)
    before = to_numpy(layer(x))[:, query_position]
    after = to_numpy(layer(changed))[:, query_position]
    np.testing.assert_allclose(before, after, atol=1e-6)


@pytest.mark.parametrize("positions", [None, "rotary", "alibi"])
@pytest.mark.parametrize("num_key_value_heads,sliding_window,use_gate", OPTIONS)
def test_cached_decoding_equals_the_full_pass(
    num_key_value_heads, sliding_window, use_gate, positions
):
    """Step by step over a cache that holds only the key/value heads; rotary
    and ALiBi positions from the cache index."""
    x = random(B, T, D)
    layer = MultiHeadSelfAttention(
        num_heads=H,
        causal=True,
        num_key_value_heads=num_key_value_heads,
        sliding_window=sliding_window,
        use_gate=use_gate,
        positions=positions,
    )
    full = to_numpy(layer(x))
    cache = layer.initial_cache(B, T)
    assert tuple(cache[0].shape) == (B, num_key_value_heads or H, T, DEPTH)
    steps = []
    for index in range(T):
        output, cache = layer(x[:, index : index + 1], cache=cache, cache_index=index)
        steps.append(to_numpy(output))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-5)


@pytest.mark.parametrize("layer_cls", [MultiHeadSelfAttention, MultiHeadCrossAttention])
def test_layer_contract_with_every_option(layer_cls, tmp_path):
    inputs = {"x" if layer_cls is MultiHeadSelfAttention else "query": random(B, T, D)}
    if layer_cls is MultiHeadCrossAttention:
        inputs.update(context=random(B, S, D, seed=1), context_mask=padding([S, 3], S))
    else:
        inputs["padding_mask"] = padding([T, 3], T)
    run_layer_test(
        layer_cls,
        {
            "num_heads": H,
            "num_key_value_heads": 2,
            "sliding_window": 3,
            "use_gate": True,
            "dropout": 0.1,
        },
        inputs,
        expected_shape=(B, T, D),
        tmp_path=tmp_path,
        shape_inputs=None if layer_cls is MultiHeadSelfAttention else ["query", "context"],
    )


def test_grouped_query_attention_has_fewer_weights():
    def count(**options):
        layer = MultiHeadSelfAttention(num_heads=H, use_bias=False, **options)
        layer.build((None, None, D))
        return layer.count_params()

    # W^Q and W^O D x D each; W^K and W^V D x (H_kv * d) each; the gate D x D.
    assert count() == 4 * D * D
    assert count(num_key_value_heads=1) == 2 * D * D + 2 * D * DEPTH
    assert count(use_gate=True) == 5 * D * D


@pytest.mark.parametrize("layer_cls", [MultiHeadSelfAttention, MultiHeadCrossAttention])
def test_bad_options_are_refused_by_name(layer_cls):
    for kwargs, pattern in [
        ({"num_key_value_heads": 3}, r"`num_key_value_heads` must divide `num_heads`.*=3"),
        ({"num_key_value_heads": 0}, r"`num_key_value_heads` must be a positive integer"),
        (
            {"sliding_window": 0},
            r"`sliding_window` must be a positive integer. Received: sliding_window=0",
        ),
        ({"sliding_window": 2.5}, r"sliding_window=2.5"),
        ({"use_gate": "yes"}, r"`use_gate` must be True or False. Received: use_gate='yes'"),
    ]:
        with pytest.raises(ValueError, match=pattern):
            layer_cls(num_heads=H, **kwargs)


@pytest.mark.parametrize("num_heads", [1, 2, 3, 4, 6, 8, 12, 16])
def test_alibi_slopes_are_press_et_al_s_as_keras_hub_has_them(num_heads):
    # KerasHub's AlibiBias on zero scores over two keys: slope * [-1, 0].
    bias = to_numpy(keras_hub.layers.AlibiBias()(np.zeros((1, num_heads, 1, 2), "float32")))
    np.testing.assert_allclose(alibi_slopes(num_heads), -bias[0, :, 0, 0], rtol=1e-6)
    if num_heads == 8:  # the paper's: 1/2, 1/4, ..., 1/256
        np.testing.assert_allclose(alibi_slopes(8), [2.0**-k for k in range(1, 9)])


def test_causal_alibi_weights_equal_keras_hub_alibi_bias_on_the_scores():
    """KerasHub adds slope * (j - (T - 1)) to every row: under a causal mask
    that differs from ours, -slope * (i - j), by a constant per row, which
    the softmax takes away."""
    x = random(B, T, D)
    layer = MultiHeadSelfAttention(num_heads=H, causal=True, positions="alibi")
    _, weights = layer(x, return_attention_scores=True)
    kernel, bias = (to_numpy(w) for w in layer.qkv_projection.weights)
    projected = x @ kernel + bias
    query = projected[..., :D].reshape(B, T, H, DEPTH)
    key = projected[..., D : 2 * D].reshape(B, T, H, DEPTH)
    scores = np.einsum("bqhd,bkhd->bhqk", query, key) / np.sqrt(DEPTH)
    biased = to_numpy(keras_hub.layers.AlibiBias()(scores.astype("float32")))
    biased = np.where(np.tril(np.ones((T, T), bool)), biased, -np.inf)
    expected = np.exp(biased - biased.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    np.testing.assert_allclose(to_numpy(weights), expected, atol=1e-6)


def test_alibi_without_causal_is_symmetric_and_falls_with_distance():
    """With one vector at every position (a constant input) every score is
    the same, so the weights are the bias alone: symmetric around the
    query, smaller at each step away, and more peaked for the heads with
    steeper slopes (head 0 has the steepest)."""
    layer = MultiHeadSelfAttention(num_heads=H, positions="alibi")
    _, weights = layer(np.ones((1, T, D), "float32"), return_attention_scores=True)
    middle = to_numpy(weights)[0, :, T // 2]  # [H, T]: the middle query's row, each head
    np.testing.assert_allclose(middle, middle[:, ::-1], atol=1e-6)
    assert (np.diff(middle[:, T // 2 :], axis=-1) < 0).all()
    assert (np.diff(middle[:, T // 2]) < 0).all()


class KerasHubPositionsAttention(keras.layers.Layer):
    """Causal self-attention written out in `keras.ops`, its gradients by
    the backend's autodiff, with KerasHub's layers for the positions:
    `RotaryEmbedding` turning the queries and keys `[B, T, H, d]`, or
    `AlibiBias` on the scores `[B, H, T, T]`. Weights: ours, copied."""

    def __init__(self, ours):
        super().__init__()
        self.positions = ours.positions
        self.copied = [
            self.add_weight(
                shape=w.shape, initializer=keras.initializers.Constant(to_numpy(w)), name=name
            )
            for w, name in zip(
                ours.trainable_weights, ["qkv", "qkv_b", "out", "out_b"], strict=True
            )
        ]
        self.rotary = keras_hub.layers.RotaryEmbedding(max_wavelength=ours.rotary_max_wavelength)
        self.alibi = keras_hub.layers.AlibiBias()
        self.built = True  # its weights are made above; the two position layers have none

    def call(self, x):
        qkv, qkv_b, out, out_b = self.copied
        batch, length = keras.ops.shape(x)[0], keras.ops.shape(x)[1]
        projected = keras.ops.reshape(x @ qkv + qkv_b, (batch, length, 3, H, DEPTH))
        query, key, value = (projected[:, :, n] for n in range(3))  # [B, T, H, d]
        if self.positions == "rotary":
            query, key = self.rotary(query), self.rotary(key)
        query, key, value = (keras.ops.transpose(t, (0, 2, 1, 3)) for t in (query, key, value))
        scores = query @ keras.ops.transpose(key, (0, 1, 3, 2)) / DEPTH**0.5
        if self.positions == "alibi":
            scores = self.alibi(scores)
        causal = np.tril(np.ones((T, T), bool))
        weights = keras.ops.softmax(keras.ops.where(causal, scores, -1e9), axis=-1)
        context = keras.ops.reshape(
            keras.ops.transpose(weights @ value, (0, 2, 1, 3)), (batch, length, D)
        )
        return context @ out + out_b


@pytest.mark.parametrize("positions", ["rotary", "alibi"])
def test_rotary_and_alibi_outputs_and_gradients_equal_keras_hubs(positions):
    """Outputs and the gradients of the input and of every weight, against
    the same attention with KerasHub's `RotaryEmbedding` or `AlibiBias`."""
    ours = MultiHeadSelfAttention(num_heads=H, causal=True, positions=positions)
    x, upstream = random(B, T, D), random(B, T, D, seed=1)
    ours(x)
    output, gradients = layer_gradients(ours, [x], upstream)
    theirs = KerasHubPositionsAttention(ours)
    expected, expected_gradients = layer_gradients(theirs, [x], upstream)
    np.testing.assert_allclose(output, expected, atol=1e-5)
    assert len(gradients) == len(expected_gradients) == 5  # x, W_qkv, b_qkv, W_o, b_o
    for got, want in zip(gradients, expected_gradients, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5)
