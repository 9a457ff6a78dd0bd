"""Dropout whose keep/drop decisions are a hash of each element's position.

Every dropout of the package's layers and models is this one; a model of
your own that mixes its blocks with other layers can use it too
(`keras_attention.layers.Dropout`).

`keras.layers.Dropout` draws a fresh random number per element from the
backend's generator (Philox on TensorFlow, threefry on JAX). Under a
compiler those draws are a large part of a training step on a CPU: in a
2-layer encoder step (B=32, T=128, d_model 256, rate 0.1) they took a
quarter of TensorFlow's step with XLA and more of JAX's
(`python -m benchmarks.run --encoder-only`). Here, under XLA (TensorFlow
with `jit_compile`) and on JAX, the layer's seed generator draws one number
per call, the seed, and each element is kept or dropped by a 32-bit integer
hash of the seed and its position, chained axis by axis (`hashed_bits`):
a few integer operations per element, which XLA fuses into the multiply.
On TensorFlow without XLA, where each of those operations would be a pass
of its own, Keras's own kernel is the faster and is used.

The distribution is Keras's either way: each element is kept with
probability `1 - rate` (to within 2^-32) and scaled by `1 / (1 - rate)`,
independently of the others, a new draw at every call, the same draws after
`keras.utils.set_random_seed` or a restored seed state. Blocked attention
(`chunk_size`) draws its weights' decisions with the same hash of the same
positions, so where the hash is used the dense and blocked paths drop the
same weights.
"""

import keras
from keras import ops

from keras_attention.utils import hash_uint32, tensorflow_kernels_are_faster, uint32


@keras.saving.register_keras_serializable(package="keras_attention")
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout`, its decisions hashed from the element
    positions under XLA and on JAX (see the module's docstring).

    Args and call: as `keras.layers.Dropout` (`rate`, `noise_shape`, `seed`;
    `layer(inputs, training=None)`). With a `noise_shape`, Keras's own draw
    is used.
    """

    def call(self, inputs, training=False):
        if (
            not training
            or self.rate == 0
            or self.noise_shape is not None
            or tensorflow_kernels_are_faster()
        ):
            return super().call(inputs, training=training)
        shape = ops.shape(inputs)
        positions = [ops.arange(size) for size in shape]
        keep = keep_mask(hashed_bits(self.draw_seed(), positions), self.rate)
        return ops.where(keep, inputs * (1.0 / (1.0 - self.rate)), ops.zeros_like(inputs))

    def draw_seed(self):
        """A new int32 seed from the layer's seed generator, one per call."""
        return keras.random.randint((), 0, 2**31 - 1, dtype="int32", seed=self.seed_generator)


def hashed_bits(seed, positions):
    """uint32 bits of shape `[len(p) for p in positions]`, element
    `(i, j, ...)` a hash of `seed`, then of `positions[0][i]`, then of
    `positions[1][j]`, and so on: the hash of one axis keys the next.

    Args:
        seed: int32 or uint32 scalar tensor.
        positions: one 1-D integer tensor per axis (the positions of a slice
            may be given, as blocked attention does).
    """
    bits = hash_uint32(ops.cast(seed, "uint32"))
    for axis_positions in positions:
        bits = hash_uint32(ops.bitwise_xor(bits[..., None], ops.cast(axis_positions, "uint32")))
    return bits


def keep_mask(bits, rate):
    """True where an element is kept: with probability `1 - rate` for
    uniformly random `bits`."""
    return bits >= uint32(min(round(rate * 2**32), 2**32 - 1))
