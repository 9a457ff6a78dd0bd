import atexit
import os
import shutil
import sys
import tempfile

# Quieter TensorFlow start-up; must be set before TensorFlow is imported.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# Under pytest-xdist (`-n 2`) each worker process, and each recipe run it
# starts, gets its share of the cores for its operations' thread pools.
# Two workers that each spread every op over all the cores wait on each
# other's threads: measured here, the same tests took a quarter more CPU
# time in two processes than in one.
#
# XLA (every JAX function, TensorFlow's `jit_compile`) compiles with LLVM's
# optimisations off (`--xla_backend_optimization_level=0`): the tests check
# what programs compute, not how fast, and most of their programs run once
# or twice on tiny models, so compiling is most of their time (on JAX,
# nearly all of it).
_XLA_FLAGS = ["--xla_backend_optimization_level=0"]
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    _THREADS = max(1, (os.cpu_count() or 1) // _WORKERS)
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", str(_THREADS))
    # (XLA has no thread-count flag for JAX's CPU client.)
    _XLA_FLAGS.append(f"--xla_cpu_multi_thread_eigen={str(_THREADS > 1).lower()}")
# XLA_FLAGS a user set are left as they are; those that pytest-xdist's
# controller set here (its workers inherit its environment) are set again
# for this process. (A bare `name=value` token would make XLA read no flag
# after it.)
if os.environ.get("XLA_FLAGS") in (None, os.environ.get("KERAS_ATTENTION_TESTS_XLA_FLAGS")):
    os.environ["XLA_FLAGS"] = os.environ["KERAS_ATTENTION_TESTS_XLA_FLAGS"] = " ".join(_XLA_FLAGS)

# Every process of a run (pytest-xdist's workers inherit this process's
# environment, and so does each recipe run a test starts) shares one
# persistent JAX compilation cache, made here by the first process and
# removed when it ends. JAX reads these variables when it is imported. A
# program compiled once is loaded, the same executable, wherever it is
# compiled again: the decoding tests decode the same shapes again and
# again (row by row, then as a batch), and most recipe runs on JAX train
# the same tiny model (a tiny three-epoch run took 70 s without the cache,
# 43 s with it).
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _JAX_CACHE = tempfile.mkdtemp(prefix="keras-attention-tests-jax-cache-")
    atexit.register(shutil.rmtree, _JAX_CACHE, ignore_errors=True)
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _JAX_CACHE
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"

import pytest  # noqa: E402

# The run fails if it created, changed or removed anything in the working tree.
pytest_plugins = ["working_tree"]


@pytest.hookimpl(trylast=True)  # after pytest-xdist has made this process its controller, or not
def pytest_configure(config):
    """The `hypothesis` profile, in the processes that run tests. Under
    pytest-xdist (`-n 2`) the controller only hands tests out, and never
    imports Keras: imported there, it held 0.7 GB (41 MB without it), and
    TensorFlow's start-up lines were printed after the run's summary (the
    workers' own now come first, before the first test)."""
    if config.pluginmanager.hasplugin("dsession"):
        return
    _start_tensorflow_quietly()
    from helpers import examples
    from hypothesis import settings

    # Each example runs real layers eagerly: few examples, no per-example deadline.
    settings.register_profile("ci", max_examples=examples(12), deadline=None, derandomize=True)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def _start_tensorflow_quietly():
    """Imports TensorFlow and lists its devices with this process's stderr
    (file descriptor 2) sent to a file. Its C++ start-up lines ("WARNING:
    All log messages before absl::InitializeLog() is called are written to
    STDERR", twice, each with "oneDNN custom operations are on" and "Could
    not find cuda drivers", then "failed call to cuInit" when the devices
    are listed) are printed before absl's logging is set up, so
    TF_CPP_MIN_LOG_LEVEL does not hold them back. They are shown only if
    the import fails."""
    caught = tempfile.TemporaryFile()
    stderr = os.dup(2)
    os.dup2(caught.fileno(), 2)
    try:
        import tensorflow as tf

        tf.config.list_physical_devices()
    except BaseException:
        os.dup2(stderr, 2)
        caught.seek(0)
        sys.stderr.write(caught.read().decode("utf-8", "replace"))
        raise
    finally:
        os.dup2(stderr, 2)
        os.close(stderr)
        caught.close()


# Session and module fixtures that train or export (minutes each). Under
# pytest-xdist (`-n 2`, as the README's command and `.ci/run`'s large step
# run the suite) every test that uses one runs in the same worker process,
# so each is made once, not once a worker. A fixture that uses another
# (`two_processes` uses `jax_runs`) is in that one's group.
SHARED_RUNS = (
    "exports",
    "first_run",
    "quick_start_run",
    "bert_run",  # tests/convert/test_bert.py
    "default_strategy_runs",  # large: tests/recipes/test_resume_after_kill.py
    "jax_runs",  # large: tests/recipes/test_jax_backend.py
    "smoke",  # large: tests/test_benchmarks.py
)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the marks into the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        for fixture in SHARED_RUNS:
            if fixture in item.fixturenames:
                item.add_marker(pytest.mark.xdist_group(fixture))
                break


@pytest.fixture(autouse=True)
def _seed_and_policy():
    import keras

    keras.utils.set_random_seed(0)
    keras.config.set_dtype_policy("float32")
    yield
    keras.config.set_dtype_policy("float32")
