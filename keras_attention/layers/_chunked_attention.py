"""Exact attention in blocks: memory that grows linearly with the length.

Private to the package; `MultiHeadSelfAttention(chunk_size=...)` and
`MultiHeadCrossAttention(chunk_size=...)` use it.

Dense attention holds the scores of every query against every key,
`[B, H, Tq, Tk]`. Here the queries and keys are cut into blocks of
`chunk_size`, and for each block of queries the key blocks are read one
after another, keeping per query a running maximum `m`, a running sum of
`exp(score - m)` and a running weighted sum of the values, each rescaled
when the maximum grows (the online softmax of Milakov & Gimelshein 2018,
used by Rabe & Staats 2021 and FlashAttention, Dao et al. 2022). The result
is the same softmax(Q K^T / sqrt(d_k)) V, up to rounding.

The backward pass is written by hand (a custom gradient): it keeps only the
output and each query's log-sum-exp, and recomputes each block's scores
instead of storing them, so forward plus backward need O(T * chunk_size)
memory per head, not O(T^2). With `causal=True` the blocks wholly above the
diagonal are skipped, about half of the work.

Dropout on the weights draws its keep/drop decisions from a hash of the
seed, the batch row, the head, the query and the key positions, so the
backward pass draws the same ones again without storing them. Each weight is
kept with probability `1 - rate` and scaled by `1 / (1 - rate)`, the same
distribution as the dense path's `keras.layers.Dropout`, but other draws.
"""

import numpy as np
from keras import ops

from keras_attention.utils import NEG_INF, hash_uint32, uint32


def chunked_attention(
    query,
    key,
    value,
    chunk_size,
    padding_mask=None,
    attention_mask=None,
    causal=False,
    dropout_rate=0.0,
    seed=None,
):
    """softmax(Q K^T / sqrt(d_k)) V, computed block by block.

    Args:
        query: `[B, Tq, H, d_k]`.
        key: `[B, Tk, H, d_k]`.
        value: `[B, Tk, H, d_v]`.
        chunk_size: int, queries and keys per block.
        padding_mask: optional boolean `[B, Tk]`, True at a real key.
        attention_mask: optional boolean `[B, Tq, Tk]`, True where query i
            may read key j.
        causal: bool, query i reads keys j <= i only (Tq must equal Tk).
        dropout_rate: float in [0, 1), dropout on the weights.
        seed: int32 scalar tensor, the dropout draws' seed (needed when
            `dropout_rate > 0`).

    Returns:
        The context `[B, Tq, H, d_v]`, in the query's dtype. A query whose
        keys are all masked gets zeros.
    """
    batch_size, query_length = ops.shape(query)[0], ops.shape(query)[1]
    key_length = ops.shape(key)[1]
    num_heads, value_dim = ops.shape(value)[2], ops.shape(value)[3]
    # Pad both lengths to whole blocks; the padded keys are masked out and
    # the padded queries dropped at the end.
    query_blocks = -(-query_length // chunk_size)
    key_blocks = -(-key_length // chunk_size)
    query_pad = query_blocks * chunk_size - query_length
    key_pad = key_blocks * chunk_size - key_length
    real_key = ops.ones((batch_size, key_length), "bool") if padding_mask is None else padding_mask
    real_key = ops.pad(ops.cast(real_key, "bool"), [[0, 0], [0, key_pad]])  # [B, Tk']
    if attention_mask is not None:
        attention_mask = ops.pad(
            ops.cast(attention_mask, "bool"), [[0, 0], [0, query_pad], [0, key_pad]]
        )
    keep = 1.0 - dropout_rate
    if dropout_rate > 0:
        seed = ops.cast(seed, "uint32")

    def pad_length(x, amount):
        return ops.pad(ops.cast(x, "float32"), [[0, 0], [0, amount], [0, 0], [0, 0]])

    def block(x, index):  # block `index` of `x [B, T', ...]` along T
        start = [0, index * chunk_size] + [0] * (len(x.shape) - 2)
        size = [batch_size, chunk_size] + list(ops.shape(x)[2:])
        return ops.slice(x, start, size)

    def column_block(x, index):  # block `index` of `x [B, H, T']` along T
        return ops.slice(x, [0, 0, index * chunk_size], [batch_size, num_heads, chunk_size])

    def block_mask(query_block, key_block):
        """`[B, 1, c, c]`: True where a query of the block may read a key."""
        mask = block(real_key, key_block)[:, None, None, :]
        query_positions = query_block * chunk_size + ops.arange(chunk_size)
        key_positions = key_block * chunk_size + ops.arange(chunk_size)
        if causal:
            mask = mask & (query_positions[:, None] >= key_positions[None, :])[None, None]
        if attention_mask is not None:
            rows = block(attention_mask, query_block)  # [B, c, Tk']
            columns = ops.slice(
                rows, [0, 0, key_block * chunk_size], [batch_size, chunk_size, chunk_size]
            )
            mask = mask & columns[:, None]
        return mask

    def dropout_scale(query_block, key_block):
        """`[B, H, c, c]`: 0 for a dropped weight, 1 / (1 - rate) for a kept one."""
        rows = ops.cast(ops.arange(batch_size * num_heads), "uint32")
        row_keys = hash_uint32(ops.bitwise_xor(rows, seed))  # [B * H]
        query_positions = ops.cast(query_block * chunk_size + ops.arange(chunk_size), "uint32")
        key_positions = ops.cast(key_block * chunk_size + ops.arange(chunk_size), "uint32")
        query_keys = hash_uint32(ops.bitwise_xor(row_keys[:, None], query_positions[None, :]))
        bits = hash_uint32(ops.bitwise_xor(query_keys[:, :, None], key_positions[None, None, :]))
        uniform = ops.cast(ops.right_shift(bits, uint32(8)), "float32") / float(1 << 24)
        kept = ops.cast(uniform < keep, "float32") / keep
        return ops.reshape(kept, (batch_size, num_heads, chunk_size, chunk_size))

    def key_range(query_block):
        """The key blocks a query block reads: up to the diagonal if causal."""
        return ops.minimum(query_block + 1, key_blocks) if causal else key_blocks

    def scores_and_mask(query_block, key_block, scaled_query, key):
        q = block(scaled_query, query_block)  # [B, c, H, d_k]
        k = block(key, key_block)  # [B, c, H, d_k]
        scores = ops.einsum("bqhd,bkhd->bhqk", q, k)  # [B, H, c, c]
        mask = block_mask(query_block, key_block)
        return ops.where(mask, scores, NEG_INF), mask

    dtypes = (query.dtype, key.dtype, value.dtype)

    @ops.custom_gradient
    def attention(query, key, value):
        scale = 1.0 / np.sqrt(float(query.shape[-1]))
        scaled_query = pad_length(query, query_pad) * scale  # [B, Tq', H, d_k]
        key = pad_length(key, key_pad)  # [B, Tk', H, d_k]
        value = pad_length(value, key_pad)  # [B, Tk', H, d_v]

        def forward_block(query_block, outputs):
            output, log_sum_exp = outputs

            def read_keys(key_block, state):
                maximum, total, weighted = state
                scores, mask = scores_and_mask(query_block, key_block, scaled_query, key)
                new_maximum = ops.maximum(maximum, ops.max(scores, axis=-1))  # [B, H, c]
                # Masked keys give exactly 0, also in a row with no real key yet.
                weights = ops.exp(scores - new_maximum[..., None]) * ops.cast(mask, "float32")
                rescale = ops.exp(maximum - new_maximum)  # [B, H, c]
                total = total * rescale + ops.sum(weights, axis=-1)
                if dropout_rate > 0:
                    weights = weights * dropout_scale(query_block, key_block)
                v = block(value, key_block)  # [B, c, H, d_v]
                weighted = weighted * ops.transpose(rescale, (0, 2, 1))[..., None] + ops.einsum(
                    "bhqk,bkhd->bqhd", weights, v
                )
                return new_maximum, total, weighted

            start = (
                ops.full((batch_size, num_heads, chunk_size), NEG_INF, "float32"),
                ops.zeros((batch_size, num_heads, chunk_size), "float32"),
                ops.zeros((batch_size, chunk_size, num_heads, value_dim), "float32"),
            )
            maximum, total, weighted = ops.fori_loop(0, key_range(query_block), read_keys, start)
            # A query with no real key reads nothing: zeros, and a log-sum-exp
            # of +inf so that the backward pass gives its weights 0 too.
            has_keys = total > 0  # [B, H, c]
            safe_total = ops.where(has_keys, total, 1.0)
            block_output = weighted / ops.transpose(safe_total, (0, 2, 1))[..., None]
            block_lse = ops.where(has_keys, maximum + ops.log(safe_total), np.inf)
            output = ops.slice_update(output, [0, query_block * chunk_size, 0, 0], block_output)
            log_sum_exp = ops.slice_update(log_sum_exp, [0, 0, query_block * chunk_size], block_lse)
            return output, log_sum_exp

        padded_queries = query_blocks * chunk_size
        start = (
            ops.zeros((batch_size, padded_queries, num_heads, value_dim), "float32"),
            ops.zeros((batch_size, num_heads, padded_queries), "float32"),
        )
        output, log_sum_exp = ops.fori_loop(0, query_blocks, forward_block, start)

        def gradient(*args, upstream=None):
            if upstream is None:  # TensorFlow passes it positionally, JAX by name
                (upstream,) = args
            upstream = ops.pad(
                ops.cast(upstream, "float32"), [[0, 0], [0, query_pad], [0, 0], [0, 0]]
            )
            # sum_k P_qk dP_qk per query = dO_q . O_q (also with dropout).
            row_dot = ops.transpose(ops.sum(upstream * output, axis=-1), (0, 2, 1))  # [B, H, Tq']

            def backward_keys(key_block, gradients):
                d_query, d_key, d_value = gradients

                def read_queries(query_block, state):
                    d_query, d_k, d_v = state
                    scores, mask = scores_and_mask(query_block, key_block, scaled_query, key)
                    lse = column_block(log_sum_exp, query_block)
                    weights = ops.exp(scores - lse[..., None]) * ops.cast(mask, "float32")
                    d_out = block(upstream, query_block)  # [B, c, H, d_v]
                    v = block(value, key_block)
                    d_weights = ops.einsum("bqhd,bkhd->bhqk", d_out, v)  # [B, H, c, c]
                    dropped = weights
                    if dropout_rate > 0:
                        scale_block = dropout_scale(query_block, key_block)
                        dropped = weights * scale_block
                        d_weights = d_weights * scale_block
                    d_v = d_v + ops.einsum("bhqk,bqhd->bkhd", dropped, d_out)
                    dots = column_block(row_dot, query_block)
                    d_scores = weights * (d_weights - dots[..., None])  # [B, H, c, c]
                    d_k = d_k + ops.einsum(
                        "bhqk,bqhd->bkhd", d_scores, block(scaled_query, query_block)
                    )
                    start = [0, query_block * chunk_size, 0, 0]
                    d_q = block(d_query, query_block) + ops.einsum(
                        "bhqk,bkhd->bqhd", d_scores, block(key, key_block)
                    )
                    return ops.slice_update(d_query, start, d_q), d_k, d_v

                first = key_block if causal else 0  # earlier query blocks do not see it
                start = (
                    d_query,
                    ops.zeros((batch_size, chunk_size, num_heads, ops.shape(key)[-1]), "float32"),
                    ops.zeros((batch_size, chunk_size, num_heads, value_dim), "float32"),
                )
                d_query, d_k, d_v = ops.fori_loop(first, query_blocks, read_queries, start)
                where = [0, key_block * chunk_size, 0, 0]
                return (
                    d_query,
                    ops.slice_update(d_key, where, d_k),
                    ops.slice_update(d_value, where, d_v),
                )

            start = (ops.zeros_like(scaled_query), ops.zeros_like(key), ops.zeros_like(value))
            d_query, d_key, d_value = ops.fori_loop(0, key_blocks, backward_keys, start)
            return (
                ops.cast(d_query[:, :query_length] * scale, dtypes[0]),
                ops.cast(d_key[:, :key_length], dtypes[1]),
                ops.cast(d_value[:, :key_length], dtypes[2]),
            )

        return ops.cast(output[:, :query_length], dtypes[0]), gradient

    return attention(query, key, value)
