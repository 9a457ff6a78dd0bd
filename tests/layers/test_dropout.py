"""The package's dropout: Keras's distribution, decisions hashed from the
element positions under XLA and on JAX, Keras's own kernel on TensorFlow
without XLA (`keras_attention.layers.dropout`), on the active backend."""

import keras
import numpy as np
import pytest
from helpers import compiled, layer_gradients, run_layer_test, to_numpy

from keras_attention.layers import MultiHeadSelfAttention
from keras_attention.layers.dropout import Dropout, hashed_bits

TENSORFLOW = keras.backend.backend() == "tensorflow"


def training_call(layer, x):
    """`layer(x, training=True)` where the hash is used: under XLA on
    TensorFlow (eagerly it takes Keras's kernel), as it is on JAX."""
    if TENSORFLOW:
        return to_numpy(compiled(lambda x: layer(x, training=True), jit_compile=True)(x))
    return to_numpy(layer(x, training=True))


def output_and_gradient(layer, x, upstream):
    """`layer(x, training=True)` and d/dx of sum(output * upstream), where
    the hash is used (as `training_call`)."""
    if not TENSORFLOW:
        output, gradients = layer_gradients(layer, [x], upstream, training=True)
        return output, gradients[0]
    import tensorflow as tf

    def function(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            output = layer(x, training=True)
            loss = tf.reduce_sum(output * upstream)
        return output, tape.gradient(loss, x)

    output, gradient = compiled(function, jit_compile=True)(tf.constant(x))
    return output.numpy(), gradient.numpy()


def numpy_hash(x):
    """The 32-bit hash of `keras_attention.utils.hash_uint32`, in numpy."""
    x = x.astype(np.uint64)
    for _ in range(2):
        x = (((x >> 16) ^ x) * 0x45D9F3B) & 0xFFFFFFFF
    return ((x >> 16) ^ x).astype(np.uint32)


def numpy_bits(seed, shape):
    """The chain of `hashed_bits` over every position of `shape`, in numpy."""
    bits = numpy_hash(np.array(seed, np.uint32))
    for size in shape:
        bits = numpy_hash(bits[..., None] ^ np.arange(size, dtype=np.uint32))
    return bits


def kept(layer, x):
    """The keep/drop decisions of one training call, from its output."""
    return training_call(layer, x) != 0


def test_bits_equal_an_independent_numpy_hash():
    positions = [keras.ops.arange(size) for size in (3, 5, 7)]
    bits = to_numpy(hashed_bits(keras.ops.convert_to_tensor(12345, "int32"), positions))
    np.testing.assert_array_equal(bits, numpy_bits(12345, (3, 5, 7)))


@pytest.mark.parametrize("rate", [0.1, 0.5, 0.9])
def test_each_element_is_kept_with_probability_one_minus_rate_and_scaled(rate):
    x = np.ones((4, 64, 128), "float32")
    output = training_call(Dropout(rate, seed=1), x)
    share = (output != 0).mean()
    sigma = np.sqrt(rate * (1 - rate) / x.size)
    assert abs(share - (1 - rate)) < 5 * sigma, share
    np.testing.assert_allclose(output[output != 0], 1 / (1 - rate), rtol=1e-6)


def test_decisions_are_independent_of_their_neighbours_and_of_the_last_call():
    """Rate 0.5 over 256 x 256 elements: a pair of neighbours along either
    axis is kept together a quarter of the time, and so is one element in
    two successive calls."""
    layer = Dropout(0.5, seed=2)
    x = np.ones((256, 256), "float32")
    first, second = kept(layer, x), kept(layer, x)
    pairs = {
        "along rows": first[:, 1:] & first[:, :-1],
        "along columns": first[1:] & first[:-1],
        "successive calls": first & second,
    }
    for name, both in pairs.items():
        sigma = np.sqrt(0.25 * 0.75 / both.size)
        assert abs(both.mean() - 0.25) < 5 * sigma, (name, both.mean())


def test_the_same_seed_gives_the_same_draws_and_inference_is_the_identity():
    x = np.random.default_rng(0).normal(size=(3, 10, 8)).astype("float32")
    keras.utils.set_random_seed(7)
    first = Dropout(0.3)
    keras.utils.set_random_seed(7)
    again = Dropout(0.3)
    np.testing.assert_array_equal(kept(first, x), kept(again, x))
    assert not np.array_equal(kept(first, x), kept(first, x))
    np.testing.assert_array_equal(to_numpy(first(x)), x)
    np.testing.assert_array_equal(to_numpy(Dropout(0.0)(x, training=True)), x)


def test_the_gradient_is_the_upstream_gradient_where_kept_scaled():
    random = np.random.default_rng(1)
    x = random.normal(size=(2, 16, 8)).astype("float32")
    upstream = random.normal(size=x.shape).astype("float32")
    output, gradient = output_and_gradient(Dropout(0.25, seed=3), x, upstream)
    mask = output != 0
    assert 0 < mask.mean() < 1
    np.testing.assert_allclose(output, np.where(mask, x / 0.75, 0), rtol=1e-6)
    np.testing.assert_allclose(gradient, np.where(mask, upstream / 0.75, 0), rtol=1e-6)


def test_keras_kernel_is_taken_on_tensorflow_without_xla_only():
    """Eagerly on TensorFlow the draws are `keras.layers.Dropout`'s own, bit
    for bit; on JAX, and under XLA, they are the hash's."""
    x = np.random.default_rng(4).normal(size=(3, 10, 8)).astype("float32")

    def keras_draws():
        return to_numpy(keras.layers.Dropout(0.3, seed=9)(x, training=True))

    eager = to_numpy(Dropout(0.3, seed=9)(x, training=True))
    assert np.array_equal(eager, keras_draws()) == TENSORFLOW
    if TENSORFLOW:  # in a graph without XLA too
        layer = Dropout(0.3, seed=9)
        graph = to_numpy(compiled(lambda x: layer(x, training=True))(x))
        np.testing.assert_array_equal(graph, keras_draws())
    assert not np.array_equal(training_call(Dropout(0.3, seed=9), x), keras_draws())


def test_a_noise_shape_takes_keras_draw():
    x = np.ones((4, 5, 6), "float32")
    output = to_numpy(Dropout(0.5, noise_shape=(4, 1, 6), seed=4)(x, training=True))
    # One decision per (row, feature), shared along the middle axis.
    np.testing.assert_array_equal(output, np.broadcast_to(output[:, :1], x.shape))


def test_layer_contract(tmp_path):
    x = np.random.default_rng(2).normal(size=(2, 5, 4)).astype("float32")
    run_layer_test(Dropout, {"rate": 0.2, "seed": 5}, {"x": x}, (2, 5, 4), tmp_path)


def test_dense_and_blocked_attention_drop_the_same_weights():
    """The blocked path hashes the same positions: with dropout on, a layer
    in blocks gives the dense layer's outputs and gradients."""
    x = np.random.default_rng(3).normal(size=(2, 11, 8)).astype("float32")
    upstream = np.random.default_rng(4).normal(size=x.shape).astype("float32")
    results = []
    for chunk_size in (None, 3):
        keras.utils.set_random_seed(11)  # the same weights and seed state
        layer = MultiHeadSelfAttention(2, dropout=0.3, chunk_size=chunk_size)
        layer(x)
        results.append(output_and_gradient(layer, x, upstream))
    (dense, dense_gradient), (blocked, blocked_gradient) = results
    assert not np.allclose(dense, to_numpy(layer(x)))  # dropout was on
    np.testing.assert_allclose(blocked, dense, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(blocked_gradient, dense_gradient, atol=1e-5, rtol=1e-4)
