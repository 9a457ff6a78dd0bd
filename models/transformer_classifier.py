"""A Transformer encoder with a classification head."""

import dataclasses

import keras
from keras import ops

from keras_attention.layers import Dropout
from keras_attention.models.token_embedding import TokenEmbedding
from keras_attention.models.transformer_stacks import (
    StackOptions,
    TransformerEncoder,
    attention_positions,
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
    # BERT-base sizes.
    "base": dict(num_layers=12, model_dim=768, num_heads=12, intermediate_dim=3072, dropout=0.1),
}
POOLINGS = ("mean", "first", "pooler")
POSITIONS = ("sinusoidal", "learned", "rotary", "alibi")


def segment_ids(token_ids, separator_id, num_segments):
    """Each position's segment (token type), `[B, T]`: the number of
    `separator_id`s before it, at most `num_segments - 1`. BERT's
    `[CLS] a [SEP] b [SEP]` is 0 up to the first `[SEP]`, then 1."""
    separators = ops.cast(ops.equal(token_ids, separator_id), "int32")
    before = ops.cumsum(separators, axis=1) - separators  # [B, T], exclusive
    return ops.minimum(before, num_segments - 1)


@keras.saving.register_keras_serializable(package="keras_attention")
class TransformerClassifier(ZooModel):
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
    stack_defaults = StackOptions()  # what `**kwargs` may set

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
        **kwargs,
    ):
        stack = self.stack_defaults.pop_from(kwargs)
        max_position_embeddings = renamed_argument(
            kwargs, "max_position_embeddings", max_position_embeddings
        )
        check_positive_int("vocabulary_size", vocabulary_size)
        check_positive_int("num_classes", num_classes)
        check_choice("pooling", pooling, POOLINGS)
        check_positive_int("num_segments", num_segments, allow_none=True)
        if (num_segments is None) != (separator_id is None):
            raise ValueError(
                "`num_segments` and `separator_id` go together. Received: "
                f"num_segments={num_segments}, separator_id={separator_id}"
            )
        policy = pop_dtype_policy(type(self), kwargs)

        # Read by `logits`, which builds the graph below.
        self.pooling, self.num_segments, self.separator_id = pooling, num_segments, separator_id

        # === Layers ===
        self.token_embedding = TokenEmbedding(
            vocabulary_size, model_dim, scale=scale_embeddings, dtype=policy, name="token_embedding"
        )
        check_choice("positions", positions, POSITIONS)
        self.positional_encoding = position_layer(positions, policy, max_position_embeddings)
        self.segment_embedding = None
        if num_segments is not None:
            self.segment_embedding = keras.layers.Embedding(
                num_segments, model_dim, dtype=policy, name="segment_embedding"
            )
        self.embedding_norm = None
        if normalize_embeddings:
            self.embedding_norm = keras.layers.LayerNormalization(
                epsilon=stack.layer_norm_epsilon, dtype=policy, name="embedding_norm"
            )
        self.embedding_dropout = Dropout(stack.dropout, dtype=policy, name="embedding_dropout")
        self.encoder = TransformerEncoder(
            **dataclasses.asdict(stack),
            positions=attention_positions(positions),
            dtype=policy,
            name="encoder",
        )
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

    def encode(self, token_ids, training=None, return_attention_scores=False):
        """Token ids `[B, T]` -> encoder output `[B, T, D]` (and weights):
        the embeddings (token, then position and segment where the model
        has them, then the embedding norm), dropout, the encoder stack with
        padding masked out."""
        x = self.token_embedding(token_ids)  # [B, T, D]
        if self.positional_encoding is not None:
            x = self.positional_encoding(x)
        if self.segment_embedding is not None:
            segments = segment_ids(token_ids, self.separator_id, self.num_segments)
            x = x + self.segment_embedding(segments)
        if self.embedding_norm is not None:
            x = self.embedding_norm(x)
        x = self.embedding_dropout(x, training=training)
        return self.encoder(
            x,
            padding_mask=padding_mask(token_ids),
            training=training,
            return_attention_scores=return_attention_scores,
        )

    def pool(self, token_ids, training=None):
        """Token ids `[B, T]` -> the vector the classifier reads, `[B, D]`."""
        x = self.encode(token_ids, training=training)  # [B, T, D]
        if self.pooling == "first":
            return x[:, 0]
        if self.pooling == "pooler":
            return self.pooler(x[:, 0])
        real = ops.cast(ops.expand_dims(padding_mask(token_ids), -1), x.dtype)  # [B, T, 1]
        count = ops.maximum(ops.sum(real, axis=1), 1)  # an all-padding row gives zeros
        return ops.sum(x * real, axis=1) / count  # [B, D]

    def logits(self, token_ids, training=None):
        pooled = self.pool(token_ids, training=training)
        return self.classifier(self.head_dropout(pooled, training=training))

    def attention_scores(self, token_ids):
        """`{"self_attention": [[B, H, T, T] per layer]}`, for pictures."""
        _, scores = self.encode(token_ids, return_attention_scores=True)
        return {"self_attention": scores}


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
