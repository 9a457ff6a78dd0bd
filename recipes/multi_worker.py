"""Keeps `model.fit` working under `tf.distribute` strategies.

Keras 3's TensorFlow trainer fails in two places (measured with Keras 3.15
and TensorFlow 2.21; `tests/recipes/test_multi_worker.py` and
`tests/recipes/test_strategy.py` show the failures and the fixes):

1. `TensorFlowTrainer._maybe_symbolic_build` builds the model from one
   sample batch, and when that batch is distributed it *averages* it over
   all replicas, eagerly. Under `MultiWorkerMirroredStrategy` that is a
   cross-worker collective outside any function; under `MirroredStrategy`
   it fails whenever the replicas' parts differ in shape (a batch of 11
   rows split 6 and 5: "Inputs to operation AddN ... must have the same
   size and shape"). Only the batch's shapes and dtypes are needed, so any
   one local replica's part serves.
2. (Multi-worker only.) `reduce_per_replica` reduces every logged value with
   `strategy.reduce("MEAN", v, axis=0)` in multi-worker mode, but the logs
   (loss, metrics) are scalars, which have no axis 0. A scalar needs
   `axis=None`.

`patch_symbolic_build()` replaces the first behaviour (for every
distributing strategy), `patch()` both (for multi-worker), for the Keras
versions known to need it, and nothing else. Call it once before
`model.fit`.
"""

import keras
import tensorflow as tf
from keras.src.backend.tensorflow import trainer as tensorflow_trainer

# Versions of Keras in which both faults were seen; others are left alone.
AFFECTED_VERSIONS = ((3, 0), (3, 16))  # [first, last) as (major, minor)

_original_reduce_per_replica = tensorflow_trainer.reduce_per_replica


def is_affected(version=keras.__version__):
    major_minor = tuple(int(part) for part in version.split(".")[:2])
    return AFFECTED_VERSIONS[0] <= major_minor < AFFECTED_VERSIONS[1]


def _maybe_symbolic_build(self, iterator=None, data_batch=None):
    """As Keras's, but takes one local replica's part of a distributed batch."""
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
    if isinstance(value, tf.distribute.DistributedValues):
        return value.values[0]
    return value


def _reduce_per_replica(values, strategy, reduction):
    """As Keras's, but a scalar is averaged over replicas with `axis=None`."""
    if reduction in ("auto", "mean") and tensorflow_trainer._collective_all_reduce_multi_worker(
        strategy
    ):

        def reduce_mean(value):
            if tensorflow_trainer._is_per_replica_instance(value) and value.values[0].shape.rank:
                return strategy.reduce("MEAN", value, axis=0)
            return strategy.reduce("MEAN", value, axis=None)

        return tf.nest.map_structure(reduce_mean, values)
    return _original_reduce_per_replica(values, strategy, reduction)


def patch_symbolic_build():
    """Applies the first fix; returns True if it was applied."""
    if not is_affected():
        return False
    tensorflow_trainer.TensorFlowTrainer._maybe_symbolic_build = _maybe_symbolic_build
    return True


def patch():
    """Applies both fixes; returns True if they were applied."""
    if not patch_symbolic_build():
        return False
    tensorflow_trainer.reduce_per_replica = _reduce_per_replica
    return True
