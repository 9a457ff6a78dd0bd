"""The one layer-test helper every layer test uses, and small numpy tools."""

import math

import keras
import numpy as np
from keras import ops


def to_numpy(x):
    return ops.convert_to_numpy(x)


def compiled(function, input_signature=None, jit_compile=False):
    """`function` traced into one graph: `tf.function` (XLA when
    `jit_compile`) on TensorFlow, `jax.jit` (always XLA) on JAX."""
    if keras.backend.backend() == "jax":
        import jax

        return jax.jit(function)
    import tensorflow as tf

    return tf.function(function, input_signature=input_signature, jit_compile=jit_compile)


def examples(count):
    """How many examples a `hypothesis` property test draws: `count` on
    TensorFlow, a quarter of it (at least 4) on JAX. The layers and the
    searches are the same code on both backends, written in `keras.ops`;
    the TensorFlow run draws every example, and the JAX run checks that
    JAX's ops agree on the first few. There each example compiles its
    layers and loops anew: the full counts were a third of the JAX step."""
    if keras.backend.backend() == "jax":
        return max(4, count // 4)
    return count


def first_output(outputs):
    return outputs[0] if isinstance(outputs, (tuple, list)) else outputs


def _keras_inputs(arrays):
    """Symbolic inputs whose lengths are unknown (None), as in a real model:
    only the feature width of float inputs is fixed."""

    def shape(array):
        if array.dtype.kind == "f":
            return (None,) * (array.ndim - 2) + array.shape[-1:]
        return (None,) * (array.ndim - 1)

    return {
        name: keras.Input(shape=shape(array), dtype=str(array.dtype), name=name)
        for name, array in arrays.items()
    }


def _call(layer, first_name, tensors, call_kwargs):
    args = dict(tensors)
    first = args.pop(first_name)
    return layer(first, **args, **call_kwargs)


def run_layer_test(
    layer_cls, init_kwargs, inputs, expected_shape, tmp_path, call_kwargs=None, shape_inputs=None
):
    """Checks what every layer of the package must do.

    1. `get_config` holds every constructor argument under its own name and
       `from_config` rebuilds an equal layer;
    2. an eager call gives `expected_shape`, which `compute_output_shape`
       agrees with;
    3. a symbolic (functional) call gives the same outputs as the eager one;
    4. a `.keras` save and reload gives identical outputs;
    5. one `fit` step runs, with a finite loss, and trains the layer's weights
       (or, for a layer without weights, passes gradients to a layer below);
    6. under `mixed_float16` and `mixed_bfloat16`, with the masks given, the
       outputs are finite and in the policy's compute dtype.

    Args:
        layer_cls: the layer class.
        init_kwargs: dict of constructor arguments.
        inputs: dict of numpy arrays passed to `call`, in call order; the first
            is passed positionally, the rest (masks, contexts) by name.
        expected_shape: the main output's shape.
        tmp_path: a folder for the `.keras` file.
        call_kwargs: dict of non-tensor call arguments.
        shape_inputs: names of the inputs whose shapes `compute_output_shape`
            takes, in order; default the first input.
    """
    call_kwargs = call_kwargs or {}
    first_name = next(iter(inputs))

    # 1. Config round trip.
    layer = layer_cls(**init_kwargs)
    config = layer.get_config()
    for name, value in init_kwargs.items():
        assert name in config, f"get_config() lacks constructor argument {name!r}"
        if isinstance(value, (int, float, str, bool)) or value is None:
            assert config[name] == value, (name, config[name], value)
    assert layer_cls.from_config(config).get_config() == config

    # 2. Eager call and compute_output_shape.
    tensors = {name: ops.convert_to_tensor(array) for name, array in inputs.items()}
    eager = to_numpy(first_output(_call(layer, first_name, tensors, call_kwargs)))
    assert eager.shape == tuple(expected_shape), (eager.shape, expected_shape)
    shape_args = [inputs[name].shape for name in shape_inputs or (first_name,)]
    output_shape = layer.compute_output_shape(*shape_args)
    assert tuple(output_shape) == tuple(expected_shape)
    assert np.all(np.isfinite(eager))

    # 3. Symbolic call, lengths unknown: a functional model around the same layer.
    symbolic = _keras_inputs(inputs)
    model = keras.Model(symbolic, first_output(_call(layer, first_name, symbolic, call_kwargs)))
    predicted = model.predict(inputs, verbose=0, batch_size=len(inputs[first_name]))
    np.testing.assert_allclose(predicted, eager, rtol=1e-5, atol=1e-5)

    # 4. `.keras` save and reload.
    path = str(tmp_path / f"{layer_cls.__name__}.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path)
    np.testing.assert_allclose(
        reloaded.predict(inputs, verbose=0, batch_size=len(inputs[first_name])),
        predicted,
        rtol=1e-6,
        atol=1e-6,
    )

    # 5. One training step. A trainable Dense in front of the layer shows that
    #    gradients pass through it, even for a layer with no weights.
    symbolic = _keras_inputs(inputs)
    first = symbolic[first_name]
    projected = dict(symbolic)
    projected[first_name] = keras.layers.Dense(first.shape[-1], name="input_projection")(first)
    fit_layer = layer_cls(**init_kwargs)
    fit_model = keras.Model(
        symbolic, first_output(_call(fit_layer, first_name, projected, call_kwargs))
    )
    fit_model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    before = [to_numpy(w).copy() for w in fit_model.trainable_weights]
    # A random target: a constant one has no gradient through a final LayerNorm.
    target_shape = (len(inputs[first_name]),) + tuple(expected_shape[1:])
    target = np.random.default_rng(0).normal(size=target_shape).astype("float32")
    history = fit_model.fit(inputs, target, epochs=1, batch_size=len(target), verbose=0)
    assert math.isfinite(history.history["loss"][0])
    changed = [
        not np.allclose(b, to_numpy(w))
        for b, w in zip(before, fit_model.trainable_weights, strict=True)
    ]
    assert all(changed), [
        w.path for w, c in zip(fit_model.trainable_weights, changed, strict=True) if not c
    ]

    # 6. Mixed precision: masks must not produce inf or NaN in half precision.
    for policy in ("mixed_float16", "mixed_bfloat16"):
        previous = keras.config.dtype_policy()
        keras.config.set_dtype_policy(policy)
        try:
            mixed_layer = layer_cls(**init_kwargs)
            half = {
                name: ops.cast(t, mixed_layer.compute_dtype)
                if keras.backend.standardize_dtype(t.dtype) == "float32"
                else t
                for name, t in tensors.items()
            }
            outputs = _call(mixed_layer, first_name, half, call_kwargs)
            output = first_output(outputs)
            assert keras.backend.standardize_dtype(output.dtype) == mixed_layer.compute_dtype
            assert np.all(np.isfinite(to_numpy(ops.cast(output, "float32")))), policy
        finally:
            keras.config.set_dtype_policy(previous)
    return layer


def assert_masked_keys_change_nothing(layer, query, keys, extra_keys, mask_name, atol=1e-5):
    """`layer(query, keys)` gives what it gave when `extra_keys` are appended
    to `keys` and masked out by the call argument `mask_name`."""
    alone = to_numpy(layer(query, keys))
    padded = np.concatenate([keys, extra_keys], axis=1)
    mask = np.repeat((np.arange(padded.shape[1]) < keys.shape[1])[None], len(keys), axis=0)
    output = to_numpy(layer(query, padded, **{mask_name: mask}))
    np.testing.assert_allclose(output, alone, atol=atol)


def assert_weights_skip_masked_keys(weights, mask):
    """Attention weights `[B, ..., Tk]` sum to 1 over the keys and are 0 on
    the keys that `mask` `[B, Tk]` masks out."""
    weights = to_numpy(weights)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    masked = ~mask.reshape(mask.shape[:1] + (1,) * (weights.ndim - 2) + mask.shape[1:])
    assert np.all(weights[np.broadcast_to(masked, weights.shape)] == 0)


def assert_implicit_mask_is_honoured(layer, query, key_width, mask_name):
    """Keys with a Keras mask (an `Embedding`'s `mask_zero`) are masked as the
    call argument `mask_name` masks them."""
    ids = np.array([[3, 5, 0, 0, 0], [2, 9, 4, 6, 1]])
    embedding = keras.layers.Embedding(10, key_width, mask_zero=True)
    implicit = layer(query, embedding(ids))
    explicit = layer(query, embedding(ids), **{mask_name: ids != 0})
    np.testing.assert_allclose(to_numpy(implicit), to_numpy(explicit), atol=1e-6)


def softmax(scores, axis=-1):
    scores = scores - scores.max(axis=axis, keepdims=True)
    e = np.exp(scores)
    return e / e.sum(axis=axis, keepdims=True)


def numpy_attention(query_input, context, weights, num_heads, mask=None):
    """Multi-head attention written out in numpy, from the paper's equations.

    `weights` = (W_q, b_q, W_k, b_k, W_v, b_v, W_o, b_o) with W_q `[D, H*dk]`
    etc.; `mask` broadcastable to `[B, Tq, Tk]`, True = may attend.
    """
    W_q, b_q, W_k, b_k, W_v, b_v, W_o, b_o = weights
    Q, K, V = query_input @ W_q + b_q, context @ W_k + b_k, context @ W_v + b_v
    outputs = []
    for head in range(num_heads):
        dk, dv = Q.shape[-1] // num_heads, V.shape[-1] // num_heads
        q = Q[..., head * dk : (head + 1) * dk]
        k = K[..., head * dk : (head + 1) * dk]
        v = V[..., head * dv : (head + 1) * dv]
        scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(dk)
        if mask is not None:
            scores = np.where(mask, scores, -np.inf)
        outputs.append(softmax(scores) @ v)
    return np.concatenate(outputs, axis=-1) @ W_o + b_o


def numpy_layer_norm(x, gamma, beta, epsilon):
    mean, variance = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + epsilon) * gamma + beta


def numpy_feed_forward(x, W1, b1, W2, b2):
    return np.maximum(0, x @ W1 + b1) @ W2 + b2


def numpy_residual_sublayers(x, sublayers, norm_first):
    """The paper's LayerNorm(x + Sublayer(x)) around each `(sublayer, norm)`
    in turn, or x + Sublayer(LayerNorm(x)) when `norm_first`."""
    for sublayer, norm in sublayers:
        if norm_first:
            x = x + sublayer(numpy_layer_norm(x, *norm_weights(norm)))
        else:
            x = numpy_layer_norm(x + sublayer(x), *norm_weights(norm))
    return x


# The paper's separate W^Q, W^K, W^V, W^O, read back out of our fused layers.


def self_attention_weights(attention):
    """Our fused projection, split back into the paper's W^Q, W^K, W^V, W^O."""
    kernel, bias = (to_numpy(w) for w in attention.qkv_projection.weights)
    dk = attention._key_dim * attention.num_heads
    W_q, W_k, W_v = np.split(kernel, [dk, 2 * dk], axis=-1)
    b_q, b_k, b_v = np.split(bias, [dk, 2 * dk], axis=-1)
    W_o, b_o = (to_numpy(w) for w in attention.output_projection.weights)
    return W_q, b_q, W_k, b_k, W_v, b_v, W_o, b_o


def norm_weights(norm):
    return [to_numpy(w) for w in norm.weights] + [norm.epsilon]


def feed_forward_weights(block):
    return [
        to_numpy(w)
        for w in block.feed_forward_intermediate.weights + block.feed_forward_output.weights
    ]


def cross_attention_weights(attention):
    W_q, b_q = (to_numpy(w) for w in attention.query_projection.weights)
    kernel, bias = (to_numpy(w) for w in attention.key_value_projection.weights)
    W_k, W_v = np.split(kernel, 2, axis=-1)
    b_k, b_v = np.split(bias, 2, axis=-1)
    W_o, b_o = (to_numpy(w) for w in attention.output_projection.weights)
    return W_q, b_q, W_k, b_k, W_v, b_v, W_o, b_o


def layer_gradients(layer, inputs, upstream, **call_kwargs):
    """The layer's output and d/d (inputs, then trainable weights) of
    sum(output * upstream), on the active backend."""
    if keras.backend.backend() == "jax":
        import jax

        non_trainable = [v.value for v in layer.non_trainable_variables]

        def loss(weights, inputs):
            output, _ = layer.stateless_call(weights, non_trainable, *inputs, **call_kwargs)
            return (output * upstream).sum(), output

        weights = [v.value for v in layer.trainable_variables]
        (d_weights, d_inputs), output = jax.grad(loss, argnums=(0, 1), has_aux=True)(
            weights, inputs
        )
        return to_numpy(output), [np.asarray(g) for g in (*d_inputs, *d_weights)]
    import tensorflow as tf

    inputs = [tf.constant(x) for x in inputs]
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        output = layer(*inputs, **call_kwargs)
        loss = tf.reduce_sum(output * upstream)
    gradients = tape.gradient(loss, [*inputs, *layer.trainable_variables])
    return output.numpy(), [g.numpy() for g in gradients]


def assert_layers_agree(make_layer, inputs, **call_kwargs):
    """`make_layer(chunk_size)`: dense (None) and blocked layers with the
    same weights give the same outputs and gradients (inputs and weights)."""
    dense_layer, blocked_layer = make_layer(None), make_layer(3)
    dense_layer(*inputs, **call_kwargs)
    blocked_layer(*inputs, **call_kwargs)
    blocked_layer.set_weights(dense_layer.get_weights())
    upstream = np.random.default_rng(3).normal(size=to_numpy(dense_layer(*inputs)).shape)
    upstream = upstream.astype("float32")
    expected, expected_gradients = layer_gradients(dense_layer, inputs, upstream, **call_kwargs)
    output, gradients = layer_gradients(blocked_layer, inputs, upstream, **call_kwargs)
    np.testing.assert_allclose(output, expected, atol=1e-5, rtol=1e-5)
    assert len(gradients) == len(expected_gradients)
    for index, (got, want) in enumerate(zip(gradients, expected_gradients, strict=True)):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4, err_msg=str(index))
