import keras
from keras import ops

from keras_attention.layers.positional_encoding import check_length_fits
from keras_attention.renamed import renamed_argument
from keras_attention.saving import build_from_config
from keras_attention.utils import check_positive_int


@keras.saving.register_keras_serializable(package="keras_attention")
class PositionEmbedding(keras.layers.Layer):
    """Adds a learned position embedding (as in BERT and GPT), the learned
    alternative to `PositionalEncoding` that the Transformer paper compares.

    Args:
        max_position_embeddings: int, the number of positions that have an
            embedding (Hugging Face's name); required. (Its name before was
            `max_length`: that still works for one release, with a
            `FutureWarning`.)
        initializer: initializer of the `[max_position_embeddings, D]` table.
            Default `"glorot_uniform"`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        x: `[B, T, D]` embeddings, `start_index + T <= max_position_embeddings`.
        start_index: int (or int tensor), position of `x[:, 0]`. Default 0.

    Returns:
        `x + P[start_index : start_index + T]`, `[B, T, D]`.

    Example:

    >>> x = keras.ops.zeros((2, 4, 6))
    >>> tuple(PositionEmbedding(max_position_embeddings=10)(x).shape)
    (2, 4, 6)
    """

    def __init__(self, max_position_embeddings=None, initializer="glorot_uniform", **kwargs):
        max_position_embeddings = renamed_argument(
            kwargs, "max_position_embeddings", max_position_embeddings
        )
        super().__init__(**kwargs)
        self.max_position_embeddings = check_positive_int(
            "max_position_embeddings", max_position_embeddings
        )
        self.initializer = keras.initializers.get(initializer)
        self.supports_masking = True

    def build(self, x_shape):
        self.embeddings = self.add_weight(
            shape=(self.max_position_embeddings, x_shape[-1]),
            initializer=self.initializer,
            name="embeddings",
        )

    def call(self, x, start_index=0):
        check_length_fits(x.shape[1], start_index, self.max_position_embeddings)
        positions = ops.arange(ops.shape(x)[1]) + start_index  # [T]
        rows = ops.take(self.embeddings, positions, axis=0)  # [T, D]
        return x + ops.cast(rows, x.dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "max_position_embeddings": self.max_position_embeddings,
                "initializer": keras.initializers.serialize(self.initializer),
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        # Files saved before the rename hold `max_length`: read as the new
        # name, without a warning.
        return build_from_config(cls, config, super().from_config)

    def compute_output_shape(self, x_shape):
        return tuple(x_shape)
