import keras
from keras import ops

from keras_attention.layers.positional_encoding import check_length_fits
from keras_attention.utils import check_positive_int


@keras.saving.register_keras_serializable(package="keras_attention")
class PositionEmbedding(keras.layers.Layer):
    """Adds a learned position embedding (as in BERT and GPT), the learned
    alternative to `PositionalEncoding` that the Transformer paper compares.

    Args:
        max_length: int, the number of positions that have an embedding.
        initializer: initializer of the `[max_length, D]` table.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        x: `[B, T, D]` embeddings, `start_index + T <= max_length`.
        start_index: int (or int tensor), position of `x[:, 0]`. Default 0.

    Returns:
        `x + P[start_index : start_index + T]`, `[B, T, D]`.

    Example:

    >>> x = keras.ops.zeros((2, 4, 6))
    >>> tuple(PositionEmbedding(max_length=10)(x).shape)
    (2, 4, 6)
    """

    def __init__(self, max_length, initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.max_length = check_positive_int("max_length", max_length)
        self.initializer = keras.initializers.get(initializer)
        self.supports_masking = True

    def build(self, x_shape):
        self.embeddings = self.add_weight(
            shape=(self.max_length, x_shape[-1]),
            initializer=self.initializer,
            name="embeddings",
        )

    def call(self, x, start_index=0):
        check_length_fits(x.shape[1], start_index, self.max_length)
        positions = ops.arange(ops.shape(x)[1]) + start_index  # [T]
        rows = ops.take(self.embeddings, positions, axis=0)  # [T, D]
        return x + ops.cast(rows, x.dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "max_length": self.max_length,
                "initializer": keras.initializers.serialize(self.initializer),
            }
        )
        return config

    def compute_output_shape(self, x_shape):
        return tuple(x_shape)
