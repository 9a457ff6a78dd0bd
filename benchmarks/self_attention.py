"""Self-attention alone, forward + backward: ours against
`keras.layers.MultiHeadAttention`, time and peak memory as the length grows."""

import keras
import numpy as np
import tensorflow as tf

from benchmarks import contenders, measure

OURS = "keras_attention"
PEER = "keras_core"


def forward_backward(layer, x):
    """A compiled step: a scalar loss of the output, and the gradients for x
    and every weight (summed, so that nothing large is returned)."""

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(tf.square(layer(x)))
        gradients = tape.gradient(loss, [x, *layer.trainable_variables])
        return loss + sum(tf.reduce_sum(g) for g in gradients)

    return lambda: step().numpy()


def run(lengths, batch_size, model_dim, num_heads, repeats):
    rows = []
    for length in lengths:
        keras.utils.set_random_seed(0)
        x = np.random.default_rng(0).normal(size=(batch_size, length, model_dim))
        x = tf.constant(x.astype("float32"))
        steps = {}
        for contender in (OURS, PEER):
            layer = contenders.self_attention(contender, num_heads, model_dim)
            layer(x[:, :2])  # build
            steps[contender] = forward_backward(layer, x)
        seconds = measure.race(steps, repeats)
        memory = {name: measure.peak_memory_mib(step) for name, step in steps.items()}
        rows += [
            {
                "length": length,
                "batch_size": batch_size,
                "contender": name,
                "ms": 1000 * seconds[name],
                "peak_mib": memory[name],
                # > 1: ours is faster; < 1: ours needs less memory.
                "ours_speedup": seconds[name] / seconds[OURS],
                "ours_memory_ratio": memory[OURS] / memory[name] if memory[name] else None,
            }
            for name in steps
        ]
    return rows
