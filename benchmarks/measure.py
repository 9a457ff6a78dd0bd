"""How the benchmarks measure: median wall time, peak memory, matmul peak."""

import statistics
import time

import tensorflow as tf


def median_seconds(function, repeats, warmup=2):
    """Median wall time of `function()` over `repeats` calls, after `warmup`
    calls that trace, compile and fill caches. `function` must block until
    its result is computed (return numpy values, or call `.numpy()`)."""
    return race({"function": function}, repeats, warmup)["function"]


def race(functions, repeats, warmup=2):
    """Median wall time of each of `functions` (name -> callable), timed in
    turns: one call of each per round, so that a slow spell on the machine
    falls on all of them alike. Returns name -> seconds."""
    for function in functions.values():
        for _ in range(warmup):
            function()
    times = {name: [] for name in functions}
    for _ in range(repeats):
        for name, function in functions.items():
            start = time.perf_counter()
            function()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def matmul(size, jit_compile=False):
    """One large float32 `tf.matmul` [size, size] x [size, size], as a
    blocking call, and its FLOPs: the most this machine's TensorFlow gets out
    of its cores (`jit_compile`: what XLA's own matmul gets)."""
    a = tf.random.normal((size, size), seed=1)
    b = tf.random.normal((size, size), seed=2)
    product = tf.function(lambda: tf.reduce_sum(tf.matmul(a, b)[0]), jit_compile=jit_compile)
    return (lambda: product().numpy()), 2 * size**3


def peak_memory_mib(function, device="CPU:0"):
    """Memory `function()` adds at its peak, in MiB: the peak of TensorFlow's
    allocator during the call less what it held before (tensors only; on CPU
    this needs oneDNN's allocator, TensorFlow's default on x86)."""
    before = tf.config.experimental.get_memory_info(device)["current"]
    tf.config.experimental.reset_memory_stats(device)
    function()
    return (tf.config.experimental.get_memory_info(device)["peak"] - before) / 2**20
