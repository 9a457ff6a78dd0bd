"""A decoder-only (GPT-style) Transformer language model."""

import dataclasses

import keras
from keras import ops

from keras_attention.layers import Dropout
from keras_attention.models.token_embedding import TokenEmbedding, output_layers, project
from keras_attention.models.transformer_stacks import (
    StackOptions,
    TransformerDecoder,
    attention_positions,
    cached_decoding_step,
    embed,
    position_layer,
)
from keras_attention.models.zoo_model import (
    ZooModel,
    padding_mask,
    pop_dtype_policy,
    resolve_preset,
)
from keras_attention.renamed import renamed_argument
from keras_attention.utils import check_choice, check_positive_int

PRESETS = {
    "tiny": dict(num_layers=2, model_dim=64, num_heads=4, intermediate_dim=256, dropout=0.1),
    # GPT-2 small's sizes (117M with its 50k vocabulary).
    "small": dict(
        num_layers=12,
        model_dim=768,
        num_heads=12,
        intermediate_dim=3072,
        dropout=0.1,
        positions="learned",
        max_position_embeddings=1024,
    ),
    # Today's decoder (Llama's choices) at the tiny preset's width: pre-norm
    # RMS norms, a SwiGLU feed-forward network (176 wide: its three matrices
    # hold about the parameters of tiny's two of 256), rotary positions, two
    # key/value heads for four query heads, no biases, tied embeddings.
    "modern": dict(
        num_layers=2,
        model_dim=64,
        num_heads=4,
        intermediate_dim=176,
        dropout=0.1,
        norm_first=True,
        normalization="rms_norm",
        feed_forward="swiglu",
        positions="rotary",
        num_key_value_heads=2,
        use_bias=False,
        tie_output_embeddings=True,
    ),
}
# The modern decoder with sliding-window layers between global ones, as
# Gemma 2 alternates them: block 0 attends to the 16 positions up to its
# own, block 1 to every position. (A window's cost grows as T * W, not T^2.)
PRESETS["modern_windowed"] = dict(PRESETS["modern"], sliding_window=16, global_every=2)
POSITIONS = ("sinusoidal", "learned", "rotary", "alibi")


@keras.saving.register_keras_serializable(package="keras_attention")
class TransformerLM(ZooModel):
    """Decoder-only Transformer: causal self-attention blocks, no encoder.
    Build it with `build_transformer_lm`.

    Input `token_ids` int `[B, T]` (padding id 0), output next-token logits
    `[B, T, V]` carrying the padding mask. Pre-norm blocks and tied output
    embeddings by default, as in GPT-2.

    Args:
        vocabulary_size: int, number of token ids (0 = padding).
        model_dim: int, d_model, the width of every token vector. Default 64.
        positions: str, `"sinusoidal"` (any length), `"learned"` (up to
            `max_position_embeddings`), `"rotary"` (the self-attention turns each query
            and key by its position) or `"alibi"` (the self-attention adds
            `-slope_h * (i - j)` to its scores, Press et al. 2022); with
            these two nothing is added to the embeddings.
            Default `"sinusoidal"`.
        max_position_embeddings: int, the positions a `"learned"` model
            has (Hugging Face's name); None for the other kinds. (Its name
            before was `max_length`: that still works for one release, with
            a `FutureWarning`.) Default None.
        tie_output_embeddings: bool, the output projection is the token
            embedding's transpose. Default True.
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
        **kwargs: the options of the decoder stack, each a keyword
            argument (`num_layers`, `num_heads`, `intermediate_dim`,
            `dropout`, `sliding_window`, ...): see `StackOptions` in
            `transformer_stacks`, whose Args say what each means and its
            default (but `norm_first` is True here, as in GPT-2); and
            `keras.Model` arguments (`name`, `dtype`).
    """

    task = "language_model"  # what `keras_attention.export` serves it as
    is_decoder_only = True  # see `keras_attention.decoding.Decodable`
    stack_defaults = StackOptions(norm_first=True)  # what `**kwargs` may set

    def __init__(
        self,
        vocabulary_size,
        *,
        model_dim=64,
        positions="sinusoidal",
        max_position_embeddings=None,
        tie_output_embeddings=True,
        scale_embeddings=True,
        output_bias=False,
        sinusoid_layout="interleaved",
        suppressed_ids=None,
        **kwargs,
    ):
        stack = self.stack_defaults.pop_from(kwargs)
        max_position_embeddings = renamed_argument(
            kwargs, "max_position_embeddings", max_position_embeddings
        )
        check_positive_int("vocabulary_size", vocabulary_size)
        check_choice("positions", positions, POSITIONS)
        policy = pop_dtype_policy(type(self), kwargs)

        # === Layers ===
        self.token_embedding = TokenEmbedding(
            vocabulary_size,
            model_dim,
            scale=scale_embeddings,
            dtype=policy,
            name="token_embedding",
        )
        self.positional_encoding = position_layer(
            positions, policy, max_position_embeddings, layout=sinusoid_layout
        )
        self.embedding_dropout = Dropout(stack.dropout, dtype=policy, name="embedding_dropout")
        self.decoder = TransformerDecoder(
            **dataclasses.asdict(stack),
            positions=attention_positions(positions),
            dtype=policy,
            name="decoder",
        )
        self.output_projection, self.logits_bias = output_layers(
            vocabulary_size, tie_output_embeddings, output_bias, policy
        )

        # === Functional model ===
        token_ids = keras.Input((None,), dtype="int32", name="token_ids")
        super().__init__(inputs=token_ids, outputs=self.logits(token_ids), **kwargs)

        # === Config ===
        self._set_config(locals(), stack)

    def _embed(self, token_ids, start_index=0, training=None):
        return embed(
            token_ids,
            self.token_embedding,
            self.positional_encoding,
            self.embedding_dropout,
            start_index=start_index,
            training=training,
        )

    def _project(self, x):
        return project(x, self.token_embedding, self.output_projection, self.logits_bias)

    def logits(self, token_ids, training=None, return_attention_scores=False):
        """Token ids `[B, T]` -> next-token logits `[B, T, V]` (and weights)."""
        outputs = self.decoder(
            self._embed(token_ids, training=training),
            padding_mask=padding_mask(token_ids),
            training=training,
            return_attention_scores=return_attention_scores,
        )
        if not return_attention_scores:
            return self._project(outputs)
        return self._project(outputs[0]), outputs[1]

    def attention_scores(self, token_ids):
        """`{"self_attention": [[B, H, T, T] per layer]}`, for pictures."""
        _, scores = self.logits(token_ids, return_attention_scores=True)
        return {"self_attention": [s["self_attention"] for s in scores]}

    # --- Decoding (see keras_attention.decoding) ---

    def decoding_start(self, prompt_ids, max_length, use_cache=True):
        if not use_cache:
            return {}
        return {"caches": self.decoder.initial_caches(ops.shape(prompt_ids)[0], max_length)}

    def decoding_step(self, token_ids, index, state):
        if "caches" in state:
            return cached_decoding_step(
                self._embed, self.decoder, self._project, token_ids, index, state
            )
        logits = ops.take(self.logits(token_ids), index, axis=1)
        return ops.cast(logits, "float32"), state


def build_transformer_lm(vocabulary_size, preset="tiny", **overrides):
    """Builds a decoder-only Transformer language model.

    Args:
        vocabulary_size: int, number of token ids (0 = padding).
        preset: `"tiny"` (2 layers, d_model 64), `"small"` (GPT-2 small's
            12 layers, d_model 768, learned positions up to 1024), `"modern"`
            (tiny's sizes with Llama's choices: pre-norm RMS norms, SwiGLU,
            rotary positions, grouped-query attention, no biases) or
            `"modern_windowed"` (modern, with a sliding window of 16 in every
            other layer, as in Gemma 2).
        **overrides: any argument of `TransformerLM` (its Args say what each
            means) or of its stack (`StackOptions`), over the preset's:
            e.g. `positions="learned"`.

    Returns:
        An uncompiled `TransformerLM`: `token_ids [B, T]` -> logits `[B, T, V]`.

    Example:

    >>> model = build_transformer_lm(50)
    >>> tuple(model(keras.ops.ones((2, 7), "int32")).shape)
    (2, 7, 50)
    """
    return TransformerLM(
        vocabulary_size, **resolve_preset(PRESETS, preset, overrides, TransformerLM)
    )
