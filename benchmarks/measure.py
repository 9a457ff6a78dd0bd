"""How the benchmarks measure: median wall time, peak memory, matmul peak."""

import datetime
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import tensorflow as tf

from keras_attention.recipes.choices import cpu_flags


def machine(cpuinfo="/proc/cpuinfo"):
    """What the figures were measured on: the CPU model, its AVX flags, the
    cores, and whether TensorFlow's oneDNN was asked for. Machines of one
    kind differ (AVX2 only, or AVX-512) and TensorFlow's defaults with
    them, so every result file says which it was."""
    text = Path(cpuinfo).read_text() if Path(cpuinfo).is_file() else ""
    model = re.search(r"^model name\s*:\s*(.+)$", text, flags=re.MULTILINE)
    avx = sorted(f for f in cpu_flags(cpuinfo) if f.startswith("avx"))
    return {
        "cpu": model.group(1).strip() if model else platform.processor() or "unknown",
        "avx_flags": avx,
        "cpus": os.cpu_count(),
        "TF_ENABLE_ONEDNN_OPTS": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "(TensorFlow's default)"),
    }


REPOSITORY = Path(__file__).resolve().parent.parent


def git(*arguments):
    """git's output in this repository ("" outside a clone)."""
    result = subprocess.run(["git", *arguments], cwd=REPOSITORY, capture_output=True, text=True)
    return result.stdout.strip()


def provenance(name, argv=None):
    """What a result file says first: the command (`python -m
    benchmarks.NAME` and its flags), the date, the commit (and whether
    tracked files had changed), the machine and its load average."""
    changed = " (and uncommitted changes)" if git("status", "--porcelain", "-uno") else ""
    flags = sys.argv[1:] if argv is None else argv
    return {
        "command": " ".join([f"python -m benchmarks.{name}", *flags]),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": git("rev-parse", "HEAD") + changed,
        "machine": machine(),
        "load_average_before": os.getloadavg(),
    }


def use_threads(threads):
    """TensorFlow's thread pools, before it runs anything: `threads` for
    each op (intra) and between ops (inter), as TF Serving's
    `--tensorflow_intra_op_parallelism` and `--tensorflow_inter_op_parallelism`
    set them."""
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)


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


# How `peak_memory` measured, as the rows record it.
TF_ALLOCATOR = "tf_allocator"
PEAK_RSS = "peak_rss"


def peak_memory(function, device="CPU:0"):
    """`(MiB, measure)`: the memory `function()` adds at its peak, and how it
    was measured.

    - `"tf_allocator"`: the peak of TensorFlow's allocator during the call
      less what it held before: tensors only. On CPU this needs oneDNN's
      allocator, which TensorFlow turns on by default on Intel CPUs and off
      on AMD ones (`TF_ENABLE_ONEDNN_OPTS=1` turns it on there).
    - `"peak_rss"`, where the allocator keeps no statistics: the process's
      peak resident set during the call (Linux resets the peak through
      `/proc/self/clear_refs`) less its resident set before. It counts
      everything the call touches, not only tensors, and memory the C
      allocator kept from earlier calls is reused unseen, so it is
      comparable only within one run, and less sharply than the first.
    - `(None, "not measured: ...")` where neither is available.
    """
    try:
        before = tf.config.experimental.get_memory_info(device)["current"]
        tf.config.experimental.reset_memory_stats(device)
    except ValueError:  # "Allocator stats not available for device"
        return _peak_rss_mib(function)
    function()
    return (tf.config.experimental.get_memory_info(device)["peak"] - before) / 2**20, TF_ALLOCATOR


def _peak_rss_mib(function):
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")  # resets the peak resident set (VmHWM) to the current
        before = _status_kib("VmRSS")
    except OSError as error:
        function()
        return None, f"not measured: no allocator statistics, and {error}"
    function()
    return (_status_kib("VmHWM") - before) / 1024, PEAK_RSS


def _status_kib(field):
    """A `kB` field of /proc/self/status."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise OSError(f"/proc/self/status has no {field}")
