"""The Transformer of "Attention Is All You Need": encoder-decoder."""

import dataclasses

import keras
from keras import ops

from keras_attention.layers import Dropout
from keras_attention.models.token_embedding import TokenEmbedding, output_layers, project
from keras_attention.models.transformer_stacks import (
    StackOptions,
    TransformerDecoder,
    TransformerEncoder,
    attention_positions,
    cached_decoding_step,
    embed,
    encode,
    position_layer,
)
from keras_attention.models.zoo_model import (
    ZooModel,
    padding_mask,
    pop_dtype_policy,
    resolve_preset,
)
from keras_attention.utils import check_choice, check_positive_int

# The paper's Table 3 sizes; "tiny" is for tests and the CPU recipe.
PRESETS = {
    "tiny": dict(num_layers=2, model_dim=64, num_heads=4, intermediate_dim=256, dropout=0.1),
    "base": dict(
        num_layers=6,
        model_dim=512,
        num_heads=8,
        intermediate_dim=2048,
        dropout=0.1,
        share_embeddings=True,
        tie_output_embeddings=True,
    ),
    "big": dict(
        num_layers=6,
        model_dim=1024,
        num_heads=16,
        intermediate_dim=4096,
        dropout=0.3,
        share_embeddings=True,
        tie_output_embeddings=True,
    ),
}

POSITIONS = ("sinusoidal", "rotary", "alibi")  # "learned" would need max_position_embeddings


@keras.saving.register_keras_serializable(package="keras_attention")
class Transformer(ZooModel):
    """Encoder-decoder Transformer (Vaswani et al. 2017). Build it with
    `build_transformer`.

    A functional model: inputs `{"source_ids": int [B, S], "target_ids":
    int [B, T]}` (padding id 0; targets start with the start token),
    output logits `[B, T, target_vocabulary_size]` carrying the target
    padding mask, so Keras losses skip padded positions.

    Beyond `call`: `encode`, `decode` and `attention_scores` for pictures,
    `decoding_start` / `decoding_step` for `keras_attention.decoding`.

    Args:
        source_vocabulary_size: int, number of source token ids (0 = padding).
        target_vocabulary_size: int, number of target token ids.
        model_dim: int, d_model, the width of every token vector. Default 64.
        positions: str, `"sinusoidal"` (the paper's, added to the
            embeddings), `"rotary"` (each self-attention turns its queries
            and keys by their positions) or `"alibi"` (each self-attention
            adds `-slope_h * |i - j|` to its scores). Default `"sinusoidal"`.
        share_embeddings: bool, one embedding matrix for source and target
            (the vocabularies must then be one). Default False.
        tie_output_embeddings: bool, the output projection is the target
            embedding's transpose. Default False.
        scale_embeddings: bool, multiply the token embeddings by
            sqrt(model_dim), as the paper does (Llama does not). Default True.
        output_bias: bool, a learned bias on the logits of a tied output
            projection (an untied one always has its bias). Default False.
        sinusoid_layout: str, with `positions="sinusoidal"`: `"interleaved"`
            (the paper's) or `"halves"` (Marian's); see `PositionalEncoding`.
            Default `"interleaved"`.
        suppressed_ids: optional list of ints, token ids that decoding never
            generates but that still count in each step's softmax, as Hugging
            Face's `bad_words_ids` (a converted Marian model's `<pad>`).
            Default None.
        **kwargs: the options of the encoder and decoder stacks, each a
            keyword argument (`num_layers`, `num_heads`, `intermediate_dim`,
            `dropout`, `sliding_window`, ...): see `StackOptions` in
            `transformer_stacks`, whose Args say what each means and its
            default; and `keras.Model` arguments (`name`, `dtype`).
    """

    task = "translation"  # what `keras_attention.export` serves it as
    is_decoder_only = False  # see `keras_attention.decoding.Decodable`
    stack_defaults = StackOptions()  # what `**kwargs` may set

    def __init__(
        self,
        source_vocabulary_size,
        target_vocabulary_size,
        *,
        model_dim=64,
        positions="sinusoidal",
        share_embeddings=False,
        tie_output_embeddings=False,
        scale_embeddings=True,
        output_bias=False,
        sinusoid_layout="interleaved",
        suppressed_ids=None,
        **kwargs,
    ):
        stack = self.stack_defaults.pop_from(kwargs)
        check_positive_int("source_vocabulary_size", source_vocabulary_size)
        check_positive_int("target_vocabulary_size", target_vocabulary_size)
        if share_embeddings and source_vocabulary_size != target_vocabulary_size:
            raise ValueError(
                "share_embeddings=True needs one vocabulary. Received: "
                f"source_vocabulary_size={source_vocabulary_size}, "
                f"target_vocabulary_size={target_vocabulary_size}"
            )
        policy = pop_dtype_policy(type(self), kwargs)
        stack_kwargs = dict(
            dataclasses.asdict(stack), positions=attention_positions(positions), dtype=policy
        )

        # === Layers ===
        self.source_embedding = TokenEmbedding(
            source_vocabulary_size,
            model_dim,
            scale=scale_embeddings,
            dtype=policy,
            name="source_embedding",
        )
        self.target_embedding = (
            self.source_embedding
            if share_embeddings
            else TokenEmbedding(
                target_vocabulary_size,
                model_dim,
                scale=scale_embeddings,
                dtype=policy,
                name="target_embedding",
            )
        )
        check_choice("positions", positions, POSITIONS)
        self.positional_encoding = position_layer(positions, policy, layout=sinusoid_layout)
        self.source_dropout = Dropout(stack.dropout, dtype=policy, name="source_dropout")
        self.target_dropout = Dropout(stack.dropout, dtype=policy, name="target_dropout")
        self.encoder = TransformerEncoder(name="encoder", **stack_kwargs)
        self.decoder = TransformerDecoder(name="decoder", **stack_kwargs)
        self.output_projection, self.logits_bias = output_layers(
            target_vocabulary_size, tie_output_embeddings, output_bias, policy
        )

        # === Functional model ===
        source_ids = keras.Input((None,), dtype="int32", name="source_ids")
        target_ids = keras.Input((None,), dtype="int32", name="target_ids")
        logits = self.decode(target_ids, self.encode(source_ids), source_ids)
        super().__init__(
            inputs={"source_ids": source_ids, "target_ids": target_ids},
            outputs=logits,
            **kwargs,
        )

        # === Config ===
        self._set_config(locals(), stack)

    def encode(self, source_ids, training=None, return_attention_scores=False):
        """Source ids `[B, S]` -> encoder output `[B, S, D]` (and weights)."""
        return encode(
            self.encoder,
            source_ids,
            self.source_embedding,
            self.positional_encoding,
            self.source_dropout,
            training=training,
            return_attention_scores=return_attention_scores,
        )

    def _embed_target(self, target_ids, start_index=0, training=None):
        return embed(
            target_ids,
            self.target_embedding,
            self.positional_encoding,
            self.target_dropout,
            start_index=start_index,
            training=training,
        )

    def decode(
        self, target_ids, encoder_output, source_ids, training=None, return_attention_scores=False
    ):
        """Target ids `[B, T]` and the encoder output -> logits `[B, T, V]`."""
        x = self._embed_target(target_ids, training=training)
        outputs = self.decoder(
            x,
            encoder_output,
            padding_mask=padding_mask(target_ids),
            context_mask=padding_mask(source_ids),
            training=training,
            return_attention_scores=return_attention_scores,
        )
        if not return_attention_scores:
            return self._logits(outputs)
        return self._logits(outputs[0]), outputs[1]

    def _logits(self, x):
        return project(x, self.target_embedding, self.output_projection, self.logits_bias)

    def attention_scores(self, inputs):
        """Every layer's attention weights for a batch, for pictures.

        Returns a dict: `"encoder_self_attention"` a list of `[B, H, S, S]`,
        `"decoder_self_attention"` of `[B, H, T, T]`, `"decoder_cross_attention"`
        of `[B, H, T, S]`, one entry per layer.
        """
        source_ids, target_ids = inputs["source_ids"], inputs["target_ids"]
        encoder_output, encoder_scores = self.encode(source_ids, return_attention_scores=True)
        _, decoder_scores = self.decode(
            target_ids, encoder_output, source_ids, return_attention_scores=True
        )
        return {
            "encoder_self_attention": encoder_scores,
            "decoder_self_attention": [s["self_attention"] for s in decoder_scores],
            "decoder_cross_attention": [s["cross_attention"] for s in decoder_scores],
        }

    # --- Decoding (see keras_attention.decoding) ---

    def decoding_start(self, source_ids, max_length, use_cache=True):
        """Everything the decoding loop carries, batch first: the encoder is
        run once, and with the cache each block's cross-attention keys and
        values are projected once. They are fixed for a sentence, so they
        sit under `"context"`, which beam search never reorders."""
        encoder_output = self.encode(source_ids)
        context = {"mask": padding_mask(source_ids)}
        if not use_cache:
            return {"context": {**context, "encoder_output": encoder_output}}
        return {
            "context": {**context, "caches": self.decoder.context_caches(encoder_output)},
            "caches": self.decoder.initial_caches(ops.shape(source_ids)[0], max_length),
        }

    def decoding_step(self, token_ids, index, state):
        """Logits `[B, V]` (float32) for the token after position `index`.

        `token_ids` `[B, max_length]` holds the tokens so far. With a cache
        only position `index` is run; without one, the whole prefix is.
        """
        context = state["context"]
        if "caches" not in state:
            x = self.decoder(
                self._embed_target(token_ids),
                context["encoder_output"],
                padding_mask=padding_mask(token_ids),
                context_mask=context["mask"],
            )
            logits = ops.take(self._logits(x), index, axis=1)
            return ops.cast(logits, "float32"), state
        return cached_decoding_step(
            self._embed_target,
            self.decoder,
            self._logits,
            token_ids,
            index,
            state,
            context_mask=context["mask"],
            context_caches=context["caches"],
        )


def build_transformer(
    source_vocabulary_size, target_vocabulary_size=None, preset="tiny", **overrides
):
    """Builds an encoder-decoder Transformer.

    Args:
        source_vocabulary_size: int, number of source token ids (0 = padding).
        target_vocabulary_size: int, number of target token ids; defaults to
            the source's.
        preset: `"tiny"` (2 layers, d_model 64), `"base"` (6 layers, d_model
            512, 8 heads, FF 2048, dropout 0.1) or `"big"` (d_model 1024, 16
            heads, FF 4096, dropout 0.3). base and big share one embedding
            matrix between source, target and output projection, as the paper
            does.
        **overrides: any argument of `Transformer` (its Args say what each
            means) or of its stacks (`StackOptions`), over the preset's:
            e.g. `num_layers=3`.

    Returns:
        An uncompiled `Transformer` (a `keras.Model`): `{"source_ids",
        "target_ids"}` -> logits `[B, T, V]`.

    Example:

    >>> model = build_transformer(100, preset="tiny")
    >>> ids = keras.ops.ones((2, 5), "int32")
    >>> tuple(model({"source_ids": ids, "target_ids": ids}).shape)
    (2, 5, 100)
    """
    config = resolve_preset(PRESETS, preset, overrides)
    return Transformer(
        source_vocabulary_size=source_vocabulary_size,
        target_vocabulary_size=target_vocabulary_size or source_vocabulary_size,
        **config,
    )
