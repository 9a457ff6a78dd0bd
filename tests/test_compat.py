"""`keras_attention.compat`: each private API still does what the package
relies on, and is still needed. (The trainer patch: tests/recipes/
test_strategy.py shows Keras's fault and the fix, test_multi_worker.py the
multi-worker one.)"""

import keras
import tensorflow as tf

from keras_attention import compat
from keras_attention.utils import Layer


def test_an_xla_context_is_told_from_a_plain_graph_and_eager():
    seen = []

    def traced():
        seen.append(compat.in_xla_context())
        return tf.constant(0)

    tf.function(traced)()
    tf.function(traced, jit_compile=True)()
    traced()
    assert seen == [False, True, False]


def test_tensorflow_still_has_no_public_switch_to_turn_determinism_off():
    """When it gets one, `compat.disable_op_determinism` should use it."""
    assert not hasattr(tf.config.experimental, "disable_op_determinism")
    assert not hasattr(tf.config, "disable_op_determinism")
    tf.config.experimental.enable_op_determinism()
    try:
        assert compat.is_op_determinism_enabled()
    finally:
        compat.disable_op_determinism()
    assert not compat.is_op_determinism_enabled()


def test_layers_trace_call_for_their_extra_outputs():
    """`keras.layers.Layer.compute_output_spec` would build the spec from
    `compute_output_shape` alone, which describes the main output; the
    package's layers trace `call` (`keras.Operation`'s) for every output."""

    def two_outputs(base):
        class TwoOutputs(base):
            def call(self, x):
                return x, keras.ops.sum(x, axis=-1)

            def compute_output_shape(self, shape):
                return shape

        return TwoOutputs()(keras.Input((3, 4)))

    output, total = two_outputs(Layer)
    assert tuple(output.shape) == (None, 3, 4) and tuple(total.shape) == (None, 3)
    # Keras's own gives one output of the main shape: the override is needed.
    assert not isinstance(two_outputs(keras.layers.Layer), tuple)
