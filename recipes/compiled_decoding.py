"""A decoding compiled for Keras's backend, as the recipes evaluate with it:
a `tf.function` on TensorFlow, a `jax.jit` on JAX."""

import keras
import numpy as np
import tensorflow as tf


def compile_decoding(model, search, max_input_length):
    """`search(ids) -> ids` (a decoding of `model`) compiled for Keras's
    backend; the returned function takes numpy ids `[B, S]`, S <=
    `max_input_length`, and returns numpy-convertible ids."""
    if keras.backend.backend() != "jax":
        # No AutoGraph: the decoding loops are `keras.ops` code that JAX
        # traces as it is, and converting them costs seconds a trace.
        return tf.function(search, reduce_retracing=True, autograph=False)
    import jax

    # The weights are arguments, not constants folded into the program.
    @jax.jit
    def search_with(weights, ids):
        mapping = list(zip(model.variables, weights, strict=True))
        with keras.StatelessScope(state_mapping=mapping):
            return search(ids)

    def decode(ids):
        # Padded to `max_input_length`, so the search compiles once.
        ids = np.pad(ids, [(0, 0), (0, max_input_length - ids.shape[1])])
        return search_with([variable.value for variable in model.variables], ids)

    return decode
