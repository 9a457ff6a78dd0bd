"""What a run trains under, one interface for each Keras backend.

On TensorFlow a run trains under a `tf.distribute` strategy; on JAX under
`keras.distribution`. The recipes ask a `RunStrategy` only what they need
(its scope, how many replicas, which process this is, how batches reach
the replicas, whether the step compiles, how the run is exported), so the
backends differ here and nowhere else in the recipes.
"""

import contextlib
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import keras
import tensorflow as tf

from keras_attention.export import export_model, next_version

# What each backend trains under: tf.distribute strategies on TensorFlow,
# keras.distribution on JAX.
BACKEND_STRATEGIES = {
    "tensorflow": ("default", "mirrored", "multi_worker", "tpu"),
    "jax": ("default", "data_parallel"),
}
STRATEGIES = tuple(dict.fromkeys(name for names in BACKEND_STRATEGIES.values() for name in names))

# Set by a multi-host launcher (see `JaxStrategy`); read by keras.distribution.initialize.
MULTI_HOST_VARIABLES = ("KERAS_DISTRIBUTION_JOB_ADDRESSES", "KERAS_DISTRIBUTION_NUM_PROCESSES")


def check_backend_options(strategy, jit_compile, deterministic):
    """A ValueError naming the flag when Keras's backend cannot train as
    asked: a `--strategy` of the other backend, or `--jit-compile` with
    `--deterministic` on TensorFlow."""
    backend = keras.backend.backend()
    if backend not in BACKEND_STRATEGIES:
        raise ValueError(f"the recipes train on KERAS_BACKEND tensorflow or jax; got {backend!r}")
    if strategy not in BACKEND_STRATEGIES[backend]:
        raise ValueError(
            f"--strategy {strategy} is not for KERAS_BACKEND={backend}; "
            f"choose {' or '.join(BACKEND_STRATEGIES[backend])}"
        )
    if backend == "tensorflow" and jit_compile and deterministic:
        raise ValueError(
            "--jit-compile and --deterministic do not combine on TensorFlow: Keras "
            "turns XLA off while deterministic ops are on (XLA has no deterministic "
            "kernel for every op). Drop one of the two."
        )


def make_strategy(name, batch_size):
    """The `RunStrategy` named `name` (`--strategy`) for Keras's backend,
    made before the model. `batch_size` is the global batch."""
    if keras.backend.backend() == "jax":
        return JaxStrategy(name, batch_size)
    return TensorFlowStrategy(name)


class RunStrategy:
    """What the recipes ask of the devices a run trains on.

    Attributes:
        name: the `--strategy` it was made from.
        num_replicas_in_sync: how many copies of the model train at once.
        is_chief: whether this process writes the run's files (worker 0,
            or the only one).
        worker_index: this process's index among the run's processes.
    """

    name: str
    num_replicas_in_sync: int
    is_chief: bool
    worker_index: int

    def scope(self):
        """The context the model and its optimizer are made in."""
        raise NotImplementedError

    def distribute(self, dataset):
        """The batches as the replicas read them."""
        return dataset

    def compiles(self, jit_compile):
        """Whether the train step is compiled by XLA, given `--jit-compile`
        (then every batch is padded to one of a few widths, so it compiles
        a few times)."""
        raise NotImplementedError

    def compile_decoding(self, model, search, max_length):
        """`search(ids) -> ids` (a decoding of `model`) compiled for this
        backend; the returned function takes numpy ids `[B, S]`, S <=
        `max_length`, and returns numpy-convertible ids."""
        raise NotImplementedError

    def export(self, model, output_dir, base, config, tokenizer, target_tokenizer, **arguments):
        """Exports the run's `model` (saved in `output_dir`) with its
        tokenisers to TF Serving's layout under `base`, as the run's config
        says (`--export-name`, `--export-version`, `--overwrite-export`,
        `--max-length`; see `keras_attention.export.export_model`), and
        returns the version folder."""
        raise NotImplementedError


class TensorFlowStrategy(RunStrategy):
    """`default` (one device, as TensorFlow places it), `mirrored` (every
    local device), `multi_worker` (a cluster of processes described by
    `TF_CONFIG`; every worker reads every batch and keeps its replicas'
    share), or `tpu`."""

    def __init__(self, name):
        self.name = name
        self.strategy = self._make(name)
        self.num_replicas_in_sync = self.strategy.num_replicas_in_sync
        resolver = getattr(self.strategy, "cluster_resolver", None)
        cluster = resolver.cluster_spec().as_dict() if resolver is not None else {}
        if not cluster:
            self.is_chief, self.worker_index = True, 0
        else:
            self.worker_index = resolver.task_id
            self.is_chief = resolver.task_type in (None, "chief") or (
                resolver.task_type == "worker" and resolver.task_id == 0 and "chief" not in cluster
            )

    @staticmethod
    def _make(name):
        if name == "default":
            return tf.distribute.get_strategy()
        if name == "mirrored":
            return tf.distribute.MirroredStrategy()
        if name == "tpu":
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
            tf.config.experimental_connect_to_cluster(resolver)
            tf.tpu.experimental.initialize_tpu_system(resolver)
            return tf.distribute.TPUStrategy(resolver)
        # Needs TF_CONFIG (the cluster and this worker's index) in the environment.
        from keras_attention.recipes import multi_worker

        multi_worker.patch()  # model.fit under this strategy needs two fixes in Keras 3
        return tf.distribute.MultiWorkerMirroredStrategy()

    def scope(self):
        return self.strategy.scope()

    def distribute(self, dataset):
        return shard_by_data(dataset) if self.name == "multi_worker" else dataset

    def compiles(self, jit_compile):
        return jit_compile

    def compile_decoding(self, model, search, max_length):
        return tf.function(search, reduce_retracing=True)

    def export(self, model, output_dir, base, config, tokenizer, target_tokenizer, **arguments):
        return export_model(
            model,
            base,
            config.export_name,
            tokenizer,
            target_tokenizer,
            max_length=config.max_length,
            version=config.export_version,
            overwrite=config.overwrite_export,
            config=dataclasses.asdict(config),
            **arguments,
        )


def shard_by_data(dataset):
    """Every worker reads the same batches and keeps its replicas' share of
    each, so the global batch is what a single process would see."""
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.with_options(options)


def refuse_several_processes():
    """Several JAX processes deadlock in the recipes today: two on one host
    (127.0.0.1, one CPU device each) trained their epoch, then process 0
    waited in the first validation pass while process 1, having run out of
    validation batches, waited in the model's save. Refused, rather than a
    hang; one process per host, with all its devices, works."""
    count = os.environ["KERAS_DISTRIBUTION_NUM_PROCESSES"]
    if count.strip() != "1":
        raise SystemExit(
            f"error: KERAS_DISTRIBUTION_NUM_PROCESSES={count}: the recipes do not run "
            "several JAX processes yet (their processes read different numbers of "
            "validation batches and deadlock). Run one process with every device of "
            "its host (--strategy data_parallel), or several hosts on TensorFlow "
            "(--strategy multi_worker with TF_CONFIG)"
        )


class JaxStrategy(RunStrategy):
    """A JAX run's devices.

    `default`: one device, as Keras places it. `data_parallel`:
    `keras.distribution.DataParallel` over every device of every process
    (the weights copied on each, every batch split between them), set for
    the whole run. When `KERAS_DISTRIBUTION_JOB_ADDRESSES` and
    `KERAS_DISTRIBUTION_NUM_PROCESSES` are set (a multi-host job, with
    `KERAS_DISTRIBUTION_PROCESS_ID` per process), more than one process is
    refused for now (see `refuse_several_processes`); one is joined by
    `keras.distribution.initialize()` as a multi-host job of one.

    The step always compiles (`jax.jit`), and the export, a TensorFlow
    SavedModel, is made from the saved `model.keras` by `python -m
    keras_attention.export` on TensorFlow.
    """

    def __init__(self, name, batch_size):
        import jax

        self.name = name
        distribution = None
        if name == "data_parallel":
            if all(os.environ.get(variable) for variable in MULTI_HOST_VARIABLES):
                refuse_several_processes()
                keras.distribution.initialize()
            distribution = keras.distribution.DataParallel()
            keras.distribution.set_distribution(distribution)
        self.num_replicas_in_sync = jax.device_count() if distribution else 1
        self.worker_index = jax.process_index()
        self.is_chief = self.worker_index == 0
        if batch_size % self.num_replicas_in_sync:
            raise SystemExit(
                f"error: --batch-size {batch_size} does not split evenly over the "
                f"{self.num_replicas_in_sync} devices of --strategy {name}"
            )

    def scope(self):
        return contextlib.nullcontext()  # set for the whole run

    def compiles(self, jit_compile):
        return True

    def compile_decoding(self, model, search, max_length):
        import jax
        import numpy as np

        # The weights are arguments, not constants folded into the program.
        @jax.jit
        def search_with(weights, ids):
            mapping = list(zip(model.variables, weights, strict=True))
            with keras.StatelessScope(state_mapping=mapping):
                return search(ids)

        def decode(ids):
            # Padded to `max_length`, so the search compiles once.
            ids = np.pad(ids, [(0, 0), (0, max_length - ids.shape[1])])
            return search_with([variable.value for variable in model.variables], ids)

        return decode

    def export(self, model, output_dir, base, config, tokenizer, target_tokenizer, **arguments):
        return export_with_tensorflow(output_dir, base, config)


class ExportFailed(RuntimeError):
    """The export command, run for a model trained on another backend, failed."""


def export_with_tensorflow(output_dir, base, config):
    """A run trained on another backend (JAX) is exported from its saved
    `model.keras` by `python -m keras_attention.export`, which runs on
    TensorFlow; returns the version folder."""
    # The version is chosen here, so the folder the command writes is known.
    version = config.export_version or next_version(Path(base) / config.export_name)
    command = [sys.executable, "-m", "keras_attention.export", str(output_dir), "--base", str(base)]
    command += ["--name", config.export_name, "--version", str(version)]
    if config.overwrite_export:
        command.append("--overwrite")
    print(f"Exporting with TensorFlow: {' '.join(command[1:])}", flush=True)
    environment = {**os.environ, "KERAS_BACKEND": "tensorflow"}
    environment.pop("XLA_FLAGS", None)  # the JAX run's device settings
    result = subprocess.run(command, env=environment, capture_output=True, text=True)
    if result.returncode:
        raise ExportFailed(f"{' '.join(command[1:])} failed:\n{result.stderr[-3000:].strip()}")
    return Path(base) / config.export_name / str(version)
