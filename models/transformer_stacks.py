"""The encoder and decoder stacks: N blocks one after another.

`TransformerEncoder` and `TransformerDecoder` take embedded sequences (token
embedding + positions); the models own the embeddings, so source, target and
output projection can share one matrix.
"""

import keras
from keras import ops

from keras_attention.layers import (
    PositionalEncoding,
    PositionEmbedding,
    TransformerBlock,
    TransformerDecoderBlock,
    normalization_layer,
)
from keras_attention.models.zoo_model import padding_mask
from keras_attention.utils import (
    Layer,
    check_positive_int,
    check_rate,
    pack_outputs,
    renamed_argument,
)


class _Stack(Layer):
    """Arguments and blocks common to both stacks."""

    block_class = None

    def __init__(
        self,
        num_layers,
        num_heads,
        intermediate_dim,
        dropout=0.1,
        norm_first=False,
        chunk_size=None,
        num_key_value_heads=None,
        sliding_window=None,
        global_every=None,
        use_gate=False,
        positions=None,
        rotary_max_wavelength=10000.0,
        rotary_scaling_factor=1.0,
        normalization="layer_norm",
        feed_forward="dense",
        use_bias=True,
        activation="relu",
        layer_norm_epsilon=1e-6,
        **kwargs,
    ):
        sliding_window = renamed_argument(kwargs, "sliding_window", sliding_window)
        super().__init__(**kwargs)
        self.num_layers = check_positive_int("num_layers", num_layers)
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.intermediate_dim = check_positive_int("intermediate_dim", intermediate_dim)
        self.dropout = check_rate("dropout", dropout)
        self.norm_first = bool(norm_first)
        self.chunk_size = check_positive_int("chunk_size", chunk_size, allow_none=True)
        self.supports_masking = True
        self.global_every = check_positive_int("global_every", global_every, allow_none=True)
        if global_every is not None and sliding_window is None:
            raise ValueError(
                "`global_every` alternates windowed and global layers and needs a "
                f"`sliding_window`. Received: global_every={global_every}, sliding_window=None"
            )
        # Today's attention and block options, as every block takes them
        # (the blocks, made here, check them).
        self.block_options = dict(
            num_key_value_heads=num_key_value_heads,
            sliding_window=sliding_window,
            use_gate=use_gate,
            positions=positions,
            rotary_max_wavelength=rotary_max_wavelength,
            rotary_scaling_factor=rotary_scaling_factor,
            normalization=normalization,
            feed_forward=feed_forward,
            use_bias=use_bias,
            activation=activation,
            layer_norm_epsilon=layer_norm_epsilon,
        )
        self.blocks = [
            self.block_class(
                num_heads=num_heads,
                intermediate_dim=intermediate_dim,
                dropout=dropout,
                norm_first=norm_first,
                chunk_size=chunk_size,
                **{**self.block_options, "sliding_window": self.block_window(index)},
                dtype=self.dtype_policy,
                name=f"block_{index}",
            )
            for index in range(num_layers)
        ]
        # Pre-norm leaves the last block's output unnormalised: add a norm.
        self.final_norm = (
            normalization_layer(normalization, layer_norm_epsilon, self.dtype_policy, "final_norm")
            if norm_first
            else None
        )

    def block_window(self, index):
        """Block `index`'s window: `sliding_window`, except that every
        `global_every`-th block attends to every position."""
        if self.global_every is not None and (index + 1) % self.global_every == 0:
            return None
        return self.block_options["sliding_window"]

    def _finish(self, x):
        return self.final_norm(x) if self.final_norm is not None else x

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_layers": self.num_layers,
                "num_heads": self.num_heads,
                "intermediate_dim": self.intermediate_dim,
                "dropout": self.dropout,
                "norm_first": self.norm_first,
                "chunk_size": self.chunk_size,
                "global_every": self.global_every,
                **self.block_options,
            }
        )
        return config


@keras.saving.register_keras_serializable(package="keras_attention")
class TransformerEncoder(_Stack):
    """N `TransformerBlock`s. Call: `(x [B, S, D], padding_mask [B, S])`.

    Returns `[B, S, D]`, and with `return_attention_scores=True` also a list
    of each block's weights `[B, H, S, S]`.
    """

    block_class = TransformerBlock

    def build(self, x_shape):
        for block in self.blocks:
            block.build(x_shape)
        if self.final_norm is not None:
            self.final_norm.build(x_shape)

    def call(self, x, padding_mask=None, training=None, return_attention_scores=False):
        scores = []
        for block in self.blocks:
            x = block(
                x,
                padding_mask=padding_mask,
                training=training,
                return_attention_scores=return_attention_scores,
            )
            if return_attention_scores:
                x, weights = x
                scores.append(weights)
        x = self._finish(x)
        return (x, scores) if return_attention_scores else x


@keras.saving.register_keras_serializable(package="keras_attention")
class TransformerDecoder(_Stack):
    """N `TransformerDecoderBlock`s (with cross-attention when built with a
    context, decoder-only otherwise).

    Call: `(x [B, T, D], context [B, S, Dc] or None, context_mask [B, S])`.
    For incremental decoding pass `caches` (one per block, from
    `initial_caches`), `cache_index`, and optionally `context_caches` (from
    `context_caches`).

    Returns `[B, T, D]`; then, with `return_attention_scores=True`, a list of
    each block's weights dict; then the updated caches when `caches` is given.
    """

    block_class = TransformerDecoderBlock

    def build(self, x_shape, context_shape=None):
        for block in self.blocks:
            block.build(x_shape, context_shape)
        if self.final_norm is not None:
            self.final_norm.build(x_shape)

    def call(
        self,
        x,
        context=None,
        padding_mask=None,
        context_mask=None,
        caches=None,
        cache_index=None,
        context_caches=None,
        training=None,
        return_attention_scores=False,
    ):
        scores, new_caches = [], []
        for index, block in enumerate(self.blocks):
            outputs = block(
                x,
                context,
                padding_mask=padding_mask,
                context_mask=context_mask,
                cache=None if caches is None else caches[index],
                cache_index=cache_index,
                context_cache=None if context_caches is None else context_caches[index],
                training=training,
                return_attention_scores=return_attention_scores,
            )
            outputs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
            x = outputs[0]
            if return_attention_scores:
                scores.append(outputs[1])
            if caches is not None:
                new_caches.append(outputs[-1])
        return pack_outputs(
            self._finish(x),
            scores if return_attention_scores else None,
            new_caches if caches is not None else None,
        )

    def initial_caches(self, batch_size, max_length):
        return [block.initial_cache(batch_size, max_length) for block in self.blocks]

    def context_caches(self, context):
        return [block.context_cache(context) for block in self.blocks]


def embed(token_ids, embedding, positions, dropout, start_index=0, training=None):
    """Token embedding (scaled by sqrt(d_model)) + positional encoding, then
    dropout. `positions` None: they are in the attention (rotary, ALiBi)."""
    x = embedding(token_ids)
    if positions is not None:
        x = positions(x, start_index=start_index)
    return dropout(x, training=training)


def encode(encoder, token_ids, embedding, positions, dropout, training=None, **kwargs):
    """Token ids `[B, S]` -> the encoder stack's output `[B, S, D]`: embedded
    (see `embed`), then through the stack with padding masked out. `kwargs`
    go to the stack (`return_attention_scores`)."""
    x = embed(token_ids, embedding, positions, dropout, training=training)
    return encoder(x, padding_mask=padding_mask(token_ids), training=training, **kwargs)


def position_layer(positions, dtype_policy, max_position_embeddings=None, layout="interleaved"):
    """What adds positions to the embeddings: the paper's sinusoids
    (`"sinusoidal"`, in `layout`), a learned table of
    `max_position_embeddings` rows (`"learned"`), or nothing (`"rotary"`,
    `"alibi"`: they are in the self-attention)."""
    if positions == "sinusoidal":
        return PositionalEncoding(layout=layout, dtype=dtype_policy, name="positional_encoding")
    if positions == "learned":
        if max_position_embeddings is None:
            raise ValueError(
                "positions='learned' needs `max_position_embeddings`. "
                "Received: max_position_embeddings=None"
            )
        return PositionEmbedding(
            max_position_embeddings, dtype=dtype_policy, name="position_embedding"
        )
    return None


def attention_positions(positions):
    """The blocks' `positions`: what the self-attention does itself."""
    return positions if positions in ("rotary", "alibi") else None


def cached_decoding_step(embed_step, decoder, project, token_ids, index, state, **context):
    """One incremental decoding step shared by the encoder-decoder and the LM.

    Runs only the token at `index` of `token_ids [B, max_length]`: embeds it
    at its position, appends its keys and values to every block's cache, and
    returns float32 logits `[B, V]` for the next token and the new state.
    """
    token = ops.slice(token_ids, (0, index), (ops.shape(token_ids)[0], 1))  # [B, 1]
    x, caches = decoder(
        embed_step(token, start_index=index), caches=state["caches"], cache_index=index, **context
    )
    return ops.cast(project(x)[:, 0], "float32"), {**state, "caches": caches}
