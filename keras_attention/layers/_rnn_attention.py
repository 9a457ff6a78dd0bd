"""What Bahdanau and Luong attention share: the decoder scores every encoder
hidden state, softmaxes the scores, and takes the weighted sum as the context.

Private to the package; the two public layers only say how a score is made.
"""

from keras import ops

from keras_attention.layers._attention import check_mask, masked_softmax
from keras_attention.utils import Layer


class RNNAttention(Layer):
    """Base layer: `alignment_scores()` is the only step that differs between the papers."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def alignment_scores(self, query, value):
        """Scores `[B, Tq, Tv]` for queries `[B, Tq, Dq]` and values `[B, Tv, Dv]`."""
        raise NotImplementedError

    def call(self, query, value, value_mask=None, return_attention_scores=False):
        single_step = len(query.shape) == 2
        if len(query.shape) not in (2, 3):
            raise ValueError(
                "`query` must be one decoder step [B, Dq] or a sequence [B, Tq, Dq]. "
                f"Received: query.shape={tuple(query.shape)}"
            )
        if len(value.shape) != 3:
            raise ValueError(
                "`value` (the encoder's hidden states) must be [B, Tv, Dv]. "
                f"Received: value.shape={tuple(value.shape)}"
            )
        value_mask = check_mask("value_mask", value_mask, 2, tuple(value.shape[:2]))
        if single_step:
            query = ops.expand_dims(query, 1)  # [B, 1, Dq]

        # Score every encoder hidden state, then softmax (in float32).
        scores = self.alignment_scores(query, value)  # [B, Tq, Tv]
        if value_mask is not None:
            value_mask = ops.expand_dims(value_mask, 1)  # [B, 1, Tv]
        weights = ops.cast(masked_softmax(scores, value_mask), value.dtype)
        # Each hidden state times its softmaxed score, summed: the context.
        context = ops.matmul(weights, value)  # [B, Tq, Dv]

        if single_step:
            context, weights = context[:, 0], weights[:, 0]
        if return_attention_scores:
            return context, weights
        return context

    def compute_output_shape(self, query_shape, value_shape):
        return tuple(query_shape[:-1]) + (value_shape[-1],)
