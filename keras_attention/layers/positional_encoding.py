import math

import keras
from keras import ops

from keras_attention.renamed import renamed_argument
from keras_attention.saving import build_from_config
from keras_attention.utils import check_choice, check_positive_int

LAYOUTS = ("interleaved", "halves")


def check_length_fits(length, start_index, max_position_embeddings):
    """ValueError when a static `start_index + length` exceeds
    `max_position_embeddings`."""
    if max_position_embeddings is None or length is None or not isinstance(start_index, int):
        return
    if start_index + length > max_position_embeddings:
        raise ValueError(
            f"The sequence (length {length}, start_index {start_index}) is longer "
            f"than max_position_embeddings={max_position_embeddings}."
        )


@keras.saving.register_keras_serializable(package="keras_attention")
class PositionalEncoding(keras.layers.Layer):
    """Adds the sinusoidal positional encoding of "Attention Is All You Need".

    For position `pos` and dimension `i` of a `d_model`-wide embedding:
    `PE(pos, 2i) = sin(pos / 10000^(2i / d_model))` and
    `PE(pos, 2i + 1) = cos(pos / 10000^(2i / d_model))`.
    Nothing is learned and nothing is stored, so any length works.

    Args:
        max_position_embeddings: optional int, the most positions; when
            given, a static sequence that ends past it raises `ValueError`.
            Default None (no limit). (Its name before was `max_length`: that
            still works for one release, with a `FutureWarning`.)
        layout: `"interleaved"` (the paper's: sines at even dimensions,
            cosines at odd ones) or `"halves"` (the same sines in the first
            half of the vector and the cosines in the second, as tensor2tensor
            and Marian, so OPUS-MT's weights, have them). Default `"interleaved"`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        x: `[B, T, D]` embeddings.
        start_index: int (or int tensor), position of `x[:, 0]`; use the cache
            index when decoding one step at a time. Default 0.

    Returns:
        `x + PE[start_index : start_index + T]`, `[B, T, D]`.

    Example:

    >>> x = keras.ops.zeros((1, 4, 6))
    >>> tuple(PositionalEncoding()(x).shape)
    (1, 4, 6)
    """

    def __init__(self, max_position_embeddings=None, layout="interleaved", **kwargs):
        max_position_embeddings = renamed_argument(
            kwargs, "max_position_embeddings", max_position_embeddings
        )
        super().__init__(**kwargs)
        self.max_position_embeddings = check_positive_int(
            "max_position_embeddings", max_position_embeddings, allow_none=True
        )
        self.layout = check_choice("layout", layout, LAYOUTS)
        self.supports_masking = True

    def call(self, x, start_index=0):
        length, depth = x.shape[1], x.shape[-1]
        check_length_fits(length, start_index, self.max_position_embeddings)
        positions = ops.cast(ops.arange(ops.shape(x)[1]) + start_index, "float32")  # [T]
        # 1 / 10000^(2i / d_model) for each pair i of a sine and a cosine:
        # dimensions (2i, 2i + 1) interleaved, (i, d_model / 2 + i) in halves.
        dimension = ops.arange(depth)
        if self.layout == "interleaved":
            pair, is_sine = dimension // 2, dimension % 2 == 0  # [D]: 0, 0, 1, 1, ...
        else:
            half = (depth + 1) // 2
            pair, is_sine = dimension % half, dimension < half  # [D]: 0, 1, .., 0, 1, ..
        frequencies = ops.exp(ops.cast(pair, "float32") * (-2.0 * math.log(10000.0) / depth))
        angles = ops.expand_dims(positions, 1) * frequencies  # [T, D]
        encoding = ops.where(is_sine, ops.sin(angles), ops.cos(angles))  # [T, D]
        return x + ops.cast(encoding, x.dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            {"max_position_embeddings": self.max_position_embeddings, "layout": self.layout}
        )
        return config

    @classmethod
    def from_config(cls, config):
        # Files saved before the rename hold `max_length`: read as the new
        # name, without a warning.
        return build_from_config(cls, config, super().from_config)

    def compute_output_shape(self, x_shape):
        return tuple(x_shape)
