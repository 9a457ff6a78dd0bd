"""A decoder-only (GPT-style) Transformer language model."""

import keras
from keras import ops

from keras_attention.layers import Dropout
from keras_attention.models.token_embedding import LogitsBias, TokenEmbedding
from keras_attention.models.transformer_stacks import (
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
from keras_attention.utils import check_choice, check_positive_int, renamed_argument

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
        num_layers: int, blocks in the decoder. Default 2.
        model_dim: int, d_model, the width of every token vector. Default 64.
        num_heads: int, attention heads; must divide `model_dim`. Default 4.
        intermediate_dim: int, hidden width of each feed-forward network.
            Default 256.
        dropout: float in [0, 1), on embeddings, attention weights and every
            sub-layer's output. Default 0.1.
        norm_first: bool, layer normalisation before each sub-layer
            (pre-norm) instead of after it (the paper's post-norm). Default True.
        chunk_size: optional int, attention in blocks of that many positions,
            exact, in memory linear in the length (long sequences); see
            `MultiHeadSelfAttention`. Default None (dense).
        num_key_value_heads: optional int dividing `num_heads`, grouped-query
            attention (1 = multi-query): fewer key/value heads, a smaller
            KV cache. Default None (one per head).
        sliding_window: optional int, sliding-window self-attention: each
            position attends only to those less than `sliding_window` away.
            Default None (every position).
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
        activation: str, the dense feed-forward network's activation
            (`"relu"` as in the paper, `"swish"` as in Marian, `"gelu"`,
            `"gelu_tanh"` as in GPT-2).
            Default `"relu"`.
        layer_norm_epsilon: float, the epsilon of every layer or RMS norm.
            Default 1e-6.
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
        **kwargs: `keras.Model` arguments (`name`, `dtype`).
    """

    task = "language_model"  # what `keras_attention.export` serves it as
    is_decoder_only = True  # see `keras_attention.decoding.Decodable`

    def __init__(
        self,
        vocabulary_size,
        num_layers=2,
        model_dim=64,
        num_heads=4,
        intermediate_dim=256,
        dropout=0.1,
        norm_first=True,
        chunk_size=None,
        num_key_value_heads=None,
        sliding_window=None,
        global_every=None,
        use_gate=False,
        positions="sinusoidal",
        max_position_embeddings=None,
        rotary_max_wavelength=10000.0,
        rotary_scaling_factor=1.0,
        normalization="layer_norm",
        feed_forward="dense",
        use_bias=True,
        tie_output_embeddings=True,
        activation="relu",
        layer_norm_epsilon=1e-6,
        scale_embeddings=True,
        output_bias=False,
        sinusoid_layout="interleaved",
        suppressed_ids=None,
        **kwargs,
    ):
        sliding_window = renamed_argument(kwargs, "sliding_window", sliding_window)
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
        self.embedding_dropout = Dropout(dropout, dtype=policy, name="embedding_dropout")
        self.decoder = TransformerDecoder(
            num_layers=num_layers,
            num_heads=num_heads,
            intermediate_dim=intermediate_dim,
            dropout=dropout,
            norm_first=norm_first,
            chunk_size=chunk_size,
            num_key_value_heads=num_key_value_heads,
            sliding_window=sliding_window,
            global_every=global_every,
            use_gate=use_gate,
            positions=attention_positions(positions),
            rotary_max_wavelength=rotary_max_wavelength,
            rotary_scaling_factor=rotary_scaling_factor,
            normalization=normalization,
            feed_forward=feed_forward,
            use_bias=use_bias,
            activation=activation,
            layer_norm_epsilon=layer_norm_epsilon,
            dtype=policy,
            name="decoder",
        )
        self.output_projection = (
            None
            if tie_output_embeddings
            else keras.layers.Dense(vocabulary_size, dtype=policy, name="logits")
        )
        self.logits_bias = (
            LogitsBias(vocabulary_size, dtype=policy, name="logits_bias")
            if output_bias and tie_output_embeddings
            else None
        )

        # === Functional model ===
        token_ids = keras.Input((None,), dtype="int32", name="token_ids")
        super().__init__(inputs=token_ids, outputs=self.logits(token_ids), **kwargs)

        # === Config ===
        self._set_config(locals())

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
        if self.output_projection is not None:
            return self.output_projection(x)
        logits = self.token_embedding(x, reverse=True)
        return logits if self.logits_bias is None else self.logits_bias(logits)

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
            means), over the preset's: e.g. `positions="learned"`.

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
