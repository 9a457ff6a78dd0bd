"""A Transformer encoder that gives one vector per text: sentence embeddings."""

import keras
from keras import ops

from keras_attention.layers import TokenPooling
from keras_attention.models.text_encoder import TextEncoderModel
from keras_attention.models.zoo_model import padding_mask, pop_dtype_policy, resolve_preset
from keras_attention.utils import check_positive_int

PRESETS = {
    "tiny": dict(num_layers=2, model_dim=64, num_heads=4, intermediate_dim=256, dropout=0.1),
    # all-MiniLM-L6-v2's sizes.
    "minilm": dict(num_layers=6, model_dim=384, num_heads=12, intermediate_dim=1536, dropout=0.1),
    # BERT-base sizes (all-mpnet-base-v2's, BGE-base's, E5-base's).
    "base": dict(num_layers=12, model_dim=768, num_heads=12, intermediate_dim=3072, dropout=0.1),
}


@keras.saving.register_keras_serializable(package="keras_attention")
class TransformerEmbedder(TextEncoderModel):
    """Encoder + pooling (+ dense) (+ unit norm): one vector per text, as
    Sentence-BERT (Reimers and Gurevych, 2019) composes them. Build it with
    `build_transformer_embedder`.

    Input `token_ids` int `[B, T]` (padding id 0), output `[B, D]` float32
    (D is `output_dim`, or `model_dim` without a dense layer). The
    encoder's token vectors are pooled over the real tokens
    (`TokenPooling`), then optionally go through a dense layer with an
    activation, then are optionally scaled to unit length: the
    Transformer, Pooling, Dense and Normalize modules of a
    sentence-transformers model, in that order.

    Args:
        vocabulary_size: int, number of token ids (0 = padding).
        model_dim: int, d_model, the width of every token vector. Default 64.
        positions: str, `"sinusoidal"`, `"learned"`, `"rotary"` or
            `"alibi"` (see `TransformerClassifier`). Default `"sinusoidal"`.
        pooling: str, one of `TokenPooling`'s modes: `"mean"`, `"cls"`,
            `"max"`, `"mean_sqrt_len_tokens"`, `"weightedmean"`,
            `"lasttoken"`. Default `"mean"`.
        max_position_embeddings: int, the positions a `"learned"` model
            has; None for the other kinds. Default None.
        position_offset: int >= 0, the position of the first token: token
            t of a text gets the learned (or sinusoidal) position
            `position_offset + t`. RoBERTa and XLM-RoBERTa count positions
            from their padding id + 1, 2; BART from 2. Default 0.
        relative_attention_num_buckets: optional int, a learned bias on
            every layer's attention scores by relative position, in that
            many buckets (`RelativePositionBias`, bidirectional; MPNet's
            32), one table for the whole stack, beside the positions above.
            Not with `chunk_size`. Default None (none).
        relative_attention_max_distance: int, the distance from which on
            keys share the last bucket. Default 128.
        scale_embeddings: bool, multiply the token embeddings by
            sqrt(model_dim), as the paper does (BERT does not). Default True.
        num_segments: optional int, segment (token type) embeddings of that
            many segments; needs `separator_id`. Default None.
        separator_id: optional int, the token that ends a segment (BERT's
            `[SEP]`). Default None.
        normalize_embeddings: bool, a layer norm over the summed input
            embeddings (BERT's). Default False.
        output_dim: optional int, a dense layer to this width after the
            pooling (sentence-transformers' Dense module). Default None.
        output_activation: optional str, that dense layer's Keras
            activation (`"tanh"`, Dense's default there). Default None.
        output_use_bias: bool, whether that dense layer has a bias.
            Default True.
        unit_normalize: bool, scale each vector to unit (L2) length, so a
            dot product is the cosine (sentence-transformers' Normalize).
            Default False.
        **kwargs: the options of the encoder stack (`num_layers`,
            `num_heads`, `intermediate_dim`, `dropout`, ...; see
            `StackOptions`) and `keras.Model`'s `name` and `dtype`.
    """

    task = "embedding"  # what `keras_attention.export` serves it as

    def __init__(
        self,
        vocabulary_size,
        *,
        model_dim=64,
        positions="sinusoidal",
        pooling="mean",
        max_position_embeddings=None,
        scale_embeddings=True,
        num_segments=None,
        separator_id=None,
        normalize_embeddings=False,
        position_offset=0,
        relative_attention_num_buckets=None,
        relative_attention_max_distance=128,
        output_dim=None,
        output_activation=None,
        output_use_bias=True,
        unit_normalize=False,
        **kwargs,
    ):
        stack = self.stack_defaults.pop_from(kwargs)
        check_positive_int("output_dim", output_dim, allow_none=True)
        if output_dim is None and output_activation is not None:
            raise ValueError(
                "`output_activation` needs `output_dim` (a dense layer). Received: "
                f"output_activation={output_activation!r}, output_dim=None"
            )
        policy = pop_dtype_policy(type(self), kwargs)

        # === Layers ===
        self.make_encoder(
            vocabulary_size,
            model_dim,
            positions,
            max_position_embeddings,
            scale_embeddings,
            num_segments,
            separator_id,
            normalize_embeddings,
            stack,
            policy,
            position_offset=position_offset,
            relative_attention_num_buckets=relative_attention_num_buckets,
            relative_attention_max_distance=relative_attention_max_distance,
        )
        self.token_pooling = TokenPooling(pooling, dtype=policy, name="pooling")
        self.output_dense = None
        if output_dim is not None:
            self.output_dense = keras.layers.Dense(
                output_dim,
                activation=output_activation,
                use_bias=output_use_bias,
                dtype="float32",
                name="output_dense",
            )
        self.unit_normalization = None
        if unit_normalize:
            self.unit_normalization = keras.layers.UnitNormalization(
                dtype="float32", name="unit_normalization"
            )

        # === Functional model ===
        token_ids = keras.Input((None,), dtype="int32", name="token_ids")
        super().__init__(inputs=token_ids, outputs=self.embed(token_ids), **kwargs)

        # === Config ===
        self._set_config(locals(), stack)

    def embed(self, token_ids, training=None):
        """Token ids `[B, T]` -> one vector per text, float32 `[B, D]`."""
        x = self.encode(token_ids, training=training)  # [B, T, model_dim]
        # Pooled in float32, so that vectors keep their precision under
        # mixed precision.
        vectors = self.token_pooling(ops.cast(x, "float32"), padding_mask=padding_mask(token_ids))
        if self.output_dense is not None:
            vectors = self.output_dense(vectors)  # [B, output_dim]
        if self.unit_normalization is not None:
            vectors = self.unit_normalization(vectors)
        return vectors


def build_transformer_embedder(vocabulary_size, preset="tiny", **overrides):
    """Builds a Transformer sentence embedder.

    Args:
        vocabulary_size: int, number of token ids (0 = padding).
        preset: `"tiny"` (2 layers, d_model 64), `"minilm"` (6 layers,
            d_model 384: all-MiniLM-L6-v2's sizes) or `"base"` (BERT-base).
        **overrides: any argument of `TransformerEmbedder` (its Args say
            what each means) or of its stack (`StackOptions`), over the
            preset's: e.g. `pooling="cls", unit_normalize=True`.

    Returns:
        An uncompiled `TransformerEmbedder`: `token_ids [B, T]` -> vectors
        `[B, D]`.

    Example:

    >>> model = build_transformer_embedder(50, unit_normalize=True)
    >>> tuple(model(keras.ops.ones((2, 7), "int32")).shape)
    (2, 64)
    """
    return TransformerEmbedder(
        vocabulary_size, **resolve_preset(PRESETS, preset, overrides, TransformerEmbedder)
    )
