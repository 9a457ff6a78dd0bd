"""`RelativePositionBias` (T5's and MPNet's bias by relative position) and
the `attention_bias` it feeds to the self-attention, the blocks and the
encoder stack; against a numpy rendering of T5's
`_relative_position_bucket` and of the attention's equations. Runs on
TensorFlow and on JAX."""

import math

import keras
import numpy as np
import pytest
from helpers import numpy_attention, run_layer_test, self_attention_weights, softmax, to_numpy
from keras import ops

from keras_attention.layers import MultiHeadSelfAttention, RelativePositionBias, TransformerBlock
from keras_attention.models.transformer_stacks import TransformerEncoder


def t5_bucket(relative_position, bidirectional, num_buckets, max_distance):
    """T5's `_relative_position_bucket` (transformers' modeling_t5.py; the
    same as MPNet's `relative_position_bucket`, which is bidirectional), in
    numpy, float32 as torch computes it."""
    relative_position = np.asarray(relative_position, np.int64)
    buckets = np.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets += (relative_position > 0).astype(np.int64) * num_buckets
        relative_position = np.abs(relative_position)
    else:
        relative_position = -np.minimum(relative_position, 0)
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    with np.errstate(divide="ignore", invalid="ignore"):  # log(0): a small one anyway
        if_large = max_exact + (
            np.log(relative_position.astype(np.float32) / max_exact)
            / np.float32(math.log(max_distance / max_exact))
            * np.float32(num_buckets - max_exact)
        ).astype(np.int64)
    if_large = np.minimum(if_large, num_buckets - 1)
    return buckets + np.where(is_small, relative_position, if_large)


# T5's buckets (32, up to 128) as transformers 5.25's `_relative_position_bucket` gives them.
RELATIVE = [-1000, -200, -128, -127, -100, -64, -63, -32, -31, -16, -15, -12, -11, -9, -8, -7]
RELATIVE += [-1, 0, 1, 2, 7, 8, 9, 11, 12, 15, 16, 31, 32, 63, 64, 100, 127, 128, 129, 1000]
TORCH_BIDIRECTIONAL = [15, 15, 15, 15, 15, 14, 13, 12, 11, 10, 9, 9, 8, 8, 8, 7, 1, 0, 17, 18]
TORCH_BIDIRECTIONAL += [23, 24, 24, 24, 25, 25, 26, 27, 28, 29, 30, 31, 31, 31, 31, 31]
TORCH_CAUSAL = [31, 31, 31, 31, 30, 26, 26, 21, 21, 16, 15, 12, 11, 9, 8, 7, 1] + [0] * 19


def test_the_reference_is_t5s():
    """The numpy rendering gives what transformers gives."""
    assert t5_bucket(RELATIVE, True, 32, 128).tolist() == TORCH_BIDIRECTIONAL
    assert t5_bucket(RELATIVE, False, 32, 128).tolist() == TORCH_CAUSAL


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets, max_distance", [(32, 128), (8, 20), (16, 40), (64, 256)])
def test_buckets_are_t5s(bidirectional, num_buckets, max_distance):
    layer = RelativePositionBias(
        num_heads=2, num_buckets=num_buckets, max_distance=max_distance, bidirectional=bidirectional
    )
    for query_length, key_length, query_start in [
        (1, 1, 0),
        (7, 7, 0),
        (300, 300, 0),
        (1, 400, 37),
    ]:
        queries = np.arange(query_length) + query_start
        expected = t5_bucket(
            np.arange(key_length)[None] - queries[:, None], bidirectional, num_buckets, max_distance
        )
        got = to_numpy(layer.buckets(query_length, key_length, query_start))
        np.testing.assert_array_equal(got, expected)


def test_the_bias_is_the_tables_value_for_each_bucket():
    """`[1, H, Tq, Tk]`: head h's value of bucket(j - i); `key_length`
    defaults to `query_length`; `query_start` moves the queries (one
    decoding step reads the row of its position)."""
    layer = RelativePositionBias(num_heads=3, num_buckets=8, max_distance=20)
    table = np.random.default_rng(0).normal(size=(8, 3)).astype("float32")
    layer.set_weights([table])
    buckets = t5_bucket(np.arange(9)[None] - np.arange(9)[:, None], True, 8, 20)
    expected = table[buckets].transpose(2, 0, 1)[None]  # [1, H, Tq, Tk]
    np.testing.assert_array_equal(to_numpy(layer(query_length=9)), expected)
    step = to_numpy(layer(query_length=1, key_length=9, query_start=4))
    np.testing.assert_array_equal(step, expected[:, :, 4:5])
    assert tuple(layer.compute_output_shape(9, 9)) == (1, 3, 9, 9)


@keras.saving.register_keras_serializable(package="tests")
class ScoresWithBias(RelativePositionBias):
    """Scores `[B, H, Tq, Tk]` + the bias: the layer as a stack uses it, for
    `run_layer_test` (which passes a tensor)."""

    def call(self, scores):
        shape = ops.shape(scores)
        return scores + super().call(query_length=shape[2], key_length=shape[3])

    def compute_output_shape(self, scores_shape):
        return tuple(scores_shape)


def test_layer_contract(tmp_path):
    scores = np.random.default_rng(1).normal(size=(2, 4, 5, 5)).astype("float32")
    run_layer_test(
        ScoresWithBias,
        {"num_heads": 4, "num_buckets": 8, "max_distance": 16},
        {"scores": scores},
        expected_shape=(2, 4, 5, 5),
        tmp_path=tmp_path,
    )


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(num_buckets=7), "even when bidirectional"),
        (dict(num_buckets=2, bidirectional=False), "at least 4"),
        (dict(num_buckets=32, max_distance=8), "more than the distances that have a bucket each"),
        (dict(num_heads=0), "`num_heads` must be a positive integer"),
    ],
)
def test_bad_options_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        RelativePositionBias(**{"num_heads": 2, **options})


def numpy_biased_attention(x, weights, num_heads, bias, mask):
    """softmax(Q K^T / sqrt(d_k) + bias) V per head, the heads projected by
    W^O: the paper's equations with the bias added to the scores."""
    W_q, b_q, W_k, b_k, W_v, b_v, W_o, b_o = weights
    Q, K, V = x @ W_q + b_q, x @ W_k + b_k, x @ W_v + b_v
    depth = Q.shape[-1] // num_heads
    contexts, all_weights = [], []
    for head in range(num_heads):
        part = slice(head * depth, (head + 1) * depth)
        scores = Q[..., part] @ np.swapaxes(K[..., part], -1, -2) / np.sqrt(depth)
        scores = np.where(mask[:, None, :], scores + bias[:, head], -np.inf)
        head_weights = softmax(scores)
        all_weights.append(head_weights)
        contexts.append(head_weights @ V[..., part])
    return np.concatenate(contexts, -1) @ W_o + b_o, np.stack(all_weights, axis=1)


def test_self_attention_adds_the_bias_to_its_scores():
    """With padding masked; a zero bias is no bias."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 6, 8)).astype("float32")
    bias = rng.normal(size=(1, 2, 6, 6)).astype("float32")
    mask = np.array([[True] * 6, [True] * 4 + [False] * 2])
    layer = MultiHeadSelfAttention(num_heads=2)
    output, weights = layer(x, padding_mask=mask, attention_bias=bias, return_attention_scores=True)
    expected, expected_weights = numpy_biased_attention(
        x, self_attention_weights(layer), 2, bias, mask
    )
    np.testing.assert_allclose(to_numpy(weights), expected_weights, atol=1e-5)
    np.testing.assert_allclose(to_numpy(output), expected, atol=1e-5)
    unbiased = to_numpy(layer(x, padding_mask=mask))
    zero = to_numpy(layer(x, padding_mask=mask, attention_bias=np.zeros((1, 1, 6, 6), "float32")))
    np.testing.assert_allclose(zero, unbiased, atol=1e-6)
    np.testing.assert_allclose(
        unbiased,
        numpy_attention(x, x, self_attention_weights(layer), 2, mask[:, None, :]),
        atol=1e-5,
    )


def test_a_bias_with_chunk_size_is_refused_by_name():
    x = np.zeros((1, 4, 8), "float32")
    bias = np.zeros((1, 2, 4, 4), "float32")
    layer = MultiHeadSelfAttention(num_heads=2, chunk_size=2)
    with pytest.raises(ValueError, match="`attention_bias` is not supported with `chunk_size`"):
        layer(x, attention_bias=bias)
    # Asking for the weights takes the dense path, which adds it.
    _, weights = layer(x, attention_bias=bias, return_attention_scores=True)
    assert tuple(weights.shape) == (1, 2, 4, 4)
    with pytest.raises(ValueError, match="must be a float tensor that broadcasts"):
        MultiHeadSelfAttention(num_heads=2)(x, attention_bias=np.zeros((4, 4), "float32"))
    with pytest.raises(ValueError, match="not supported with `chunk_size`"):
        TransformerEncoder(num_heads=2, chunk_size=2, relative_attention_num_buckets=8)


def test_the_encoder_stack_adds_one_table_to_every_block(tmp_path):
    """The stack's bias is computed once, from one table, and given to
    every block: the same as each block called with it; the stack saves
    and reloads with it."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 7, 8)).astype("float32")
    mask = np.array([[True] * 7, [True] * 5 + [False] * 2])
    stack = TransformerEncoder(
        num_layers=2,
        num_heads=2,
        intermediate_dim=16,
        dropout=0.0,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=16,
        name="encoder",
    )
    stack(x, padding_mask=mask)
    table = rng.normal(size=(8, 2)).astype("float32")
    stack.relative_position_bias.set_weights([table])
    assert sum("relative_position_bias" in w.path for w in stack.weights) == 1
    bias = table[t5_bucket(np.arange(7)[None] - np.arange(7)[:, None], True, 8, 16)]
    bias = bias.transpose(2, 0, 1)[None]
    expected = x
    for block in stack.blocks:
        assert isinstance(block, TransformerBlock)
        expected = block(expected, padding_mask=mask, attention_bias=bias)
    np.testing.assert_allclose(to_numpy(stack(x, padding_mask=mask)), to_numpy(expected), atol=1e-5)
    # The bias matters, and another one given to the stack adds to it.
    plain = TransformerEncoder.from_config(
        {**stack.get_config(), "relative_attention_num_buckets": None}
    )
    plain(x, padding_mask=mask)
    plain.set_weights(
        [to_numpy(w) for w in stack.weights if "relative_position_bias" not in w.path]
    )
    assert not np.allclose(to_numpy(plain(x, padding_mask=mask)), to_numpy(expected), atol=1e-3)
    extra = rng.normal(size=(1, 2, 7, 7)).astype("float32")
    both = stack(x, padding_mask=mask, attention_bias=extra)
    expected = x
    for block in stack.blocks:
        expected = block(expected, padding_mask=mask, attention_bias=bias + extra)
    np.testing.assert_allclose(to_numpy(both), to_numpy(expected), atol=1e-5)
    # Saved and reloaded, in a model.
    inputs = keras.Input((None, 8))
    model = keras.Model(inputs, stack(inputs))
    model.save(tmp_path / "stack.keras")
    reloaded = keras.saving.load_model(tmp_path / "stack.keras")
    np.testing.assert_allclose(to_numpy(reloaded(x)), to_numpy(model(x)), atol=1e-6)
