"""What the package's modules share: argument checks, the constants of token
ids and impossible scores, and the base of its layers.

Internal to the package (layers, models, decoding, export and recipes import
from here); users do not need it.
"""

import keras
import numpy as np
from keras import ops

from keras_attention.saving import build_from_config, versioned

# Token ids every tokeniser reserves: padding (never generated), the start
# and end of a sequence, and a token outside the vocabulary.
PAD_ID, START_ID, END_ID, UNKNOWN_ID = range(4)

# A score or log-probability that must never win: exp() of it is exactly 0 in
# float32, and it never overflows. Softmax and decoding always run in float32.
NEG_INF = -1e9


def check_positive_int(name, value, allow_none=False):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"`{name}` must be a positive integer. Received: {name}={value!r}")
    return value


def check_rate(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ValueError(f"`{name}` must be a float in [0, 1). Received: {name}={value!r}")
    return float(value)


def check_bool(name, value):
    if not isinstance(value, bool):
        raise ValueError(f"`{name}` must be True or False. Received: {name}={value!r}")
    return value


def check_number(name, value, above=None, at_least=None):
    """A real number (not a bool) `> above` or `>= at_least`, as a float."""
    bound = f"> {above}" if above is not None else f">= {at_least}"
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if (
        not is_number
        or (above is not None and not value > above)
        or (at_least is not None and not value >= at_least)
    ):
        raise ValueError(f"`{name}` must be a number {bound}. Received: {name}={value!r}")
    return float(value)


def check_choice(name, value, choices):
    if value not in choices:
        raise ValueError(f"`{name}` must be one of {tuple(choices)}. Received: {name}={value!r}")
    return value


def clone_initializer(initializer):
    """A fresh copy, so two sub-layers never share one seeded initializer."""
    initializer = keras.initializers.get(initializer)
    return initializer.__class__.from_config(initializer.get_config())


def pack_outputs(output, attention_scores=None, cache=None):
    """The main output, then the attention scores and the cache when given:
    one tensor when neither is, else a tuple."""
    extras = tuple(x for x in (attention_scores, cache) if x is not None)
    return (output, *extras) if extras else output


class Layer(keras.layers.Layer):
    """Base of the package's layers, which may return extra outputs.

    `compute_output_shape` describes the main output; the symbolic output
    spec is traced from `call`, so the optional outputs (attention scores,
    caches) get the right shapes and dtypes too. Configs carry the package's
    version (see `keras_attention.saving`).
    """

    def compute_output_spec(self, *args, **kwargs):
        # `keras.Operation`'s: trace `call`. (`keras.layers.Layer`'s would
        # build the spec from `compute_output_shape` alone.)
        return keras.Operation.compute_output_spec(self, *args, **kwargs)

    def get_config(self):
        return versioned(super().get_config())

    @classmethod
    def from_config(cls, config):
        return build_from_config(cls, config, super().from_config)


def hash_uint32(x):
    """A 32-bit integer hash of a uint32 tensor, elementwise, with good
    avalanche (each input bit flips about half of the output bits). uint32
    products wrap around alike on every backend, so the same bits come out
    everywhere: random draws that need no generator state."""
    multiplier = uint32(0x45D9F3B)
    for _ in range(2):
        x = ops.multiply(ops.bitwise_xor(ops.right_shift(x, uint32(16)), x), multiplier)
    return ops.bitwise_xor(ops.right_shift(x, uint32(16)), x)


def uniform_from_bits(bits):
    """uint32 bits (of `hash_uint32`) -> float32 uniform in (0, 1): the top 24
    bits (all a float32 holds), centred in their interval, so never 0 or 1."""
    return (ops.cast(ops.right_shift(bits, uint32(8)), "float32") + 0.5) / float(1 << 24)


def uint32(value):
    return ops.convert_to_tensor(np.uint32(value))


def tensorflow_kernels_are_faster():
    """True on TensorFlow outside XLA (eagerly, or in a `tf.function`
    without `jit_compile`). There every operation is a kernel of its own,
    and TensorFlow's own kernels beat what suits XLA: Keras's dropout is
    one Philox kernel and a multiply, the package's hash ten passes over
    the tensor (the dates Transformer's step was 8% slower with the hash),
    and `slice_update` is cheaper as `TensorStridedSliceUpdate`. Under XLA,
    which fuses the hash into one loop and writes slices in place, and on
    JAX, the other way is the faster."""
    if keras.backend.backend() != "tensorflow":
        return False

    from keras_attention import compat

    return not compat.in_xla_context()


def slice_update(inputs, start_indices, updates):
    """`keras.ops.slice_update`, cheaper on TensorFlow without XLA.

    Keras's is TensorFlow's `XlaDynamicUpdateSlice`, which outside XLA runs
    through an XLA kernel compiled on the spot, a copy of the whole input and
    a dispatch each call: 0.08 ms a write of a 2 MiB KV cache in a
    `tf.function` loop, against 0.03 ms for TensorFlow's own
    `TensorStridedSliceUpdate`. The decoding loops write their caches and
    tokens this way at every step. Under XLA, which writes in place, and
    on JAX, this is Keras's."""
    if not tensorflow_kernels_are_faster():
        return ops.slice_update(inputs, start_indices, updates)
    import tensorflow as tf

    start = tf.stack([tf.cast(index, "int32") for index in start_indices])
    end = start + tf.shape(updates, out_type="int32")
    return tf.raw_ops.TensorStridedSliceUpdate(
        input=inputs, begin=start, end=end, strides=tf.ones_like(start), value=updates
    )
