"""A Transformer encoder with a classification head."""

import keras

from keras_attention.layers import Dropout, TokenPooling
from keras_attention.models.text_encoder import TextEncoderModel
from keras_attention.models.zoo_model import padding_mask, pop_dtype_policy, resolve_preset
from keras_attention.renamed import renamed_argument
from keras_attention.utils import check_choice, check_positive_int

PRESETS = {
    "tiny": dict(num_layers=2, model_dim=64, num_heads=4, intermediate_dim=256, dropout=0.1),
    # BERT-base sizes.
    "base": dict(num_layers=12, model_dim=768, num_heads=12, intermediate_dim=3072, dropout=0.1),
}
POOLINGS = ("mean", "first", "pooler")


@keras.saving.register_keras_serializable(package="keras_attention")
class TransformerClassifier(TextEncoderModel):
    """Encoder + pooling + classifier head. Build it with
    `build_transformer_classifier`.

    Input `token_ids` int `[B, T]` (padding id 0), output class logits
    `[B, num_classes]`. Pooling `"mean"` averages the real tokens' encoder
    outputs; `"first"` takes position 0 (a [CLS] token); `"pooler"` takes
    position 0 through a dense layer with tanh, as BERT's pooler does.

    BERT's embeddings are the token's, its position's (`positions="learned"`)
    and its segment's (`num_segments`, `separator_id`), summed and layer
    normalised (`normalize_embeddings`), none of them scaled
    (`scale_embeddings=False`).

    Args:
        vocabulary_size: int, number of token ids (0 = padding).
        num_classes: int, number of classes.
        model_dim: int, d_model, the width of every token vector. Default 64.
        positions: str, `"sinusoidal"` (the paper's, added to the
            embeddings), `"rotary"` (each self-attention turns its queries
            and keys by their positions) or `"alibi"` (each self-attention
            adds `-slope_h * |i - j|` to its scores). Default `"sinusoidal"`.
        pooling: str, `"mean"`, `"first"` or `"pooler"`. Default `"mean"`.
        max_position_embeddings: int, the positions a `"learned"` model
            has (Hugging Face's name); None for the other kinds. (Its name
            before was `max_length`: that still works for one release, with
            a `FutureWarning`.) Default None.
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
            many segments, added to the token embeddings; needs
            `separator_id`. Default None (none).
        separator_id: optional int, the token that ends a segment (BERT's
            `[SEP]`): a position's segment is the number of these before
            it. Default None.
        normalize_embeddings: bool, a layer norm over the summed embeddings,
            before the dropout (BERT's). Default False.
        **kwargs: the options of the encoder stack, each a keyword
            argument (`num_layers`, `num_heads`, `intermediate_dim`,
            `dropout`, `sliding_window`, ...): see `StackOptions` in
            `transformer_stacks`, whose Args say what each means and its
            default; and `keras.Model` arguments (`name`, `dtype`).
    """

    task = "classification"  # what `keras_attention.export` serves it as

    def __init__(
        self,
        vocabulary_size,
        num_classes,
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
        **kwargs,
    ):
        stack = self.stack_defaults.pop_from(kwargs)
        max_position_embeddings = renamed_argument(
            kwargs, "max_position_embeddings", max_position_embeddings
        )
        check_positive_int("num_classes", num_classes)
        check_choice("pooling", pooling, POOLINGS)
        policy = pop_dtype_policy(type(self), kwargs)
        self.pooling = pooling  # read by `pool`, which builds the graph below

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
        self.mean_pooling = None
        if pooling == "mean":
            self.mean_pooling = TokenPooling("mean", dtype=policy, name="mean_pooling")
        self.pooler = None
        if pooling == "pooler":
            self.pooler = keras.layers.Dense(
                model_dim, activation="tanh", dtype=policy, name="pooler"
            )
        self.head_dropout = Dropout(stack.dropout, dtype=policy, name="head_dropout")
        # Class logits in float32 under mixed precision, for a stable softmax.
        self.classifier = keras.layers.Dense(num_classes, dtype="float32", name="logits")

        # === Functional model ===
        token_ids = keras.Input((None,), dtype="int32", name="token_ids")
        super().__init__(inputs=token_ids, outputs=self.logits(token_ids), **kwargs)

        # === Config ===
        self._set_config(locals(), stack)

    def pool(self, token_ids, training=None):
        """Token ids `[B, T]` -> the vector the classifier reads, `[B, D]`."""
        x = self.encode(token_ids, training=training)  # [B, T, D]
        if self.pooling == "first":
            return x[:, 0]
        if self.pooling == "pooler":
            return self.pooler(x[:, 0])
        return self.mean_pooling(x, padding_mask=padding_mask(token_ids))  # [B, D]

    def logits(self, token_ids, training=None):
        pooled = self.pool(token_ids, training=training)
        return self.classifier(self.head_dropout(pooled, training=training))


def with_new_head(model, num_classes):
    """A copy of the classifier `model` whose head has `num_classes` classes
    and starts from zero (every class equally likely), every other weight
    the model's: a pretrained encoder ready to fine-tune on new labels."""
    config = {**model.get_config(), "num_classes": num_classes}
    new = type(model).from_config(config)
    for layer in model.layers:
        if layer is not model.classifier and layer.weights:
            new.get_layer(layer.name).set_weights(layer.get_weights())
    new.classifier.set_weights([weight * 0 for weight in new.classifier.get_weights()])
    return new


def build_transformer_classifier(vocabulary_size, num_classes, preset="tiny", **overrides):
    """Builds a Transformer encoder classifier.

    Args:
        vocabulary_size: int, number of token ids (0 = padding).
        num_classes: int, number of classes.
        preset: `"tiny"` (2 layers, d_model 64) or `"base"` (BERT-base sizes).
        **overrides: any argument of `TransformerClassifier` (its Args say
            what each means) or of its stack (`StackOptions`), over the
            preset's: e.g. `pooling="first"`.

    Returns:
        An uncompiled `TransformerClassifier`: `token_ids [B, T]` -> logits
        `[B, num_classes]`.

    Example:

    >>> model = build_transformer_classifier(50, num_classes=3)
    >>> tuple(model(keras.ops.ones((2, 7), "int32")).shape)
    (2, 3)
    """
    return TransformerClassifier(
        vocabulary_size,
        num_classes,
        **resolve_preset(PRESETS, preset, overrides, TransformerClassifier),
    )
