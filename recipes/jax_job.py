"""A JAX job of several processes: joining it, and saving from one of its
processes alone. `JaxStrategy` joins the job when the environment describes
one; the recipes save through `saving_alone`."""

import contextlib
import os
import sys
import threading

import keras

# Set for every process of a multi-process JAX job (see `join_processes`).
MULTI_HOST_VARIABLES = ("KERAS_DISTRIBUTION_JOB_ADDRESSES", "KERAS_DISTRIBUTION_NUM_PROCESSES")


def in_a_job():
    """Whether the environment describes a job of several processes."""
    return all(os.environ.get(variable) for variable in MULTI_HOST_VARIABLES)


def join_processes(timeout):
    """Joins this process to the JAX job that `KERAS_DISTRIBUTION_JOB_ADDRESSES`
    (the coordinator's `host:port` first), `KERAS_DISTRIBUTION_NUM_PROCESSES`
    and `KERAS_DISTRIBUTION_PROCESS_ID` describe, as
    `keras.distribution.initialize()` would, but waiting at most `timeout`
    seconds for the others, then stopping with a message that names the
    coordinator. (JAX's own time-out ends the process from C++, with a trace
    that blames another task, so a watch of our own ends it first.) A
    process that stops answering later ends the others `timeout` seconds on
    (JAX's heartbeat)."""
    import jax

    coordinator = os.environ["KERAS_DISTRIBUTION_JOB_ADDRESSES"].split(",")[0].strip()
    count = _process_variable("KERAS_DISTRIBUTION_NUM_PROCESSES", 1)
    index = _process_variable("KERAS_DISTRIBUTION_PROCESS_ID", 0)
    if index >= count:
        raise SystemExit(
            f"error: KERAS_DISTRIBUTION_PROCESS_ID={index} is not below "
            f"KERAS_DISTRIBUTION_NUM_PROCESSES={count}"
        )
    print(f"Process {index} of {count}: joining the job at {coordinator}", flush=True)
    message = (
        f"error: process {index} of {count} could not join the JAX job at {coordinator} "
        f"(KERAS_DISTRIBUTION_JOB_ADDRESSES) within --join-timeout {timeout} s. Start every "
        "process with the same address and KERAS_DISTRIBUTION_NUM_PROCESSES, each with its "
        "own KERAS_DISTRIBUTION_PROCESS_ID, process 0 on the coordinator's host."
    )
    watch = threading.Timer(timeout, _stop, args=(message,))
    watch.daemon = True
    watch.start()
    try:
        jax.distributed.initialize(
            coordinator_address=coordinator,
            num_processes=count,
            process_id=index,
            initialization_timeout=timeout + 60,  # ours ends it first
            heartbeat_timeout_seconds=timeout,
        )
    finally:
        watch.cancel()


def _stop(message):
    print(message, file=sys.stderr, flush=True)
    os._exit(1)  # the main thread is waiting inside JAX


def _process_variable(name, minimum):
    value = os.environ.get(name, "")
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < minimum:
        raise SystemExit(f"error: {name}={value!r}: an integer >= {minimum} is needed")
    return number


@contextlib.contextmanager
def saving_alone():
    """A context in which one process of a multi-process JAX job saves on
    its own. Keras's saving makes a few variables of its own (a blank
    optimizer, to learn which attributes to skip); made under the job's
    distribution, each would wait for every process to make it too. The
    weights themselves are copied on every process, so reading them needs
    no other. Nothing changes for a single process or on TensorFlow."""
    distribution = keras.distribution.distribution() if keras.backend.backend() == "jax" else None
    if distribution is None:
        yield
        return
    keras.distribution.set_distribution(None)
    try:
        yield
    finally:
        keras.distribution.set_distribution(distribution)
