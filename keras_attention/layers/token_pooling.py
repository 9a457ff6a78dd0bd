import keras
import numpy as np
from keras import ops

from keras_attention.layers._attention import check_mask, merge_masks
from keras_attention.utils import check_choice

FLOAT32_LOWEST = float(np.finfo("float32").min)
MODES = ("mean", "cls", "max", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")


@keras.saving.register_keras_serializable(package="keras_attention")
class TokenPooling(keras.layers.Layer):
    """Pools the token vectors of each text into one vector, as the `Pooling`
    module of sentence-transformers does (Sentence-BERT, Reimers & Gurevych
    2019).

    Only the real tokens (`True` in the mask) count; with no mask every token
    is real. The modes, for the real tokens `x_t` of a text:

    - `"mean"`: `sum(x_t) / n`, `n` the number of real tokens.
    - `"cls"`: the vector at position 0, whatever the mask (the `[CLS]` token
      of a right-padded BERT input).
    - `"max"`: the elementwise maximum.
    - `"mean_sqrt_len_tokens"`: `sum(x_t) / sqrt(n)`.
    - `"weightedmean"`: `sum(w_t x_t) / sum(w_t)` with `w_t = t + 1`, `t` the
      position in the padded sequence (so a left-padded text weighs its tokens
      from a later start, as sentence-transformers does; SGPT, Muennighoff 2022).
    - `"lasttoken"`: the vector at the last real position (the last `True` of
      the mask), for left and right padding alike.

    A text with no real token gives zeros in every mode but `"cls"`, which
    still gives position 0 (sentence-transformers gives the same, except
    `"max"`, where it gives -1e9 in every feature). Sums, counts and the
    division run in float32, so `mixed_float16` and `mixed_bfloat16` neither
    overflow nor meet a large negative constant; the output is in the
    layer's compute dtype.

    Args:
        mode: one of `"mean"`, `"cls"`, `"max"`, `"mean_sqrt_len_tokens"`,
            `"weightedmean"`, `"lasttoken"`. Default `"mean"`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        x: `[B, T, D]` token vectors.
        padding_mask: optional bool `[B, T]` (or integer 0/1), True at real
            tokens. Default None: every token is real.
        mask: Keras implicit mask of `x` (e.g. from `Embedding(mask_zero=True)`),
            filled in by Keras; combined with `padding_mask`.

    Returns:
        `[B, D]`, one vector per text. The output has no Keras mask.

    Example:

    >>> x = keras.ops.reshape(keras.ops.arange(12, dtype="float32"), (2, 3, 2))
    >>> mask = keras.ops.array([[True, True, False], [True, True, True]])
    >>> keras.ops.convert_to_numpy(TokenPooling("mean")(x, padding_mask=mask)).tolist()
    [[1.0, 2.0], [8.0, 9.0]]
    >>> keras.ops.convert_to_numpy(TokenPooling("lasttoken")(x, padding_mask=mask)).tolist()
    [[2.0, 3.0], [10.0, 11.0]]
    """

    def __init__(self, mode="mean", **kwargs):
        super().__init__(**kwargs)
        self.mode = check_choice("mode", mode, MODES)

    def call(self, x, padding_mask=None, mask=None):
        if len(x.shape) != 3:
            raise ValueError(
                f"`x` must be token vectors [B, T, D]. Received: x.shape={tuple(x.shape)}"
            )
        padding_mask = check_mask("padding_mask", padding_mask, 2, tuple(x.shape[:2]))
        padding_mask = merge_masks(padding_mask, mask)
        x = ops.cast(x, "float32")
        if self.mode == "cls":
            return ops.cast(x[:, 0], self.compute_dtype)
        if padding_mask is None:
            padding_mask = ops.ones(ops.shape(x)[:2], "bool")
        real = ops.expand_dims(padding_mask, -1)  # [B, T, 1]
        positions = ops.arange(ops.shape(x)[1])  # [T]
        zeros = ops.zeros_like(x)

        if self.mode == "max":
            # Padding takes float32's lowest value (never a float16 constant).
            pooled = ops.max(ops.where(real, x, FLOAT32_LOWEST), axis=1)  # [B, D]
            has_real = ops.any(padding_mask, axis=1, keepdims=True)  # [B, 1]
            pooled = ops.where(has_real, pooled, ops.zeros_like(pooled))
        elif self.mode == "lasttoken":
            last = ops.max(ops.where(padding_mask, positions, -1), axis=1)  # [B]; -1: none
            chosen = ops.expand_dims(positions == ops.expand_dims(last, 1), -1)  # [B, T, 1]
            pooled = ops.sum(ops.where(chosen, x, zeros), axis=1)
        else:
            weights = ops.cast(padding_mask, "float32")  # [B, T]
            if self.mode == "weightedmean":
                weights = weights * ops.cast(positions + 1, "float32")
            total = ops.sum(ops.where(real, x * ops.expand_dims(weights, -1), zeros), axis=1)
            # Counts and weight sums are whole numbers: at least 1 for a text
            # with a real token; 0 (whose sum is 0) becomes 1, so it gives 0.
            denominator = ops.maximum(ops.sum(weights, axis=1, keepdims=True), 1.0)  # [B, 1]
            if self.mode == "mean_sqrt_len_tokens":
                denominator = ops.sqrt(denominator)
            pooled = total / denominator
        return ops.cast(pooled, self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update({"mode": self.mode})
        return config

    def compute_output_shape(self, x_shape):
        return (x_shape[0], x_shape[-1])

    def compute_mask(self, x, mask=None):
        return None
