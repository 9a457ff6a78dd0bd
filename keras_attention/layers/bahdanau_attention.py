import keras
from keras import ops

from keras_attention.layers._rnn_attention import RNNAttention
from keras_attention.utils import check_positive_int, clone_initializer


@keras.saving.register_keras_serializable(package="keras_attention")
class BahdanauAttention(RNNAttention):
    """Additive attention (Bahdanau, Cho & Bengio 2015, "Neural Machine
    Translation by Jointly Learning to Align and Translate").

    The decoder state `q` scores each encoder hidden state `h_j` with
    `v^T tanh(W1 q + W2 h_j)`; the scores are softmaxed over j and the hidden
    states summed with those weights into the context vector.

    Args:
        units: int, size of the hidden layer of the score (rows of W1, W2).
        kernel_initializer: initializer of W1, W2 and v.
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
    >>> decoder_state = keras.random.normal((2, 8))
    >>> context, weights = BahdanauAttention(units=10)(
    ...     decoder_state, encoder_states, return_attention_scores=True)
    >>> tuple(context.shape), tuple(weights.shape)
    ((2, 16), (2, 7))
    """

    def __init__(self, units, kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.units = check_positive_int("units", units)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, query_shape, value_shape):
        def dense(name):
            return keras.layers.Dense(
                self.units if name != "v" else 1,
                use_bias=False,  # the paper's score has no biases
                kernel_initializer=clone_initializer(self.kernel_initializer),
                dtype=self.dtype_policy,
                name=name,
            )

        self.W1, self.W2, self.v = dense("W1"), dense("W2"), dense("v")
        self.W1.build((None, query_shape[-1]))
        self.W2.build((None, value_shape[-1]))
        self.v.build((None, self.units))

    def alignment_scores(self, query, value):
        query_features = ops.expand_dims(self.W1(query), 2)  # [B, Tq, 1, U]
        value_features = ops.expand_dims(self.W2(value), 1)  # [B, 1, Tv, U]
        hidden = ops.tanh(query_features + value_features)  # [B, Tq, Tv, U]
        return ops.squeeze(self.v(hidden), -1)  # [B, Tq, Tv]

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "units": self.units,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config
