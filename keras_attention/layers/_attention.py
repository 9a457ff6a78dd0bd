"""The steps every attention layer shares: checking masks, softmax over scores.

Private to the package. The public layers read like the illustrated
explanation; the plumbing they all need lives here once.

Conventions: a mask is boolean with `True` at a real token. A padding mask has
shape `[B, T]`, an attention mask `[B, Tq, Tk]`.
"""

import math

import keras
from keras import ops

from keras_attention.utils import NEG_INF


def check_mask(name, mask, rank, shape=None):
    """Validates a user mask and returns it as a boolean tensor (or None).

    Args:
        name: str, the argument's name, for the error message.
        mask: the mask, or None.
        rank: int, the rank the mask must have.
        shape: optional tuple; each int entry must match the mask's static
            dimension (None entries are not checked).
    """
    if mask is None:
        return None
    dtype = keras.backend.standardize_dtype(mask.dtype)
    if dtype != "bool" and "int" not in dtype:
        # A float mask is usually an additive mask (0 / -inf): casting it to
        # bool would silently invert it, so refuse it.
        raise ValueError(
            f"`{name}` must be a boolean mask (True = real token), or integer "
            f"0/1. Received: {name} with dtype {dtype}"
        )
    mask_shape = tuple(mask.shape)
    if len(mask_shape) != rank:
        raise ValueError(
            f"`{name}` must have rank {rank}, shape {_shape_str(shape, rank)}. "
            f"Received: {name}.shape={mask_shape}"
        )
    if shape is not None:
        for got, want in zip(mask_shape, shape, strict=True):
            if got is not None and want is not None and got != want:
                raise ValueError(
                    f"`{name}` must have shape {_shape_str(shape, rank)}. "
                    f"Received: {name}.shape={mask_shape}"
                )
    return ops.cast(mask, "bool")


def _shape_str(shape, rank):
    if shape is None:
        return "[" + ", ".join("?" * rank) + "]"
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def merge_masks(*masks):
    """Logical AND of the masks that are given; None when none is."""
    merged = None
    for mask in masks:
        if mask is None:
            continue
        mask = ops.cast(mask, "bool")
        merged = mask if merged is None else ops.logical_and(merged, mask)
    return merged


def key_mask(padding_mask=None, attention_mask=None):
    """Combines a key padding mask `[B, Tk]` and an attention mask `[B, Tq, Tk]`.

    Returns a mask that broadcasts against scores `[B, Tq, Tk]`, or None.
    """
    if padding_mask is not None:
        padding_mask = ops.expand_dims(padding_mask, axis=1)  # [B, 1, Tk]
    return merge_masks(padding_mask, attention_mask)


def causal_mask(query_length, key_length, query_start=0):
    """`[1, Tq, Tk]` mask: query i (at position query_start + i) sees keys j <= it.

    `query_start` is where the queries sit among the keys: 0 for a full pass,
    the cache index for incremental decoding. It may be a tensor.
    """
    query_positions = ops.arange(query_length) + query_start  # [Tq]
    key_positions = ops.arange(key_length)  # [Tk]
    mask = ops.expand_dims(query_positions, 1) >= ops.expand_dims(key_positions, 0)
    return ops.expand_dims(mask, 0)  # broadcasts over the batch


def masked_softmax(scores, mask=None):
    """Softmax over the last axis in float32, masked keys getting weight 0.

    Args:
        scores: `[..., Tq, Tk]` attention scores in any float dtype.
        mask: optional boolean mask broadcastable to `scores`.

    Returns:
        float32 weights of the same shape; each row sums to 1, except a row
        whose keys are all masked, which is all zeros (never NaN): it reads
        nothing, so its output does not depend on how much padding there
        is (as a uniform row over the padding would).
    """
    scores = ops.cast(scores, "float32")
    if mask is None:
        return softmax(scores)
    weights = softmax(ops.where(mask, scores, NEG_INF))  # exp() gives exactly 0
    any_key = ops.any(mask, axis=-1, keepdims=True)
    return ops.where(any_key, weights, 0.0)


@ops.custom_gradient
def softmax(scores):
    """`ops.softmax` over the last axis, with a backward pass that holds fewer
    `[..., Tq, Tk]` tensors at once.

    The gradient is w * (g - sum_k(g_k w_k)) for weights w and upstream
    gradient g. Written as (g w) - w sum_k(g w)_k, each product is made once
    and the framework can reuse buffers that are no longer needed: for
    self-attention at T=4096 the peak memory of a forward + backward pass
    drops by a third against the built-in gradient
    (`python -m benchmarks.run`).
    """
    if scores.shape[-1] == 1:
        # One key (a one-token source, the first step over a cache) takes
        # all the weight; Keras warns about a softmax over one element.
        weights = ops.ones_like(scores)
    else:
        weights = ops.softmax(scores, axis=-1)

    def gradient(*args, upstream=None):
        if upstream is None:  # TensorFlow passes it positionally, JAX by name
            (upstream,) = args
        product = upstream * weights
        return product - weights * ops.sum(product, axis=-1, keepdims=True)

    return weights, gradient


def window_mask(query_length, key_length, sliding_window, query_start=0):
    """`[1, Tq, Tk]` mask of a sliding window: query i (at position
    query_start + i) sees the keys j with |i - j| < `sliding_window`, as Keras
    core's `sliding_window`. With a causal mask beside it, each query sees
    itself and the `sliding_window - 1` keys before it (Mistral's local
    attention)."""
    query_positions = ops.arange(query_length) + query_start  # [Tq]
    key_positions = ops.arange(key_length)  # [Tk]
    distance = ops.abs(ops.expand_dims(query_positions, 1) - ops.expand_dims(key_positions, 0))
    return ops.expand_dims(distance < sliding_window, 0)


def alibi_slopes(num_heads):
    """ALiBi's per-head slopes (Press et al. 2022): for H a power of two the
    geometric sequence 2^(-8/H), 2^(-16/H), ..., 2^(-8); otherwise those of
    the power of two below H, then every other one of the next power's."""

    def powers_of_two(count):
        return [2.0 ** (-8.0 * (head + 1) / count) for head in range(count)]

    lower = 2 ** int(math.floor(math.log2(num_heads)))
    if lower == num_heads:
        return powers_of_two(num_heads)
    return powers_of_two(lower) + powers_of_two(2 * lower)[0::2][: num_heads - lower]


def alibi_bias(slopes, query_positions, key_positions):
    """`[1, H, Tq, Tk]` float32: `-slope_h * |i - j|` for query position i
    and key position j. Under a causal mask that is Press et al.'s
    `-slope * (i - j)`; without one the bias is symmetric, and a key's
    weight falls with its distance either way."""
    distance = ops.abs(
        ops.cast(query_positions[:, None] - key_positions[None, :], "float32")
    )  # [Tq, Tk]
    slopes = ops.convert_to_tensor(slopes, "float32")
    return -slopes[None, :, None, None] * distance[None, None]


def scaled_dot_product_attention(
    query, key, value, mask=None, dropout_layer=None, training=None, heads_first=False, bias=None
):
    """softmax(Q K^T / sqrt(d_k)) V, for all heads at once.

    With fewer key/value heads than query heads (grouped-query attention,
    Ainslie et al. 2023), each key/value head serves `H // H_kv` query heads
    in a row: query head h reads key/value head `h // (H // H_kv)`, as in
    Keras core's `GroupedQueryAttention`. The keys and values are read in
    place, never copied once per query head.

    Args:
        query: `[B, Tq, H, d_k]`.
        key: `[B, Tk, H_kv, d_k]`, or with `heads_first` `[B, H_kv, Tk, d_k]`;
            `H_kv` divides `H`.
        value: `[B, Tk, H_kv, d_v]`, or with `heads_first` `[B, H_kv, Tk, d_v]`.
        mask: optional boolean mask broadcastable to `[B, H, Tq, Tk]`.
        dropout_layer: optional dropout layer applied to the weights.
        training: passed to the dropout layer.
        bias: optional float32 tensor broadcastable to `[B, H, Tq, Tk]`,
            added to the scores before the softmax (ALiBi).
        heads_first: bool, the layout of `key` and `value`. A KV cache is
            kept heads first: the products then read it as it is, where the
            other layout would copy the whole cache into that order at every
            decoding step.

    Returns:
        `(context [B, Tq, H, d_v], weights [B, H, Tq, Tk])`, weights in the
        query's dtype.
    """
    batch_size, query_length = ops.shape(query)[0], ops.shape(query)[1]
    num_heads, depth = query.shape[2], query.shape[3]
    key_value_heads = key.shape[1 if heads_first else 2]
    groups = num_heads // key_value_heads
    # Step 3 of the explanation: divide by sqrt(d_k) so the softmax does not
    # saturate as d_k grows. Scaling the query first is cheaper (Tq*d_k values
    # instead of Tq*Tk) and the same up to rounding.
    query = query * ops.cast(1.0 / ops.sqrt(ops.cast(depth, "float32")), query.dtype)
    keys = "bhkd" if heads_first else "bkhd"
    if groups == 1:
        scores = ops.einsum(f"bqhd,{keys}->bhqk", query, key)  # [B, H, Tq, Tk]
    else:
        # [B, Tq, H, d_k] -> [B, Tq, H_kv, G, d_k]: the G query heads of a group.
        query = ops.reshape(query, (batch_size, query_length, key_value_heads, groups, depth))
        scores = ops.einsum(f"bqhgd,{keys}->bhgqk", query, key)  # [B, H_kv, G, Tq, Tk]
        scores = ops.reshape(scores, (batch_size, num_heads, query_length, -1))
    if bias is not None:
        scores = ops.cast(scores, "float32") + bias
    weights = masked_softmax(scores, mask)
    weights = ops.cast(weights, query.dtype)
    if dropout_layer is not None:
        weights = dropout_layer(weights, training=training)
    if groups == 1:
        context = ops.einsum(f"bhqk,{keys}->bqhd", weights, value)  # [B, Tq, H, d_v]
    else:
        grouped = ops.reshape(weights, (batch_size, key_value_heads, groups, query_length, -1))
        context = ops.einsum(f"bhgqk,{keys}->bqhgd", grouped, value)  # [B, Tq, H_kv, G, d_v]
        context = ops.reshape(context, (batch_size, query_length, num_heads, value.shape[-1]))
    return context, weights
