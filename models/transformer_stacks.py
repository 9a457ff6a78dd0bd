"""The encoder and decoder stacks: N blocks one after another.

`TransformerEncoder` and `TransformerDecoder` take embedded sequences (token
embedding + positions); the models own the embeddings, so source, target and
output projection can share one matrix.
"""

import dataclasses

import keras
from keras import ops

from keras_attention.layers import (
    PositionalEncoding,
    PositionEmbedding,
    RelativePositionBias,
    TransformerBlock,
    TransformerDecoderBlock,
    normalization_layer,
)
from keras_attention.models.zoo_model import padding_mask
from keras_attention.renamed import RENAMED_ARGUMENTS, renamed_argument
from keras_attention.utils import Layer, check_positive_int, pack_outputs


@dataclasses.dataclass(frozen=True)
class StackOptions:
    """The options of the encoder and decoder stacks, declared once.

    `Transformer`, `TransformerClassifier` and `TransformerLM` take each of
    them as a keyword argument of their own, keep it in their config, and
    hand them all to their stacks (`TransformerEncoder`,
    `TransformerDecoder`), which hand them on to every block. An option of
    the blocks is added here, and the models take it.

    Args:
        num_layers: int, blocks in each stack (a `Transformer` has an
            encoder and a decoder of that many). Default 2.
        num_heads: int, attention heads; must divide `model_dim`. Default 4.
        intermediate_dim: int, hidden width of each feed-forward network.
            Default 256.
        dropout: float in [0, 1), on embeddings, attention weights and every
            sub-layer's output. Default 0.1.
        norm_first: bool, layer normalisation before each sub-layer
            (pre-norm) instead of after it (the paper's post-norm). Default
            False (`TransformerLM`'s: True, as in GPT-2).
        chunk_size: optional int, attention in blocks of that many positions,
            exact, in memory linear in the length (long sequences); see
            `MultiHeadSelfAttention`. Default None (dense).
        num_key_value_heads: optional int dividing `num_heads`, grouped-query
            attention (1 = multi-query): fewer key/value heads, a smaller
            KV cache. Default None (one per head).
        sliding_window: optional int, sliding-window self-attention: each
            position attends only to those less than `sliding_window` away.
            (Its name before was `window_size`: that still works for one
            release, with a `FutureWarning`.) Default None (every position).
        global_every: optional int, with `sliding_window`: every
            `global_every`-th layer attends to every position, the others
            through the window (Gemma 2 alternates, with 2; Gemma 3 has 6:
            five windowed layers, then a global one). Default None (every
            layer windowed).
        use_gate: bool, a sigmoid output gate on every attention layer, as
            Keras core's `use_gate`. Default False.
        rotary_max_wavelength: float, the rotary positions' longest
            wavelength (with `positions="rotary"`). Default 10000.
        rotary_scaling_factor: float >= 1, linear position interpolation of
            the rotary positions: positions are divided by it. Or a list of
            floats >= 1, one per pair of a head's features, each dividing
            its frequency (Llama 3.1's `llama3` scaling). Default 1.0.
        normalization: str, `"layer_norm"` (the paper's) or `"rms_norm"`
            (RMS normalisation, as in Llama) around every sub-layer.
            Default `"layer_norm"`.
        feed_forward: str, `"dense"` (the paper's two layers with
            `activation`) or `"swiglu"` (a SiLU-gated hidden layer, as in
            Llama). Default `"dense"`.
        use_bias: bool, whether the attention and feed-forward projections
            have biases (Llama's have none). Default True.
        activation: str, the dense feed-forward network's activation
            (`"relu"` as in the paper, `"swish"` as in Marian, `"gelu"`,
            exact, as in BERT, `"gelu_tanh"` as in GPT-2).
            Default `"relu"`.
        layer_norm_epsilon: float, the epsilon of every layer or RMS norm.
            Default 1e-6.

    Example:

    >>> options = StackOptions(num_layers=3, sliding_window=4)
    >>> encoder = TransformerEncoder(**dataclasses.asdict(options))
    >>> len(encoder.blocks), encoder.blocks[0].sliding_window
    (3, 4)
    """

    num_layers: int = 2
    num_heads: int = 4
    intermediate_dim: int = 256
    dropout: float = 0.1
    norm_first: bool = False
    chunk_size: int | None = None
    num_key_value_heads: int | None = None
    sliding_window: int | None = None
    global_every: int | None = None
    use_gate: bool = False
    rotary_max_wavelength: float = 10000.0
    rotary_scaling_factor: float | list = 1.0
    normalization: str = "layer_norm"
    feed_forward: str = "dense"
    use_bias: bool = True
    activation: str = "relu"
    layer_norm_epsilon: float = 1e-6

    def pop_from(self, kwargs):
        """These options, but for those `kwargs` gives, popped from it (one
        under its old name, `RENAMED_ARGUMENTS`, with a `FutureWarning`)."""
        names = [field.name for field in dataclasses.fields(self)]
        for old, new in RENAMED_ARGUMENTS.items():
            if old in kwargs and new in names:
                kwargs[new] = renamed_argument(kwargs, new, kwargs.get(new), old)
        return dataclasses.replace(
            self, **{name: kwargs.pop(name) for name in names if name in kwargs}
        )


class _Stack(Layer):
    """Arguments and blocks common to both stacks: `StackOptions`' options,
    as keyword arguments, and `positions`, those the self-attention adds
    itself (None, `"rotary"` or `"alibi"`)."""

    block_class = None

    def __init__(self, *, positions=None, **kwargs):
        options = StackOptions().pop_from(kwargs)
        super().__init__(**kwargs)
        check_positive_int("num_layers", options.num_layers)
        check_positive_int("global_every", options.global_every, allow_none=True)
        if options.global_every is not None and options.sliding_window is None:
            raise ValueError(
                "`global_every` alternates windowed and global layers and needs a "
                f"`sliding_window`. Received: global_every={options.global_every}, "
                "sliding_window=None"
            )
        self.options = options
        for name, value in dataclasses.asdict(options).items():
            setattr(self, name, value)  # each also under its own name
        self.positions = positions
        self.supports_masking = True
        # What every block takes: all but the stack's own two (the blocks,
        # made here, check them).
        block_options = {**dataclasses.asdict(options), "positions": positions}
        del block_options["num_layers"], block_options["global_every"]
        self.block_options = block_options
        self.blocks = [
            self.block_class(
                **{**block_options, "sliding_window": self.block_window(index)},
                dtype=self.dtype_policy,
                name=f"block_{index}",
            )
            for index in range(options.num_layers)
        ]
        # Pre-norm leaves the last block's output unnormalised: add a norm.
        self.final_norm = (
            normalization_layer(
                options.normalization, options.layer_norm_epsilon, self.dtype_policy, "final_norm"
            )
            if options.norm_first
            else None
        )

    def block_window(self, index):
        """Block `index`'s window: `sliding_window`, except that every
        `global_every`-th block attends to every position."""
        if self.global_every is not None and (index + 1) % self.global_every == 0:
            return None
        return self.sliding_window

    def _finish(self, x):
        return self.final_norm(x) if self.final_norm is not None else x

    def get_config(self):
        return {
            **super().get_config(),
            **dataclasses.asdict(self.options),
            "positions": self.positions,
        }


@keras.saving.register_keras_serializable(package="keras_attention")
class TransformerEncoder(_Stack):
    """N `TransformerBlock`s. Call: `(x [B, S, D], padding_mask [B, S])`,
    and optionally `attention_bias`, a float tensor broadcastable to
    `[B, H, S, S]` added to every block's attention scores.

    `relative_attention_num_buckets` gives the stack a relative position
    bias (`RelativePositionBias`, bidirectional, T5's and MPNet's), one
    table of that many buckets up to `relative_attention_max_distance`
    (default 128), computed once per call and added to every block's
    scores; not with `chunk_size`.

    Returns `[B, S, D]`, and with `return_attention_scores=True` also a list
    of each block's weights `[B, H, S, S]`.
    """

    block_class = TransformerBlock

    def __init__(
        self, *, relative_attention_num_buckets=None, relative_attention_max_distance=128, **kwargs
    ):
        super().__init__(**kwargs)
        check_positive_int(
            "relative_attention_num_buckets", relative_attention_num_buckets, allow_none=True
        )
        self.relative_attention_num_buckets = relative_attention_num_buckets
        self.relative_attention_max_distance = relative_attention_max_distance
        self.relative_position_bias = None
        if relative_attention_num_buckets is not None:
            if self.chunk_size is not None:
                raise ValueError(
                    "A relative position bias (`relative_attention_num_buckets`) is not "
                    "supported with `chunk_size`: the attention in blocks adds no bias. Received: "
                    f"relative_attention_num_buckets={relative_attention_num_buckets}, "
                    f"chunk_size={self.chunk_size}"
                )
            self.relative_position_bias = RelativePositionBias(
                self.num_heads,
                num_buckets=relative_attention_num_buckets,
                max_distance=relative_attention_max_distance,
                bidirectional=True,
                dtype=self.dtype_policy,
                name="relative_position_bias",
            )

    def build(self, x_shape):
        for block in self.blocks:
            block.build(x_shape)
        if self.final_norm is not None:
            self.final_norm.build(x_shape)

    def call(
        self,
        x,
        padding_mask=None,
        training=None,
        return_attention_scores=False,
        attention_bias=None,
    ):
        if self.relative_position_bias is not None:
            length = ops.shape(x)[1]
            # One bias [1, H, S, S], computed once for every block.
            relative = self.relative_position_bias(query_length=length, key_length=length)
            attention_bias = relative if attention_bias is None else attention_bias + relative
        scores = []
        for block in self.blocks:
            x = block(
                x,
                padding_mask=padding_mask,
                training=training,
                return_attention_scores=return_attention_scores,
                attention_bias=attention_bias,
            )
            if return_attention_scores:
                x, weights = x
                scores.append(weights)
        x = self._finish(x)
        return (x, scores) if return_attention_scores else x

    def get_config(self):
        config = super().get_config()
        if self.relative_attention_num_buckets is not None:
            config["relative_attention_num_buckets"] = self.relative_attention_num_buckets
            config["relative_attention_max_distance"] = self.relative_attention_max_distance
        return config


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
