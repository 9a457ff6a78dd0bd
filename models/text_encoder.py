"""What the models that read one text with a Transformer encoder share: the
embeddings (token, position, segment), their norm and dropout, and the
encoder stack. `TransformerClassifier` puts a class head on top,
`TransformerEmbedder` a pooling into one vector."""

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
from keras_attention.models.zoo_model import ZooModel, padding_mask
from keras_attention.utils import check_choice, check_positive_int

POSITIONS = ("sinusoidal", "learned", "rotary", "alibi")


def segment_ids(token_ids, separator_id, num_segments):
    """Each position's segment (token type), `[B, T]`: the number of
    `separator_id`s before it, at most `num_segments - 1`. BERT's
    `[CLS] a [SEP] b [SEP]` is 0 up to the first `[SEP]`, then 1."""
    separators = ops.cast(ops.equal(token_ids, separator_id), "int32")
    before = ops.cumsum(separators, axis=1) - separators  # [B, T], exclusive
    return ops.minimum(before, num_segments - 1)


class TextEncoderModel(ZooModel):
    """A zoo model whose body is a Transformer encoder over one text.

    Its subclasses call `make_encoder` in their `__init__`, before they
    build their functional graph, and read the encoder's output with
    `encode`.
    """

    stack_defaults = StackOptions()  # what `**kwargs` may set

    def make_encoder(
        self,
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
        position_offset=0,
        relative_attention_num_buckets=None,
        relative_attention_max_distance=128,
    ):
        """Creates the embedding layers and the encoder stack (the
        arguments are the subclass's constructor's: see its Args)."""
        check_positive_int("vocabulary_size", vocabulary_size)
        check_positive_int("num_segments", num_segments, allow_none=True)
        if (num_segments is None) != (separator_id is None):
            raise ValueError(
                "`num_segments` and `separator_id` go together. Received: "
                f"num_segments={num_segments}, separator_id={separator_id}"
            )
        check_choice("positions", positions, POSITIONS)
        if not isinstance(position_offset, int) or isinstance(position_offset, bool):
            raise ValueError(
                f"`position_offset` must be an integer >= 0. Received: {position_offset!r}"
            )
        if position_offset < 0 or (position_offset and positions not in ("learned", "sinusoidal")):
            raise ValueError(
                "`position_offset` moves the positions added to the embeddings: an integer >= 0, "
                "with positions='learned' or 'sinusoidal'. Received: "
                f"position_offset={position_offset}, positions={positions!r}"
            )
        if (
            positions == "learned"
            and max_position_embeddings is not None
            and position_offset >= max_position_embeddings
        ):
            raise ValueError(
                "`position_offset` must leave a row of the learned positions. Received: "
                f"position_offset={position_offset}, "
                f"max_position_embeddings={max_position_embeddings}"
            )
        # Read by `encode`.
        self.num_segments, self.separator_id = num_segments, separator_id
        self.position_offset = position_offset
        self.token_embedding = TokenEmbedding(
            vocabulary_size, model_dim, scale=scale_embeddings, dtype=policy, name="token_embedding"
        )
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
            relative_attention_num_buckets=relative_attention_num_buckets,
            relative_attention_max_distance=relative_attention_max_distance,
            dtype=policy,
            name="encoder",
        )

    def encode(self, token_ids, training=None, return_attention_scores=False):
        """Token ids `[B, T]` -> encoder output `[B, T, D]` (and weights):
        the embeddings (token, then position and segment where the model
        has them, then the embedding norm), dropout, the encoder stack with
        padding masked out."""
        x = self.token_embedding(token_ids)  # [B, T, D]
        if self.positional_encoding is not None:
            # Text position t reads row `position_offset + t` (RoBERTa's
            # positions start after its padding id, at 2).
            x = self.positional_encoding(x, start_index=self.position_offset)
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

    def attention_scores(self, token_ids):
        """`{"self_attention": [[B, H, T, T] per layer]}`, for pictures."""
        _, scores = self.encode(token_ids, return_attention_scores=True)
        return {"self_attention": scores}
