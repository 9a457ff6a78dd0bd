"""What self-attention and cross-attention share: heads, weighted sum, output,
and the options of today's attention (grouped-query heads, a sliding window,
an output gate).

Private to the package: `MultiHeadSelfAttention` and `MultiHeadCrossAttention`
differ only in where Q, K and V come from.
"""

import keras
from keras import ops

from keras_attention.layers._attention import scaled_dot_product_attention, window_mask
from keras_attention.layers._chunked_attention import chunked_attention
from keras_attention.layers.dropout import Dropout
from keras_attention.renamed import renamed_argument
from keras_attention.utils import (
    Layer,
    check_bool,
    check_positive_int,
    check_rate,
    clone_initializer,
)


class MultiHeadAttentionBase(Layer):
    """Heads, the scaled dot-product, concatenation and the output projection."""

    def __init__(
        self,
        num_heads,
        key_dim=None,
        value_dim=None,
        dropout=0.0,
        use_bias=True,
        chunk_size=None,
        num_key_value_heads=None,
        sliding_window=None,
        use_gate=False,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        sliding_window = renamed_argument(kwargs, "sliding_window", sliding_window)
        super().__init__(**kwargs)
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.num_key_value_heads, self.sliding_window, self.use_gate = check_attention_options(
            self.num_heads, num_key_value_heads, sliding_window, use_gate
        )
        self.key_dim = check_positive_int("key_dim", key_dim, allow_none=True)
        self.value_dim = check_positive_int("value_dim", value_dim, allow_none=True)
        self.dropout = check_rate("dropout", dropout)
        self.use_bias = bool(use_bias)
        self.chunk_size = check_positive_int("chunk_size", chunk_size, allow_none=True)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True
        self.attention_dropout = Dropout(
            self.dropout, dtype=self.dtype_policy, name="attention_dropout"
        )

    def _head_dims(self, model_dim):
        """(d_k, d_v) for an input of width `model_dim`."""
        key_dim = self.key_dim
        if key_dim is None:
            if model_dim % self.num_heads:
                raise ValueError(
                    "`num_heads` must divide the model width (the last "
                    "dimension of the input) when `key_dim` is not given. "
                    f"Received: num_heads={self.num_heads}, model width={model_dim}"
                )
            key_dim = model_dim // self.num_heads
        return key_dim, self.value_dim or key_dim

    def _dense(self, units, name):
        return keras.layers.Dense(
            units,
            use_bias=self.use_bias,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=clone_initializer(self.bias_initializer),
            dtype=self.dtype_policy,
            name=name,
        )

    @property
    def _key_value_heads(self):
        """H_kv: the key/value heads, `num_heads` unless grouped."""
        return self.num_key_value_heads or self.num_heads

    def _build_output_projection(self, query_shape):
        model_dim = query_shape[-1]
        # "Concatenate the heads and multiply by W^O" back to the model width.
        self.output_projection = self._dense(model_dim, "output_projection")
        self.output_projection.build((None, None, self.num_heads * self._value_dim))
        if self.use_gate:
            # Gated attention (Qiu et al. 2025, Keras core's `use_gate`): each
            # head's output is scaled by sigmoid(x W^G), read from the query's
            # own input, before W^O.
            self.gate_projection = self._dense(self.num_heads * self._value_dim, "gate_projection")
            self.gate_projection.build(query_shape)

    def _split_heads(self, x, depth, num_heads=None):
        """`[B, T, heads * d]` -> `[B, T, heads, d]` (no transpose needed)."""
        batch_size, length = ops.shape(x)[0], ops.shape(x)[1]
        return ops.reshape(x, (batch_size, length, num_heads or self.num_heads, depth))

    def _merge_heads(self, context, query_input):
        """`[B, Tq, H, d_v]` -> the output `[B, Tq, D]`: the heads side by
        side (gated, with `use_gate`), projected by W^O."""
        batch_size, length = ops.shape(context)[0], ops.shape(context)[1]
        context = ops.reshape(context, (batch_size, length, self.num_heads * self._value_dim))
        if self.use_gate:
            gate = ops.sigmoid(self.gate_projection(query_input))  # [B, Tq, H * d_v]
            context = context * ops.cast(gate, context.dtype)
        return self.output_projection(context)

    def _window_mask(self, query_length, key_length, query_start=0):
        """The sliding window's `[1, Tq, Tk]` mask, or None without one."""
        if self.sliding_window is None:
            return None
        return window_mask(query_length, key_length, self.sliding_window, query_start)

    def _attend(self, query_input, query, key, value, mask, training, heads_first=False, bias=None):
        """Weighted sum of V for every head, heads merged and projected.

        query_input `[B, Tq, D]` (what the queries were projected from),
        query `[B, Tq, H, d_k]`, key `[B, Tk, H_kv, d_k]`, value
        `[B, Tk, H_kv, d_v]` (with `heads_first`, `[B, H_kv, Tk, d]`: a KV
        cache), mask broadcastable to `[B, Tq, Tk]` or None, bias
        broadcastable to `[B, H, Tq, Tk]` or None.
        Returns `(output [B, Tq, D], weights [B, H, Tq, Tk])`.
        """
        if mask is not None:
            mask = ops.expand_dims(mask, axis=1)  # one mask for every head
        context, weights = scaled_dot_product_attention(
            query, key, value, mask, self.attention_dropout, training, heads_first, bias
        )
        return self._merge_heads(context, query_input), weights

    def _uses_chunks(self, return_attention_scores):
        """The blocked path, unless the weights themselves are asked for:
        they are the `[B, H, Tq, Tk]` tensor it avoids, so the dense path
        computes them (the output is the same up to rounding)."""
        return self.chunk_size is not None and not return_attention_scores

    def _attend_in_chunks(
        self,
        query_input,
        query,
        key,
        value,
        padding_mask,
        attention_mask,
        causal,
        training,
        alibi_slopes=None,
    ):
        """As `_attend`, in blocks of `chunk_size` keys and queries, with the
        masks apart (none of `[B, Tq, Tk]` size is made). Returns the output
        `[B, Tq, D]`."""
        rate = self.dropout if training else 0.0
        seed = None
        if rate > 0:  # a new draw each call, from the dropout layer's seed state
            seed = self.attention_dropout.draw_seed()
        # Each key/value head once per query head of its group: [B, Tk, H, d]
        # (linear in Tk; the blocks then read one head per query head).
        groups = self.num_heads // self._key_value_heads
        if groups > 1:
            key, value = ops.repeat(key, groups, axis=2), ops.repeat(value, groups, axis=2)
        context = chunked_attention(
            query,
            key,
            value,
            self.chunk_size,
            padding_mask=padding_mask,
            attention_mask=attention_mask,
            causal=causal,
            sliding_window=self.sliding_window,
            alibi_slopes=alibi_slopes,
            dropout_rate=rate,
            seed=seed,
        )
        return self._merge_heads(context, query_input)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "value_dim": self.value_dim,
                "dropout": self.dropout,
                "use_bias": self.use_bias,
                "chunk_size": self.chunk_size,
                "num_key_value_heads": self.num_key_value_heads,
                "sliding_window": self.sliding_window,
                "use_gate": self.use_gate,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config


def check_attention_options(num_heads, num_key_value_heads, sliding_window, use_gate):
    """The options of today's attention, checked: `num_key_value_heads` None
    (one per query head) or a positive int dividing `num_heads`,
    `sliding_window` None or a positive int, `use_gate` a bool."""
    check_positive_int("num_key_value_heads", num_key_value_heads, allow_none=True)
    if num_key_value_heads is not None and num_heads % num_key_value_heads:
        raise ValueError(
            "`num_key_value_heads` must divide `num_heads` (each key/value head "
            f"serves a whole group of query heads). Received: "
            f"num_key_value_heads={num_key_value_heads}, num_heads={num_heads}"
        )
    check_positive_int("sliding_window", sliding_window, allow_none=True)
    return num_key_value_heads, sliding_window, check_bool("use_gate", use_gate)
