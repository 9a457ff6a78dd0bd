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
diagonal are skipped, about half of the work; with a sliding window
(`sliding_window=W`) the blocks wholly outside it are, so time grows as T * W,
not T^2.

Dropout on the weights draws its keep/drop decisions from a hash of the
seed, the batch row, the head, the query and the key positions, so the
backward pass draws the same ones again without storing them. Each weight is
kept with probability `1 - rate` and scaled by `1 / (1 - rate)`. Under XLA
and on JAX the dense path's dropout (`_dropout.Dropout`) hashes the same
positions the same way, so for one seed both paths drop the same weights.
"""

import keras
import numpy as np
from keras import ops

from keras_attention.layers._attention import alibi_bias
from keras_attention.layers.dropout import hashed_bits, keep_mask
from keras_attention.utils import NEG_INF


def chunked_attention(
    query,
    key,
    value,
    chunk_size,
    padding_mask=None,
    attention_mask=None,
    causal=False,
    sliding_window=None,
    alibi_slopes=None,
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
        sliding_window: optional int, query i reads keys j with |i - j| <
            `sliding_window` only.
        alibi_slopes: optional list of H floats: ALiBi, `-slope_h * |i - j|`
            added to each block's scores (computed block by block).
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
    # Which masks there are is known when the graph is built. Causal alone
    # masks only the blocks on the diagonal (the padded keys come after
    # every real query, so causal hides them too); any other mask, or padded
    # keys without causal, masks every block.
    padded_keys = not isinstance(key_pad, int) or key_pad > 0
    mask_every_block = (
        padding_mask is not None
        or attention_mask is not None
        or sliding_window is not None
        or (padded_keys and not causal)
    )
    lower_triangle = ops.arange(chunk_size)[:, None] >= ops.arange(chunk_size)[None, :]
    real_key = ops.ones((batch_size, key_length), "bool") if padding_mask is None else padding_mask
    real_key = ops.pad(ops.cast(real_key, "bool"), [[0, 0], [0, key_pad]])  # [B, Tk']
    if attention_mask is not None:
        attention_mask = ops.pad(
            ops.cast(attention_mask, "bool"), [[0, 0], [0, query_pad], [0, key_pad]]
        )
    keep = 1.0 - dropout_rate

    def heads_first(x, amount):
        """`[B, T, H, d]` -> float32 `[B, H, T + amount, d]`, padded with zeros."""
        x = ops.pad(ops.cast(x, "float32"), [[0, 0], [0, amount], [0, 0], [0, 0]])
        return ops.transpose(x, (0, 2, 1, 3))

    def block(x, index):  # block `index` of `x [B, H, T', d]` along T
        size = [batch_size, num_heads, chunk_size, ops.shape(x)[3]]
        return ops.slice(x, [0, 0, index * chunk_size, 0], size)

    def row_block(x, index):  # block `index` of `x [B, H, T']` along T
        return ops.slice(x, [0, 0, index * chunk_size], [batch_size, num_heads, chunk_size])

    def positions(index):  # `[c]`: the positions of block `index`
        return index * chunk_size + ops.arange(chunk_size)

    def block_mask(query_block, key_block):
        """`[B, 1, c, c]`: True where a query of the block may read a key."""
        mask = ops.slice(real_key, [0, key_block * chunk_size], [batch_size, chunk_size])
        mask = mask[:, None, None, :]
        query_positions = positions(query_block)[:, None]
        key_positions = positions(key_block)[None, :]
        if causal:
            mask = mask & (query_positions >= key_positions)[None, None]
        if sliding_window is not None:
            mask = mask & (ops.abs(query_positions - key_positions) < sliding_window)[None, None]
        if attention_mask is not None:
            start = [0, query_block * chunk_size, key_block * chunk_size]
            columns = ops.slice(attention_mask, start, [batch_size, chunk_size, chunk_size])
            mask = mask & columns[:, None]
        return mask

    def dropout_scale(query_block, key_block):
        """`[B, H, c, c]`: 0 for a dropped weight, 1 / (1 - rate) for a kept one."""
        bits = hashed_bits(
            seed,
            [
                ops.arange(batch_size),
                ops.arange(num_heads),
                positions(query_block),
                positions(key_block),
            ],
        )
        return ops.cast(keep_mask(bits, dropout_rate), "float32") / keep

    def reach(block_index, blocks):
        """`(first, last + 1)`: the blocks of the other axis that hold a
        position within the window of some position of block `block_index`."""
        reach = sliding_window - 1  # the farthest a key may be from its query
        first = ops.maximum((block_index * chunk_size - reach) // chunk_size, 0)
        last = ((block_index + 1) * chunk_size - 1 + reach) // chunk_size
        return first, ops.minimum(last + 1, blocks)

    def key_range(query_block):
        """`(first, last + 1)`: the key blocks a query block reads, up to the
        diagonal if causal, those within the window if there is one."""
        first, end = (0, key_blocks) if sliding_window is None else reach(query_block, key_blocks)
        if causal:
            end = ops.minimum(end, query_block + 1)
        return first, end

    def query_range(key_block):
        """`(first, last + 1)`: the query blocks that read a key block."""
        first, end = (0, query_blocks) if sliding_window is None else reach(key_block, query_blocks)
        if causal:  # earlier query blocks do not see it
            first = ops.maximum(first, key_block)
        return first, end

    def block_scores(query_block, key_block, scaled_query, key):
        """`[B, H, c, c]` scores, NEG_INF where masked: exp() of it is
        exactly 0 beside any real score, so no mask is multiplied in."""
        q, k = block(scaled_query, query_block), block(key, key_block)
        scores = ops.einsum("bhqd,bhkd->bhqk", q, k)
        if alibi_slopes is not None:
            scores = scores + alibi_bias(alibi_slopes, positions(query_block), positions(key_block))
        if mask_every_block:
            return ops.where(block_mask(query_block, key_block), scores, NEG_INF)
        if causal:
            return ops.cond(
                query_block == key_block,
                lambda: ops.where(lower_triangle[None, None], scores, NEG_INF),
                lambda: scores,
            )
        return scores

    dtypes = (query.dtype, key.dtype, value.dtype)

    @ops.custom_gradient
    def attention(query, key, value):
        scale = 1.0 / np.sqrt(float(query.shape[-1]))
        scaled_query = heads_first(query, query_pad) * scale  # [B, H, Tq', d_k]
        key = heads_first(key, key_pad)  # [B, H, Tk', d_k]
        value = heads_first(value, key_pad)  # [B, H, Tk', d_v]

        def forward_block(query_block, outputs):
            output, log_sum_exp = outputs

            def read_keys(key_block, state):
                maximum, total, weighted = state
                scores = block_scores(query_block, key_block, scaled_query, key)
                new_maximum = ops.maximum(maximum, ops.max(scores, axis=-1))  # [B, H, c]
                weights = ops.exp(scores - new_maximum[..., None])
                rescale = ops.exp(maximum - new_maximum)  # [B, H, c]
                total = total * rescale + ops.sum(weights, axis=-1)
                if dropout_rate > 0:
                    weights = weights * dropout_scale(query_block, key_block)
                weighted = weighted * rescale[..., None] + ops.matmul(
                    weights, block(value, key_block)
                )
                return new_maximum, total, weighted

            start = (
                ops.full((batch_size, num_heads, chunk_size), NEG_INF, "float32"),
                ops.zeros((batch_size, num_heads, chunk_size), "float32"),
                ops.zeros((batch_size, num_heads, chunk_size, value_dim), "float32"),
            )
            first, end = key_range(query_block)
            maximum, total, weighted = blocks_in_turn(first, end, read_keys, start)
            # A query that met no real key (its maximum is still NEG_INF, and
            # its sums count the masked keys) reads nothing: zeros, and a
            # log-sum-exp of +inf, so that the backward pass gives its
            # weights 0 too.
            has_keys = maximum > NEG_INF / 2  # [B, H, c]
            safe_total = ops.where(has_keys, total, 1.0)
            block_output = ops.where(has_keys[..., None], weighted / safe_total[..., None], 0.0)
            block_lse = ops.where(has_keys, maximum + ops.log(safe_total), np.inf)
            output = with_block(output, query_block, block_output)
            log_sum_exp = with_block(log_sum_exp, query_block, block_lse)
            return output, log_sum_exp

        per_block = (batch_size, num_heads, chunk_size)  # a block is [B, H, c, ...]
        start = (
            zero_blocks(query_blocks, (*per_block, value_dim)),
            zero_blocks(query_blocks, per_block),
        )
        output, log_sum_exp = blocks_in_turn(0, query_blocks, forward_block, start)
        output = joined(output, heads_first=False)  # [B, Tq', H, d_v]
        log_sum_exp = joined(log_sum_exp)  # [B, H, Tq']

        def gradient(*args, upstream=None):
            if upstream is None:  # TensorFlow passes it positionally, JAX by name
                (upstream,) = args
            # sum_k P_qk dP_qk per query = dO_q . O_q (also with dropout).
            row_dot = ops.sum(ops.cast(upstream, "float32") * output[:, :query_length], axis=-1)
            row_dot = ops.pad(ops.transpose(row_dot, (0, 2, 1)), [[0, 0], [0, 0], [0, query_pad]])
            upstream = heads_first(upstream, query_pad)  # [B, H, Tq', d_v]

            def backward_keys(key_block, gradients):
                d_query, d_key, d_value = gradients
                k, v = block(key, key_block), block(value, key_block)

                def read_queries(query_block, state):
                    d_query, d_k, d_v = state
                    scores = block_scores(query_block, key_block, scaled_query, key)
                    lse = row_block(log_sum_exp, query_block)
                    weights = ops.exp(scores - lse[..., None])  # [B, H, c, c]
                    d_out = block(upstream, query_block)  # [B, H, c, d_v]
                    d_weights = ops.einsum("bhqd,bhkd->bhqk", d_out, v)  # [B, H, c, c]
                    dropped = weights
                    if dropout_rate > 0:
                        kept = dropout_scale(query_block, key_block)
                        dropped, d_weights = weights * kept, d_weights * kept
                    d_v = d_v + ops.einsum("bhqk,bhqd->bhkd", dropped, d_out)
                    dots = row_block(row_dot, query_block)
                    d_scores = weights * (d_weights - dots[..., None])  # [B, H, c, c]
                    q = block(scaled_query, query_block)
                    d_k = d_k + ops.einsum("bhqk,bhqd->bhkd", d_scores, q)
                    d_q = block_at(d_query, query_block) + ops.matmul(d_scores, k)
                    return with_block(d_query, query_block, d_q), d_k, d_v

                first, end = query_range(key_block)
                start = (d_query, ops.zeros_like(k), ops.zeros_like(v))
                d_query, d_k, d_v = blocks_in_turn(first, end, read_queries, start)
                d_key = with_block(d_key, key_block, d_k)
                d_value = with_block(d_value, key_block, d_v)
                return d_query, d_key, d_value

            start = (
                zero_blocks(query_blocks, (*per_block, scaled_query.shape[-1])),
                zero_blocks(key_blocks, (*per_block, key.shape[-1])),
                zero_blocks(key_blocks, (*per_block, value_dim)),
            )
            d_query, d_key, d_value = blocks_in_turn(0, key_blocks, backward_keys, start)

            d_query = joined(d_query, heads_first=False) * scale  # [B, Tq', H, d_k]
            d_key = joined(d_key, heads_first=False)  # [B, Tk', H, d_k]
            d_value = joined(d_value, heads_first=False)
            return (
                ops.cast(d_query[:, :query_length], dtypes[0]),
                ops.cast(d_key[:, :key_length], dtypes[1]),
                ops.cast(d_value[:, :key_length], dtypes[2]),
            )

        return output[:, :query_length], gradient

    context = attention(query, key, value)
    return ops.cast(context, dtypes[0])


def blocks_in_turn(lower, upper, body, state):
    """`ops.fori_loop`, one iteration at a time.

    TensorFlow's while loops run up to ten iterations at once
    (`parallel_iterations=10`): here each holds blocks of scores, so the
    nested loops held many at a time (measured, a layer's forward and
    backward pass at T=4096 in blocks of 1,024: 430 MiB at its peak, against
    86 MiB one at a time, in about the same time). JAX's loops already run
    in turn."""
    if keras.backend.backend() != "tensorflow":
        return ops.fori_loop(lower, upper, body, state)
    import tensorflow as tf

    _, state = tf.while_loop(
        lambda index, state: index < upper,
        lambda index, state: (index + 1, body(index, state)),
        (lower, state),
        parallel_iterations=1,
    )
    return state


def zero_blocks(count, block_shape):
    """`count` blocks of zeros, each of `block_shape` (`[B, H, c, ...]`),
    read and written one at a time (`block_at`, `with_block`), then
    `joined` along T.

    On TensorFlow they are a TensorArray. Without XLA, `slice_update` of one
    block of a `[B, H, T, d]` tensor copies the whole tensor at every call,
    so the loops paid time in proportion to T for every pair of blocks
    (measured, forward and backward of causal attention with a window of
    512 at T = 16,384: a third of the time). A TensorArray writes its one
    element. On JAX, always compiled, an array is updated in place."""
    zeros = ops.zeros((count, *block_shape), "float32")
    if keras.backend.backend() != "tensorflow":
        return zeros
    import tensorflow as tf

    return tf.TensorArray(tf.float32, size=count, clear_after_read=False).unstack(zeros)


def block_at(blocks, index):
    if keras.backend.backend() == "tensorflow":
        return blocks.read(index)
    return blocks[index]


def with_block(blocks, index, value):
    """`blocks` with block `index` replaced by `value`."""
    if keras.backend.backend() == "tensorflow":
        return blocks.write(index, value)
    return ops.slice_update(blocks, [index] + [0] * len(value.shape), value[None])


def joined(blocks, heads_first=True):
    """The blocks side by side along T: `[B, H, count * c, ...]`, or with
    `heads_first=False` `[B, count * c, H, ...]` (one transpose either way)."""
    if keras.backend.backend() == "tensorflow":
        blocks = blocks.stack()  # [count, B, H, c, ...]
    rest = tuple(range(4, len(blocks.shape)))
    if heads_first:
        blocks = ops.transpose(blocks, (1, 2, 0, 3, *rest))  # [B, H, count, c, ...]
        shape = ops.shape(blocks)
        return ops.reshape(blocks, (shape[0], shape[1], shape[2] * shape[3], *shape[4:]))
    blocks = ops.transpose(blocks, (1, 0, 3, 2, *rest))  # [B, count, c, H, ...]
    shape = ops.shape(blocks)
    return ops.reshape(blocks, (shape[0], shape[1] * shape[2], *shape[3:]))
