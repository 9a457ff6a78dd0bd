import math

import keras
from keras import ops

from keras_attention.utils import check_positive_int


def check_token_ids(ids, vocabulary_size):
    """Raises a `ValueError` naming the first id outside [0, vocabulary_size).

    Only where the values can be read (an eager call); inside a traced graph
    they cannot, and there TensorFlow on CPU stops at the lookup with the
    offending index, while GPUs and JAX would give zeros.
    """
    try:
        values = ops.convert_to_numpy(ids)
    except (NotImplementedError, ValueError, TypeError):  # symbolic: inside a traced graph
        return
    outside = values[(values < 0) | (values >= vocabulary_size)]
    if outside.size:
        raise ValueError(
            f"Token id {outside.flat[0]} is outside the vocabulary of {vocabulary_size} ids "
            f"(0 to {vocabulary_size - 1})."
        )


@keras.saving.register_keras_serializable(package="keras_attention")
class TokenEmbedding(keras.layers.Embedding):
    """Token ids to vectors, scaled by sqrt(d_model), and back to logits.

    "In the embedding layers, we multiply those weights by sqrt(d_model)"
    (Attention Is All You Need, 3.4); the same matrix, transposed, can be the
    pre-softmax projection (`reverse=True`), which ties input and output
    embeddings. Padding id 0 produces a Keras mask.

    Args:
        vocabulary_size: int, number of token ids.
        model_dim: int, embedding width.
        scale: bool, multiply the embeddings by sqrt(model_dim). Default True.
        **kwargs: `keras.layers.Embedding` arguments.

    Call arguments:
        inputs: int `[B, T]` ids, or with `reverse=True` float `[B, T, D]`.
        reverse: bool, return logits `inputs @ E^T` `[B, T, V]` instead.
    """

    def __init__(self, vocabulary_size, model_dim, scale=True, **kwargs):
        kwargs.setdefault("mask_zero", True)
        super().__init__(
            check_positive_int("vocabulary_size", vocabulary_size),
            check_positive_int("model_dim", model_dim),
            **kwargs,
        )
        self.vocabulary_size = vocabulary_size
        self.model_dim = model_dim
        self.scale = bool(scale)

    def call(self, inputs, reverse=False):
        if reverse:
            kernel = ops.cast(self.embeddings, self.compute_dtype)
            return ops.matmul(inputs, ops.transpose(kernel))  # [B, T, V]
        check_token_ids(inputs, self.vocabulary_size)
        embedded = super().call(inputs)
        if self.scale:
            embedded = embedded * ops.cast(math.sqrt(self.model_dim), embedded.dtype)
        return embedded

    def compute_mask(self, inputs, mask=None):
        if "int" not in keras.backend.standardize_dtype(inputs.dtype):
            return mask  # reverse=True: logits keep the mask of what came in
        return ops.not_equal(inputs, 0) if self.mask_zero else None

    def compute_output_spec(self, inputs, reverse=False):
        shape = self.compute_output_shape(inputs.shape, reverse=reverse)
        return keras.KerasTensor(shape, dtype=self.compute_dtype)

    def compute_output_shape(self, input_shape, reverse=False):
        if reverse:
            return tuple(input_shape[:-1]) + (self.vocabulary_size,)
        return tuple(input_shape) + (self.model_dim,)

    def get_config(self):
        config = super().get_config()
        for name in ("input_dim", "output_dim"):
            config.pop(name)
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "model_dim": self.model_dim,
                "scale": self.scale,
            }
        )
        return config


@keras.saving.register_keras_serializable(package="keras_attention")
class LogitsBias(keras.layers.Layer):
    """Adds a learned bias `[V]` to logits `[..., V]`: the bias a tied
    output projection (`TokenEmbedding(reverse=True)`) lacks, such as
    Marian's `final_logits_bias`.

    Args:
        vocabulary_size: int, V.
        **kwargs: base layer arguments (`name`, `dtype`).
    """

    def __init__(self, vocabulary_size, **kwargs):
        super().__init__(**kwargs)
        self.vocabulary_size = check_positive_int("vocabulary_size", vocabulary_size)
        self.supports_masking = True

    def build(self, input_shape=None):
        self.bias = self.add_weight(shape=(self.vocabulary_size,), initializer="zeros", name="bias")

    def call(self, logits):
        return logits + ops.cast(self.bias, logits.dtype)

    def get_config(self):
        config = super().get_config()
        config["vocabulary_size"] = self.vocabulary_size
        return config

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)


def output_layers(vocabulary_size, tie_output_embeddings, output_bias, policy):
    """The pre-softmax projection's own layers, `(projection, bias)`: a
    `Dense` layer named "logits" and no bias, or, when tied to the token
    embedding, no layer of its own and a `LogitsBias` if `output_bias`."""
    if not tie_output_embeddings:
        return keras.layers.Dense(vocabulary_size, dtype=policy, name="logits"), None
    bias = LogitsBias(vocabulary_size, dtype=policy, name="logits_bias") if output_bias else None
    return None, bias


def project(x, embedding, projection, bias):
    """Vectors `[B, T, D]` -> logits `[B, T, V]` through the layers of
    `output_layers`: `projection`, or the tied `embedding` reversed plus
    `bias`."""
    if projection is not None:
        return projection(x)
    logits = embedding(x, reverse=True)
    return logits if bias is None else bias(logits)
