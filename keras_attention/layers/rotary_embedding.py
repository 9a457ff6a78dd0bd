import keras
from keras import ops

from keras_attention.utils import check_number


def check_scaling_factor(name, value):
    """A rotary scaling factor: a number >= 1 (a float), or a list of them
    (one per pair of features)."""
    if isinstance(value, list | tuple):
        return [check_number(f"{name}[{i}]", factor, at_least=1) for i, factor in enumerate(value)]
    return check_number(name, value, at_least=1)


@keras.saving.register_keras_serializable(package="keras_attention")
class RotaryEmbedding(keras.layers.Layer):
    """Rotary position embedding (RoFormer, Su et al. 2021), as in GPT-NeoX,
    Llama and KerasHub's `RotaryEmbedding`.

    Instead of adding a position vector to each token, the query and key
    of position `pos` are rotated: the feature pairs `(x_i, x_{i + d/2})`
    turn by the angle `pos * theta_i`, `theta_i = max_wavelength^(-2i / d)`.
    A rotation keeps lengths, and the dot product of a query at `m` with a
    key at `n` then depends on the positions only through `m - n`: the
    scores see relative positions, at any length, with nothing learned.

    Args:
        max_wavelength: float, the longest wavelength, the base of theta.
            Default 10000, as in the paper.
        scaling_factor: float >= 1, linear position interpolation (Chen et
            al. 2023): positions are divided by it, so a model trained on T
            positions reads `scaling_factor * T` at the same angles. Or a
            list of `d / 2` floats >= 1, one per pair: each `theta_i` is
            divided by its own (Llama 3.1's `llama3` scaling slows the low
            frequencies and keeps the high ones). Default 1.0.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        x: `[B, T, ..., d]` (sequence second, features last, `d` even): the
            queries or keys, per head `[B, T, H, d]`.
        start_index: int (or int tensor), the position of `x[:, 0]`: the
            cache index when decoding one step at a time. Default 0.

    Returns:
        `x` rotated, same shape and dtype (the angles are computed in float32).

    Example:

    >>> x = keras.random.normal((2, 5, 4, 8))  # [B, T, H, d]
    >>> tuple(RotaryEmbedding()(x).shape)
    (2, 5, 4, 8)
    """

    def __init__(self, max_wavelength=10000.0, scaling_factor=1.0, **kwargs):
        super().__init__(**kwargs)
        self.max_wavelength = check_number("max_wavelength", max_wavelength, above=1)
        self.scaling_factor = check_scaling_factor("scaling_factor", scaling_factor)
        self.supports_masking = True

    def call(self, x, start_index=0):
        depth = x.shape[-1]
        if depth is not None and depth % 2:
            raise ValueError(
                f"RotaryEmbedding turns pairs of features: the last dimension must be even. "
                f"Received: x.shape={tuple(x.shape)}"
            )
        positions = ops.cast(ops.arange(ops.shape(x)[1]) + start_index, "float32")  # [T]
        pair = ops.cast(ops.arange(depth // 2), "float32")  # [d/2]
        theta = ops.power(self.max_wavelength, -2.0 * pair / depth)  # [d/2]
        if isinstance(self.scaling_factor, list):  # one factor per pair
            if len(self.scaling_factor) != depth // 2:
                raise ValueError(
                    f"`scaling_factor` has {len(self.scaling_factor)} factors, one per pair of "
                    f"features; x has {depth // 2} pairs. Received: x.shape={tuple(x.shape)}"
                )
            theta = theta / ops.convert_to_tensor(self.scaling_factor, "float32")
        else:
            positions = positions / self.scaling_factor
        angles = ops.expand_dims(positions, 1) * theta  # [T, d/2]
        # [T, d/2] -> [1, T, 1, ..., d/2]: one angle per position and pair.
        shape = (1, -1) + (1,) * (len(x.shape) - 3) + (depth // 2,)
        cos, sin = ops.reshape(ops.cos(angles), shape), ops.reshape(ops.sin(angles), shape)
        first, second = ops.split(ops.cast(x, "float32"), 2, axis=-1)
        # Each pair (first_i, second_i) turned by its angle.
        rotated = ops.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1)
        return ops.cast(rotated, x.dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            {"max_wavelength": self.max_wavelength, "scaling_factor": self.scaling_factor}
        )
        return config

    def compute_output_shape(self, x_shape):
        return tuple(x_shape)
