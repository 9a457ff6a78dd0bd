import keras
from keras import ops

from keras_attention.layers._rnn_attention import RNNAttention
from keras_attention.utils import check_choice, check_positive_int, clone_initializer

SCORES = ("dot", "general", "concat")


@keras.saving.register_keras_serializable(package="keras_attention")
class LuongAttention(RNNAttention):
    """Multiplicative attention (Luong, Pham & Manning 2015, "Effective
    Approaches to Attention-based Neural Machine Translation").

    The decoder state `h_t` scores each encoder hidden state `h_s` with one of
    the paper's three functions:

    - `"dot"`: `h_t . h_s` (needs Dq == Dv);
    - `"general"`: `h_t . (W_a h_s)`;
    - `"concat"`: `v_a^T tanh(W_a [h_t; h_s])`.

    The scores are softmaxed over s and the hidden states summed with those
    weights into the context vector.

    Args:
        units: int, hidden size of the `"concat"` score; only that score uses
            it. Defaults to the query width.
        score: str, one of `"dot"`, `"general"`, `"concat"`. Default
            `"general"`.
        kernel_initializer: initializer of W_a and v_a.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        query: the decoder state, one step `[B, Dq]` or a sequence `[B, Tq, Dq]`.
        value: the encoder's hidden states `[B, Tv, Dv]`.
        value_mask: optional bool `[B, Tv]`, True at real source tokens. Filled
            in from the Keras implicit mask of `value` when not given.
        return_attention_scores: bool, also return the weights.

    Returns:
        context `[B, Dv]` (or `[B, Tq, Dv]`), and the weights `[B, Tv]` (or
        `[B, Tq, Tv]`) if `return_attention_scores`.

    Example:

    >>> encoder_states = keras.random.normal((2, 7, 16))
    >>> decoder_states = keras.random.normal((2, 3, 8))
    >>> tuple(LuongAttention(score="general")(decoder_states, encoder_states).shape)
    (2, 3, 16)
    """

    def __init__(self, units=None, score="general", kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        check_choice("score", score, SCORES)
        if units is not None and score != "concat":
            raise ValueError(
                f"`units` is only used by score='concat'. Received: units={units!r} "
                f"with score={score!r}"
            )
        self.units = check_positive_int("units", units, allow_none=True)
        self.score = score
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, query_shape, value_shape):
        query_dim, value_dim = query_shape[-1], value_shape[-1]

        def dense(units, name):
            return keras.layers.Dense(
                units,
                use_bias=False,  # the paper's scores have no biases
                kernel_initializer=clone_initializer(self.kernel_initializer),
                dtype=self.dtype_policy,
                name=name,
            )

        if self.score == "dot" and query_dim != value_dim:
            raise ValueError(
                "score='dot' needs the query and value widths to match. "
                f"Received: query width={query_dim}, value width={value_dim}"
            )
        if self.score == "general":
            self.W_a = dense(query_dim, "W_a")  # maps h_s into the query's space
            self.W_a.build((None, value_dim))
        elif self.score == "concat":
            units = self.units or query_dim
            # W_a [h_t; h_s] == W_query h_t + W_value h_s: split so each side
            # is projected once, not once per (t, s) pair.
            self.W_a_query, self.W_a_value = dense(units, "W_a_query"), dense(units, "W_a_value")
            self.W_a_query.build((None, query_dim))
            self.W_a_value.build((None, value_dim))
            self.v_a = dense(1, "v_a")
            self.v_a.build((None, units))

    def alignment_scores(self, query, value):
        if self.score == "dot":
            return ops.einsum("bqd,bvd->bqv", query, value)
        if self.score == "general":
            return ops.einsum("bqd,bvd->bqv", query, self.W_a(value))
        hidden = ops.tanh(
            ops.expand_dims(self.W_a_query(query), 2)  # [B, Tq, 1, U]
            + ops.expand_dims(self.W_a_value(value), 1)  # [B, 1, Tv, U]
        )
        return ops.squeeze(self.v_a(hidden), -1)  # [B, Tq, Tv]

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "units": self.units,
                "score": self.score,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config
