import keras
from keras import ops

from keras_attention.layers._attention import check_mask, key_mask, merge_masks
from keras_attention.layers._multi_head import MultiHeadAttentionBase


@keras.saving.register_keras_serializable(package="keras_attention")
class MultiHeadCrossAttention(MultiHeadAttentionBase):
    """Multi-head encoder-decoder attention ("Attention Is All You Need").

    The queries come from the decoder (`query`); the keys and values come from
    the encoder output (`context`), projected by one fused K/V projection. As
    the context does not change while decoding, its keys and values can be
    computed once with `context_cache()` and passed back on every step.

    Args:
        num_heads: int, number of attention heads.
        key_dim: int, size of each head's query and key. Defaults to
            `query_width // num_heads`, which then must divide evenly.
        value_dim: int, size of each head's value. Defaults to `key_dim`.
        dropout: float in [0, 1), dropout on the attention weights. Default 0.
        use_bias: bool, whether the projections have biases. Default True.
        chunk_size: optional int: attention in blocks of that many queries
            and keys, in memory linear in the lengths; see
            `MultiHeadSelfAttention`. Default None (dense).
        num_key_value_heads, sliding_window, use_gate: grouped-query heads, a
            sliding window (query i reads context positions j with
            |i - j| < W) and an output gate read from `query`; see
            `MultiHeadSelfAttention`.
        kernel_initializer, bias_initializer: initializers of the projections.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        query: `[B, Tq, D]`, the decoder's sequence.
        context: `[B, Tk, Dc]`, the encoder's output. May be None when
            `context_cache` is given.
        context_mask: optional bool `[B, Tk]`, True at real context tokens.
            Filled in from the Keras implicit mask of `context` when not given.
        attention_mask: optional bool `[B, Tq, Tk]`.
        context_cache: optional `(key, value)` from `context_cache(context)`.
        training: bool, whether dropout is active.
        return_attention_scores: bool, also return the weights `[B, H, Tq, Tk]`.

    Returns:
        `output [B, Tq, D]`, and the weights if `return_attention_scores`.

    Example:

    >>> decoder_x = keras.random.normal((2, 3, 16))
    >>> encoder_out = keras.random.normal((2, 7, 16))
    >>> layer = MultiHeadCrossAttention(num_heads=4)
    >>> tuple(layer(decoder_x, encoder_out).shape)
    (2, 3, 16)
    """

    def build(self, query_shape, context_shape=None):
        model_dim = query_shape[-1]
        self._key_dim, self._value_dim = self._head_dims(model_dim)
        self.query_projection = self._dense(self.num_heads * self._key_dim, "query_projection")
        self.query_projection.build(query_shape)
        # W^K and W^V side by side: one matrix multiplication over the context.
        self.key_value_projection = self._dense(
            self._key_value_heads * (self._key_dim + self._value_dim), "key_value_projection"
        )
        context_dim = model_dim if context_shape is None else context_shape[-1]
        self.key_value_projection.build((None, None, context_dim))
        self._build_output_projection(query_shape)

    def call(
        self,
        query,
        context=None,
        context_mask=None,
        attention_mask=None,
        context_cache=None,
        training=None,
        return_attention_scores=False,
    ):
        if context_cache is None:
            if context is None:
                raise ValueError("Pass `context` (or `context_cache`). Received: context=None")
            context_cache = self.context_cache(context)
        key, value = context_cache  # [B, Tk, H_kv, d_k], [B, Tk, H_kv, d_v]
        batch_size, key_length = key.shape[0], key.shape[1]
        context_mask = check_mask("context_mask", context_mask, 2, (batch_size, key_length))
        attention_mask = check_mask(
            "attention_mask", attention_mask, 3, (batch_size, query.shape[1], key_length)
        )
        queries = self._split_heads(self.query_projection(query), self._key_dim)
        if self._uses_chunks(return_attention_scores):
            return self._attend_in_chunks(
                query, queries, key, value, context_mask, attention_mask, False, training
            )
        window = self._window_mask(ops.shape(query)[1], ops.shape(key)[1])
        mask = merge_masks(key_mask(context_mask, attention_mask), window)
        output, weights = self._attend(query, queries, key, value, mask, training)
        if return_attention_scores:
            return output, weights
        return output

    def context_cache(self, context):
        """The keys and values of `context`, `([B, Tk, H_kv, d_k], [B, Tk, H_kv, d_v])`."""
        key_value = self.key_value_projection(context)
        heads = self._key_value_heads
        key, value = ops.split(key_value, [heads * self._key_dim], axis=-1)
        return (
            self._split_heads(key, self._key_dim, heads),
            self._split_heads(value, self._value_dim, heads),
        )

    def compute_output_shape(self, query_shape, context_shape=None):
        return tuple(query_shape)
