"""The blocks of today's decoders: RMS normalisation, a SwiGLU feed-forward
network and projections without biases (Llama's block), against the block
written out in numpy, with the attention options beside them."""

import numpy as np
import pytest
from helpers import numpy_attention, run_layer_test, to_numpy

from keras_attention.layers import TransformerBlock, TransformerDecoderBlock

B, T, S, D, H, FF = 2, 6, 5, 8, 2, 12
LLAMA = dict(normalization="rms_norm", feed_forward="swiglu", use_bias=False)


def random(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def padding(lengths, length=T):
    return np.arange(length)[None, :] < np.asarray(lengths)[:, None]


def numpy_rms_norm(x, scale, epsilon):
    """x / sqrt(mean(x^2) + epsilon) * g (Zhang & Sennrich 2019)."""
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + epsilon) * scale


def numpy_swiglu(x, W_gate, W1, W2):
    """(silu(x W_gate) * x W1) W2 (Shazeer 2020)."""
    gate = x @ W_gate
    return (gate / (1 + np.exp(-gate)) * (x @ W1)) @ W2


def numpy_llama_block(block, x, mask):
    """Each sub-layer on the normalised input, added back (pre-norm), or
    normalised after the sum (post-norm)."""
    (kernel,) = (to_numpy(w) for w in block.self_attention.qkv_projection.weights)
    (W_o,) = (to_numpy(w) for w in block.self_attention.output_projection.weights)
    W_q, W_k, W_v = np.split(kernel, 3, axis=-1)
    zeros = np.zeros(D)
    weights = (W_q, zeros, W_k, zeros, W_v, zeros, W_o, zeros)
    feed_forward = [
        to_numpy(layer.weights[0])
        for layer in (
            block.feed_forward_gate,
            block.feed_forward_intermediate,
            block.feed_forward_output,
        )
    ]
    attention_mask = mask[:, None, :] & np.tril(np.ones((T, T), bool))
    sublayers = [
        (lambda y: numpy_attention(y, y, weights, H, attention_mask), block.self_attention_norm),
        (lambda y: numpy_swiglu(y, *feed_forward), block.feed_forward_norm),
    ]
    for sublayer, norm in sublayers:
        scale, epsilon = to_numpy(norm.weights[0]), norm.epsilon
        if block.norm_first:
            x = x + sublayer(numpy_rms_norm(x, scale, epsilon))
        else:
            x = numpy_rms_norm(x + sublayer(x), scale, epsilon)
    return x


@pytest.mark.parametrize("norm_first", [False, True])
def test_a_llama_block_matches_numpy(norm_first):
    x, mask = random(B, T, D), padding([T, 4])
    block = TransformerBlock(
        num_heads=H, intermediate_dim=FF, causal=True, norm_first=norm_first, **LLAMA
    )
    output = to_numpy(block(x, padding_mask=mask))
    assert not [w.path for w in block.weights if "bias" in w.path or "beta" in w.path]
    np.testing.assert_allclose(output, numpy_llama_block(block, x, mask), atol=1e-4)


@pytest.mark.parametrize("block_cls", [TransformerBlock, TransformerDecoderBlock])
def test_layer_contract_with_every_block_option(block_cls, tmp_path):
    inputs = {"x": random(B, T, D)}
    if block_cls is TransformerDecoderBlock:
        inputs.update(context=random(B, S, D, seed=1), context_mask=padding([S, 3], S))
    else:
        inputs["padding_mask"] = padding([T, 3])
    options = dict(
        LLAMA, num_key_value_heads=1, sliding_window=3, use_gate=True, positions="rotary"
    )
    run_layer_test(
        block_cls,
        {"num_heads": H, "intermediate_dim": FF, "norm_first": True, **options},
        inputs,
        expected_shape=(B, T, D),
        tmp_path=tmp_path,
    )


def test_cached_decoding_of_a_llama_block_equals_the_full_pass():
    x = random(B, T, D)
    block = TransformerDecoderBlock(
        num_heads=H, intermediate_dim=FF, norm_first=True, positions="alibi", **LLAMA
    )
    full = to_numpy(block(x))
    cache, steps = block.initial_cache(B, T), []
    for index in range(T):
        output, cache = block(x[:, index : index + 1], cache=cache, cache_index=index)
        steps.append(to_numpy(output))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-5)


def test_bad_block_options_are_refused_by_name():
    for kwargs, pattern in [
        ({"normalization": "batch_norm"}, r"`normalization` must be one of .*'batch_norm'"),
        ({"feed_forward": "geglu"}, r"`feed_forward` must be one of .*'geglu'"),
        ({"use_bias": "no"}, r"`use_bias` must be True or False. Received: use_bias='no'"),
    ]:
        for block_cls in (TransformerBlock, TransformerDecoderBlock):
            with pytest.raises(ValueError, match=pattern):
                block_cls(num_heads=H, intermediate_dim=FF, **kwargs)
