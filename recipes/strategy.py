"""What a run trains under, one interface for each Keras backend.

On TensorFlow a run trains under a `tf.distribute` strategy; on JAX under
`keras.distribution`. A `RunStrategy` distributes and nothing else: the
recipes ask it its scope, how many replicas train, which process this is
and where it writes, and how batches reach the replicas.
"""

import atexit
import contextlib
import shutil
import tempfile
from pathlib import Path

import keras
import tensorflow as tf

from keras_attention.recipes import jax_job

# What each backend trains under: tf.distribute strategies on TensorFlow,
# keras.distribution on JAX.
BACKEND_STRATEGIES = {
    "tensorflow": ("default", "mirrored", "multi_worker", "tpu"),
    "jax": ("default", "data_parallel"),
}
STRATEGIES = tuple(dict.fromkeys(name for names in BACKEND_STRATEGIES.values() for name in names))


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


def make_strategy(name, batch_size, join_timeout=300):
    """The `RunStrategy` named `name` (`--strategy`) for Keras's backend,
    made before the model. `batch_size` is the global batch (None: batches
    cut by tokens, of many sizes); `join_timeout`
    (`--join-timeout`) how long JAX processes wait for each other."""
    if keras.backend.backend() == "jax":
        return JaxStrategy(name, batch_size, join_timeout)
    return TensorFlowStrategy(name)


class RunStrategy:
    """What the recipes ask of the devices a run trains on.

    Attributes:
        name: the `--strategy` it was made from.
        num_replicas_in_sync: how many copies of the model train at once.
        is_chief: whether this process writes the run's files (worker 0,
            or the only one).
        worker_index: this process's index among the run's processes.
        saves: whether this process saves the model and exports it: every
            TensorFlow worker does (saving is collective there), only the
            chief of JAX processes.
    """

    name: str
    num_replicas_in_sync: int
    is_chief: bool
    worker_index: int
    saves = True

    def files_folder(self, output_dir):
        """Where this process writes: `output_dir` for the chief."""
        return Path(output_dir)

    def scope(self):
        """The context the model and its optimizer are made in."""
        raise NotImplementedError

    def distribute(self, dataset):
        """The batches as the replicas read them."""
        return dataset

    def batches_of(self, batch_size):
        """Told the run's global batch size once the recipe has chosen its
        batches (None: cut by tokens, of many sizes)."""


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
        from keras_attention import compat

        # model.fit under any distributing strategy needs this fix in Keras 3.
        compat.patch_symbolic_build()
        if name == "mirrored":
            return tf.distribute.MirroredStrategy()
        if name == "tpu":
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
            tf.config.experimental_connect_to_cluster(resolver)
            tf.tpu.experimental.initialize_tpu_system(resolver)
            return tf.distribute.TPUStrategy(resolver)
        # Needs TF_CONFIG (the cluster and this worker's index) in the environment.
        compat.patch()  # and this strategy a second one
        return tf.distribute.MultiWorkerMirroredStrategy()

    def files_folder(self, output_dir):
        # Every worker saves (saving a distributed variable is collective),
        # so the others write beside, not over, the chief's files.
        if self.is_chief:
            return Path(output_dir)
        return Path(output_dir) / f".worker{self.worker_index}"

    def scope(self):
        return self.strategy.scope()

    def distribute(self, dataset):
        return shard_by_data(dataset) if self.name == "multi_worker" else dataset


def shard_by_data(dataset):
    """Every worker reads the same batches and keeps its replicas' share of
    each, so the global batch is what a single process would see."""
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.with_options(options)


def fill_and_share(dataset, batch_size, processes, index, devices=1):
    """Every `(inputs, labels)` batch of `dataset` filled to `batch_size`
    rows with empty ones (all zeros), each label weighted 1 in a real row
    and 0 in an empty one (`(inputs, labels, weights)`, weights shaped as
    the labels: the loss and the metrics count no empty row), then this
    process's `index` share of its rows, one of `processes` equal parts, in
    order. Every device then gets an equal part of every batch, and every
    process as many batches as the others (a process with one batch more
    would wait forever for the others in it). `batch_size` None (batches
    cut by tokens, of many sizes): each batch is filled to the next
    multiple of `devices`, the devices of every process."""

    def fill(inputs, labels):
        rows = tf.shape(labels)[0]
        filled_rows = batch_size or (rows + devices - 1) // devices * devices
        share = filled_rows // processes
        weights = tf.ones_like(labels, tf.float32)

        def fill_and_take(x):
            filled = tf.pad(x, [[0, filled_rows - rows]] + [[0, 0]] * (x.shape.rank - 1))
            return filled[index * share : (index + 1) * share]

        return tf.nest.map_structure(fill_and_take, (inputs, labels, weights))

    return dataset.map(fill)


class JaxStrategy(RunStrategy):
    """A JAX run's devices.

    `default`: one device, as Keras places it. `data_parallel`:
    `keras.distribution.DataParallel` over every device of every process
    (the weights copied on each, every batch split between them), set for
    the whole run. When `KERAS_DISTRIBUTION_JOB_ADDRESSES` and
    `KERAS_DISTRIBUTION_NUM_PROCESSES` are set (a multi-process job, with
    `KERAS_DISTRIBUTION_PROCESS_ID` per process), the process first joins
    the job (`jax_job.join_processes`). Each process then reads its share of every
    batch (`fill_and_share`), and only process 0 writes the run's files:
    the others write in a temporary folder, removed when they end.
    """

    def __init__(self, name, batch_size, join_timeout=300):
        import jax

        self.name = name
        distribution = None
        job = jax_job.in_a_job()
        if job and name != "data_parallel":
            # Each process would train alone, all writing the same files.
            raise SystemExit(
                "error: KERAS_DISTRIBUTION_JOB_ADDRESSES and KERAS_DISTRIBUTION_NUM_PROCESSES "
                f"are set (a job of several processes): use --strategy data_parallel, not {name}"
            )
        if name == "data_parallel":
            if job:
                jax_job.join_processes(join_timeout)
            distribution = keras.distribution.DataParallel()
            # Each process's share is made in `distribute` (Keras's own
            # needs batches of a static size, which buckets are not).
            distribution.auto_shard_dataset = False
            keras.distribution.set_distribution(distribution)
        self.num_replicas_in_sync = jax.device_count() if distribution else 1
        self.num_processes = jax.process_count()
        self.worker_index = jax.process_index()
        self.is_chief = self.saves = self.worker_index == 0
        self.batches_of(batch_size)

    def batches_of(self, batch_size):
        if batch_size and batch_size % self.num_replicas_in_sync:
            raise SystemExit(
                f"error: --batch-size {batch_size} does not split evenly over the "
                f"{self.num_replicas_in_sync} devices of --strategy {self.name}"
            )
        self.batch_size = batch_size

    def files_folder(self, output_dir):
        if self.is_chief:
            return Path(output_dir)
        folder = tempfile.mkdtemp(prefix=f"keras-attention-process{self.worker_index}-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        return Path(folder)

    def distribute(self, dataset):
        if self.name != "data_parallel":
            return dataset
        return fill_and_share(
            dataset,
            self.batch_size,
            self.num_processes,
            self.worker_index,
            devices=self.num_replicas_in_sync,
        )

    def scope(self):
        return contextlib.nullcontext()  # set for the whole run
