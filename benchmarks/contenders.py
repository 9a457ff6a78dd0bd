"""The blocks we race: ours, KerasHub's, and one made of Keras core layers.

Every contender is the same network: post-norm ("Add & Norm" after each
sub-layer, as in the paper), ReLU feed-forward, layer-norm epsilon 1e-5, and
dropout at the same rate in the same three places (the attention weights,
each sub-layer's output), as KerasHub's blocks have it. Only the
implementation differs, so one FLOP count holds for all of them.
"""

import keras
import keras_hub

from keras_attention.layers import MultiHeadSelfAttention, TransformerBlock, TransformerDecoderBlock

EPSILON = 1e-5


class KerasCoreBlock(keras.layers.Layer):
    """Encoder block (or with `cross_attention`, decoder block) from
    `keras.layers.MultiHeadAttention`, what a user of Keras core writes (as
    in the tensorflow.org Transformer tutorial)."""

    def __init__(self, num_heads, intermediate_dim, dropout, cross_attention=False, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.rate = dropout
        self.cross_attention = cross_attention

    def build(self, x_shape, context_shape=None):
        model_dim = x_shape[-1]
        key_dim = model_dim // self.num_heads
        count = 2 if self.cross_attention else 1
        self.attentions = [
            keras.layers.MultiHeadAttention(self.num_heads, key_dim, dropout=self.rate)
            for _ in range(count)
        ]
        count += 1  # and the feed-forward network
        self.norms = [keras.layers.LayerNormalization(epsilon=EPSILON) for _ in range(count)]
        self.dropouts = [keras.layers.Dropout(self.rate) for _ in range(count)]
        self.intermediate = keras.layers.Dense(self.intermediate_dim, activation="relu")
        self.output_dense = keras.layers.Dense(model_dim)

    def call(self, x, context=None, training=None):
        def add_and_norm(i, y):
            return self.norms[i](x + self.dropouts[i](y, training=training))

        # The decoder's self-attention is causal; the encoder's is not.
        x = add_and_norm(0, self.attentions[0](x, x, use_causal_mask=self.cross_attention))
        if self.cross_attention:
            x = add_and_norm(1, self.attentions[1](x, context))
        return add_and_norm(-1, self.output_dense(self.intermediate(x)))


class KerasCoreSelfAttention(keras.layers.MultiHeadAttention):
    """`keras.layers.MultiHeadAttention` called as self-attention, `layer(x)`."""

    def __init__(self, num_heads, key_dim, causal=False, **kwargs):
        super().__init__(num_heads, key_dim, **kwargs)
        self.causal = causal

    def build(self, x_shape):
        super().build(x_shape, x_shape)

    def call(self, x, training=None):
        return super().call(x, x, training=training, use_causal_mask=self.causal)


# kind -> (ours, KerasHub's)
BLOCKS = {
    "encoder": (TransformerBlock, keras_hub.layers.TransformerEncoder),
    "decoder": (TransformerDecoderBlock, keras_hub.layers.TransformerDecoder),
}


def block(kind, contender, num_heads, intermediate_dim, dropout):
    """One `kind` ("encoder" or "decoder") block of `contender`."""
    ours, keras_hubs = BLOCKS[kind]
    if contender == "keras_attention":
        return ours(
            num_heads,
            intermediate_dim,
            dropout,
            attention_dropout=dropout,
            layer_norm_epsilon=EPSILON,
        )
    if contender == "keras_hub":
        return keras_hubs(intermediate_dim, num_heads, dropout=dropout, layer_norm_epsilon=EPSILON)
    if contender == "keras_core":
        return KerasCoreBlock(num_heads, intermediate_dim, dropout, kind == "decoder")
    raise ValueError(f"Unknown contender: {contender!r}")


def self_attention(contender, num_heads, model_dim, causal=False):
    """A layer `x -> [B, T, D]`: multi-head self-attention alone."""
    if contender == "keras_attention":
        return MultiHeadSelfAttention(num_heads, causal=causal)
    if contender == "keras_core":
        return KerasCoreSelfAttention(num_heads, model_dim // num_heads, causal=causal)
    raise ValueError(f"Unknown contender: {contender!r}")


CONTENDERS = ("keras_attention", "keras_hub", "keras_core")
