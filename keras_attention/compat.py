"""Every use of TensorFlow's and Keras's private APIs, and every patch of
them, in one place: what each is for, the versions it was checked on
(TensorFlow 2.21, Keras 3.15), and the test that fails when a new version
makes it wrong or unnecessary (tests/test_compat.py, and for the trainer
patch tests/recipes/test_strategy.py and test_multi_worker.py).

1. `in_xla_context()`: whether the graph being traced will be compiled by
   XLA. TensorFlow has no public test of it; the layers pick TensorFlow's
   own kernels outside XLA (`keras_attention.utils.tensorflow_kernels_are_faster`).
2. `is_op_determinism_enabled()` / `disable_op_determinism()`: TensorFlow
   has a public switch to turn determinism on
   (`tf.config.experimental.enable_op_determinism`) but none back off,
   which a recipe needs when a run follows a `--deterministic` one in the
   same process.
3. `patch_symbolic_build()` / `patch()`: keep `model.fit` working under
   `tf.distribute` strategies. Keras 3's TensorFlow trainer fails in two
   places (`tests/recipes/test_multi_worker.py` and
   `tests/recipes/test_strategy.py` show the failures and the fixes):

   - `TensorFlowTrainer._maybe_symbolic_build` builds the model from one
     sample batch, and when that batch is distributed it *averages* it over
     all replicas, eagerly. Under `MultiWorkerMirroredStrategy` that is a
     cross-worker collective outside any function; under `MirroredStrategy`
     it fails whenever the replicas' parts differ in shape (a batch of 11
     rows split 6 and 5: "Inputs to operation AddN ... must have the same
     size and shape"). Only the batch's shapes and dtypes are needed, so any
     one local replica's part serves.
   - (Multi-worker only.) `reduce_per_replica` reduces every logged value
     with `strategy.reduce("MEAN", v, axis=0)` in multi-worker mode, but the
     logs (loss, metrics) are scalars, which have no axis 0. A scalar needs
     `axis=None`.

   `patch_symbolic_build()` replaces the first behaviour (for every
   distributing strategy), `patch()` both (for multi-worker), for the Keras
   versions known to need it (`AFFECTED_VERSIONS`), and nothing else. Call
   it once before `model.fit`.
"""

import keras

# Versions of Keras in which both trainer faults were seen; others are left alone.
AFFECTED_VERSIONS = ((3, 0), (3, 16))  # [first, last) as (major, minor)


def in_xla_context():
    """True while tracing a TensorFlow graph that XLA will compile (a
    `tf.function` with `jit_compile=True`, or a function it calls); False
    eagerly, in a plain `tf.function`, or where TensorFlow lacks its own
    private test (`GraphOrParentsInXlaContext`)."""
    import tensorflow as tf

    if tf.executing_eagerly():
        return False
    try:
        from tensorflow.python.ops.control_flow_util import GraphOrParentsInXlaContext
    except ImportError:
        return False
    return GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def is_op_determinism_enabled():
    from tensorflow.python.framework import config

    return config.is_op_determinism_enabled()


def disable_op_determinism():
    """Turns TensorFlow's op determinism off again."""
    from tensorflow.python.framework import config

    config.disable_op_determinism()


def is_affected(version=keras.__version__):
    """Whether this Keras version's trainer has the two faults."""
    major_minor = tuple(int(part) for part in version.split(".")[:2])
    return AFFECTED_VERSIONS[0] <= major_minor < AFFECTED_VERSIONS[1]


def _trainer():
    from keras.src.backend.tensorflow import trainer

    return trainer


def _maybe_symbolic_build(self, iterator=None, data_batch=None):
    """As Keras's, but takes one local replica's part of a distributed batch."""
    import tensorflow as tf

    if self._distribute_strategy is None:
        return
    if iterator is not None:
        for _, _, it in iterator:
            batch = next(it)
            data_batch = tf.nest.map_structure(_one_local_part, batch)
            break
    with self.distribute_strategy.scope():
        self._symbolic_build(data_batch=data_batch)


def _one_local_part(value):
    import tensorflow as tf

    if isinstance(value, tf.distribute.DistributedValues):
        return value.values[0]
    return value


def _reduce_per_replica(original):
    """Keras's `reduce_per_replica` (`original`), but a scalar is averaged
    over replicas with `axis=None`."""
    import tensorflow as tf

    trainer = _trainer()

    def reduce_per_replica(values, strategy, reduction):
        if reduction in ("auto", "mean") and trainer._collective_all_reduce_multi_worker(strategy):

            def reduce_mean(value):
                if trainer._is_per_replica_instance(value) and value.values[0].shape.rank:
                    return strategy.reduce("MEAN", value, axis=0)
                return strategy.reduce("MEAN", value, axis=None)

            return tf.nest.map_structure(reduce_mean, values)
        return original(values, strategy, reduction)

    reduce_per_replica.patched = True
    return reduce_per_replica


def patch_symbolic_build():
    """Applies the first fix; returns True if it was applied."""
    if not is_affected():
        return False
    _trainer().TensorFlowTrainer._maybe_symbolic_build = _maybe_symbolic_build
    return True


def patch():
    """Applies both fixes; returns True if they were applied."""
    if not patch_symbolic_build():
        return False
    trainer = _trainer()
    if not getattr(trainer.reduce_per_replica, "patched", False):
        trainer.reduce_per_replica = _reduce_per_replica(trainer.reduce_per_replica)
    return True
