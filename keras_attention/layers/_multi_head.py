"""What self-attention and cross-attention share: heads, weighted sum, output.

Private to the package: `MultiHeadSelfAttention` and `MultiHeadCrossAttention`
differ only in where Q, K and V come from.
"""

import keras
from keras import ops

from keras_attention.layers._attention import scaled_dot_product_attention
from keras_attention.layers._chunked_attention import chunked_attention
from keras_attention.utils import (
    Layer,
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
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.key_dim = check_positive_int("key_dim", key_dim, allow_none=True)
        self.value_dim = check_positive_int("value_dim", value_dim, allow_none=True)
        self.dropout = check_rate("dropout", dropout)
        self.use_bias = bool(use_bias)
        self.chunk_size = check_positive_int("chunk_size", chunk_size, allow_none=True)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True
        self.attention_dropout = keras.layers.Dropout(
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

    def _build_output_projection(self, model_dim):
        # "Concatenate the heads and multiply by W^O" back to the model width.
        self.output_projection = self._dense(model_dim, "output_projection")
        self.output_projection.build((None, None, self.num_heads * self._value_dim))

    def _split_heads(self, x, depth):
        """`[B, T, H * d]` -> `[B, T, H, d]` (no transpose needed)."""
        batch_size, length = ops.shape(x)[0], ops.shape(x)[1]
        return ops.reshape(x, (batch_size, length, self.num_heads, depth))

    def _attend(self, query, key, value, mask, training, heads_first=False):
        """Weighted sum of V for every head, heads merged and projected.

        query `[B, Tq, H, d_k]`, key `[B, Tk, H, d_k]`, value `[B, Tk, H, d_v]`
        (with `heads_first`, `[B, H, Tk, d]`: a KV cache), mask broadcastable
        to `[B, Tq, Tk]` or None.
        Returns `(output [B, Tq, D], weights [B, H, Tq, Tk])`.
        """
        if mask is not None:
            mask = ops.expand_dims(mask, axis=1)  # one mask for every head
        context, weights = scaled_dot_product_attention(
            query, key, value, mask, self.attention_dropout, training, heads_first
        )
        batch_size, length = ops.shape(context)[0], ops.shape(context)[1]
        # [B, Tq, H, d_v] -> [B, Tq, H * d_v]: the heads side by side.
        context = ops.reshape(context, (batch_size, length, self.num_heads * self._value_dim))
        return self.output_projection(context), weights

    def _uses_chunks(self, return_attention_scores):
        """The blocked path, unless the weights themselves are asked for:
        they are the `[B, H, Tq, Tk]` tensor it avoids, so the dense path
        computes them (the output is the same up to rounding)."""
        return self.chunk_size is not None and not return_attention_scores

    def _attend_in_chunks(self, query, key, value, padding_mask, attention_mask, causal, training):
        """As `_attend`, in blocks of `chunk_size` keys and queries, with the
        masks apart (none of `[B, Tq, Tk]` size is made). Returns the output
        `[B, Tq, D]`."""
        rate = self.dropout if training else 0.0
        seed = None
        if rate > 0:  # a new draw each call, from the dropout layer's seed state
            seed_state = self.attention_dropout.seed_generator
            seed = keras.random.randint((), 0, 2**31 - 1, dtype="int32", seed=seed_state)
        context = chunked_attention(
            query,
            key,
            value,
            self.chunk_size,
            padding_mask=padding_mask,
            attention_mask=attention_mask,
            causal=causal,
            dropout_rate=rate,
            seed=seed,
        )
        batch_size, length = ops.shape(context)[0], ops.shape(context)[1]
        context = ops.reshape(context, (batch_size, length, self.num_heads * self._value_dim))
        return self.output_projection(context)

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
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config
