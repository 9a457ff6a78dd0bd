"""A Transformer encoder with a classification head."""

import keras
from keras import ops

from keras_attention.layers._dropout import Dropout
from keras_attention.models.token_embedding import TokenEmbedding
from keras_attention.models.transformer_stacks import (
    TransformerEncoder,
    attention_positions,
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

PRESETS = {
    "tiny": dict(num_layers=2, model_dim=64, num_heads=4, intermediate_dim=256, dropout=0.1),
    # BERT-base sizes.
    "base": dict(num_layers=12, model_dim=768, num_heads=12, intermediate_dim=3072, dropout=0.1),
}
POOLINGS = ("mean", "first")

POSITIONS = ("sinusoidal", "rotary", "alibi")  # "learned" would need a maximum length


@keras.saving.register_keras_serializable(package="keras_attention")
class TransformerClassifier(ZooModel):
    """Encoder + pooling + classifier head. Build it with
    `build_transformer_classifier`.

    Input `token_ids` int `[B, T]` (padding id 0), output class logits
    `[B, num_classes]`. Pooling `"mean"` averages the real tokens' encoder
    outputs; `"first"` takes position 0 (a [CLS] token, as in BERT).

    Args:
        vocabulary_size: int, number of token ids (0 = padding).
        num_classes: int, number of classes.
        num_layers: int, blocks in the encoder. Default 2.
        model_dim: int, d_model, the width of every token vector. Default 64.
        num_heads: int, attention heads; must divide `model_dim`. Default 4.
        intermediate_dim: int, hidden width of each feed-forward network.
            Default 256.
        dropout: float in [0, 1), on embeddings, attention weights and every
            sub-layer's output. Default 0.1.
        norm_first: bool, layer normalisation before each sub-layer
            (pre-norm) instead of after it (the paper's post-norm). Default False.
        chunk_size: optional int, attention in blocks of that many positions,
            exact, in memory linear in the length (long sequences); see
            `MultiHeadSelfAttention`. Default None (dense).
        num_key_value_heads: optional int dividing `num_heads`, grouped-query
            attention (1 = multi-query): fewer key/value heads, a smaller
            KV cache. Default None (one per head).
        window_size: optional int, sliding-window self-attention: each
            position attends only to those less than `window_size` away.
            Default None (every position).
        global_every: optional int, with `window_size`: every
            `global_every`-th layer attends to every position, the others
            through the window (Gemma 2 alternates, with 2; Gemma 3 has 6:
            five windowed layers, then a global one). Default None (every
            layer windowed).
        use_gate: bool, a sigmoid output gate on every attention layer, as
            Keras core's `use_gate`. Default False.
        positions: str, `"sinusoidal"` (the paper's, added to the
            embeddings), `"rotary"` (each self-attention turns its queries
            and keys by their positions) or `"alibi"` (each self-attention
            adds `-slope_h * |i - j|` to its scores). Default `"sinusoidal"`.
        rotary_max_wavelength: float, the rotary positions' longest
            wavelength (with `positions="rotary"`). Default 10000.
        rotary_scaling_factor: float >= 1, linear position interpolation of
            the rotary positions: positions are divided by it. Default 1.0.
        normalization: str, `"layer_norm"` (the paper's) or `"rms_norm"`
            (RMS normalisation, as in Llama) around every sub-layer.
            Default `"layer_norm"`.
        feed_forward: str, `"dense"` (the paper's two layers with
            `activation`) or `"swiglu"` (a SiLU-gated hidden layer, as in
            Llama). Default `"dense"`.
        use_bias: bool, whether the attention and feed-forward projections
            have biases (Llama's have none). Default True.
        pooling: str, `"mean"` or `"first"`. Default `"mean"`.
        **kwargs: `keras.Model` arguments (`name`, `dtype`).
    """

    task = "classification"  # what `keras_attention.export` serves it as

    def __init__(
        self,
        vocabulary_size,
        num_classes,
        num_layers=2,
        model_dim=64,
        num_heads=4,
        intermediate_dim=256,
        dropout=0.1,
        norm_first=False,
        chunk_size=None,
        num_key_value_heads=None,
        window_size=None,
        global_every=None,
        use_gate=False,
        positions="sinusoidal",
        rotary_max_wavelength=10000.0,
        rotary_scaling_factor=1.0,
        normalization="layer_norm",
        feed_forward="dense",
        use_bias=True,
        pooling="mean",
        **kwargs,
    ):
        check_positive_int("vocabulary_size", vocabulary_size)
        check_positive_int("num_classes", num_classes)
        check_choice("pooling", pooling, POOLINGS)
        policy = pop_dtype_policy(type(self), kwargs)

        self.pooling = pooling  # read by `logits`, which builds the graph below

        # === Layers ===
        self.token_embedding = TokenEmbedding(
            vocabulary_size, model_dim, dtype=policy, name="token_embedding"
        )
        check_choice("positions", positions, POSITIONS)
        self.positional_encoding = position_layer(positions, policy)
        self.embedding_dropout = Dropout(dropout, dtype=policy, name="embedding_dropout")
        self.encoder = TransformerEncoder(
            num_layers=num_layers,
            num_heads=num_heads,
            intermediate_dim=intermediate_dim,
            dropout=dropout,
            norm_first=norm_first,
            chunk_size=chunk_size,
            num_key_value_heads=num_key_value_heads,
            window_size=window_size,
            global_every=global_every,
            use_gate=use_gate,
            positions=attention_positions(positions),
            rotary_max_wavelength=rotary_max_wavelength,
            rotary_scaling_factor=rotary_scaling_factor,
            normalization=normalization,
            feed_forward=feed_forward,
            use_bias=use_bias,
            dtype=policy,
            name="encoder",
        )
        self.head_dropout = Dropout(dropout, dtype=policy, name="head_dropout")
        # Class logits in float32 under mixed precision, for a stable softmax.
        self.classifier = keras.layers.Dense(num_classes, dtype="float32", name="logits")

        # === Functional model ===
        token_ids = keras.Input((None,), dtype="int32", name="token_ids")
        super().__init__(inputs=token_ids, outputs=self.logits(token_ids), **kwargs)

        # === Config ===
        self._set_config(locals())

    def encode(self, token_ids, training=None, return_attention_scores=False):
        """Token ids `[B, T]` -> encoder output `[B, T, D]` (and weights)."""
        return encode(
            self.encoder,
            token_ids,
            self.token_embedding,
            self.positional_encoding,
            self.embedding_dropout,
            training=training,
            return_attention_scores=return_attention_scores,
        )

    def logits(self, token_ids, training=None):
        x = self.encode(token_ids, training=training)  # [B, T, D]
        if self.pooling == "first":
            pooled = x[:, 0]
        else:
            real = ops.cast(ops.expand_dims(padding_mask(token_ids), -1), x.dtype)  # [B, T, 1]
            count = ops.maximum(ops.sum(real, axis=1), 1)  # an all-padding row gives zeros
            pooled = ops.sum(x * real, axis=1) / count  # [B, D]
        return self.classifier(self.head_dropout(pooled, training=training))

    def attention_scores(self, token_ids):
        """`{"self_attention": [[B, H, T, T] per layer]}`, for pictures."""
        _, scores = self.encode(token_ids, return_attention_scores=True)
        return {"self_attention": scores}


def build_transformer_classifier(vocabulary_size, num_classes, preset="tiny", **overrides):
    """Builds a Transformer encoder classifier.

    Args:
        vocabulary_size: int, number of token ids (0 = padding).
        num_classes: int, number of classes.
        preset: `"tiny"` (2 layers, d_model 64) or `"base"` (BERT-base sizes).
        **overrides: any argument of `TransformerClassifier` (its Args say what each
            means), over the preset's: e.g. `pooling="first"`.

    Returns:
        An uncompiled `TransformerClassifier`: `token_ids [B, T]` -> logits
        `[B, num_classes]`.

    Example:

    >>> model = build_transformer_classifier(50, num_classes=3)
    >>> tuple(model(keras.ops.ones((2, 7), "int32")).shape)
    (2, 3)
    """
    return TransformerClassifier(
        vocabulary_size, num_classes, **resolve_preset(PRESETS, preset, overrides)
    )
