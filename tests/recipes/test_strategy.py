"""What a `RunStrategy` does to the batches of a run on several devices or
processes (`recipes/strategy.py`)."""

import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from keras_attention import compat
from keras_attention.recipes.strategy import fill_and_share


def batches(rows_per_batch, width=3):
    """`({"ids": int[rows, width]}, labels int[rows])` batches whose values
    number the rows from 1, so every row is told apart from an empty one."""
    total = sum(rows_per_batch)
    ids = np.arange(1, total * width + 1).reshape(total, width)
    labels = np.arange(1, total + 1)
    dataset = tf.data.Dataset.from_tensor_slices(({"ids": ids}, labels))
    return dataset.batch(max(rows_per_batch)), ids, labels


def test_every_process_gets_an_equal_share_of_every_batch_and_empty_rows_weigh_nothing():
    # Batches of 4, 4 and 3 rows over 2 processes: 2 rows each a batch, the
    # last batch filled with one empty row, which weighs 0.
    dataset, ids, labels = batches([4, 4, 3])
    shares = [list(fill_and_share(dataset, 4, 2, index).as_numpy_iterator()) for index in (0, 1)]
    assert [len(share) for share in shares] == [3, 3]
    got_ids, got_labels, got_weights = [], [], []
    for batch in range(3):
        for share in shares:  # in order: process 0's rows, then process 1's
            inputs, batch_labels, weights = share[batch]
            assert inputs["ids"].shape == (2, 3) and weights.dtype == np.float32
            got_ids.append(inputs["ids"])
            got_labels.append(batch_labels)
            got_weights.append(weights)
    np.testing.assert_array_equal(np.concatenate(got_ids), np.concatenate([ids, [[0, 0, 0]]]))
    np.testing.assert_array_equal(np.concatenate(got_labels), [*labels, 0])
    np.testing.assert_array_equal(np.concatenate(got_weights), [1] * 11 + [0])


def test_one_process_gets_every_row_filled_to_the_batch():
    dataset, ids, labels = batches([5, 2])
    (first, last) = fill_and_share(dataset, 5, 1, 0).as_numpy_iterator()
    np.testing.assert_array_equal(first[0]["ids"], ids[:5])
    np.testing.assert_array_equal(last[0]["ids"], np.concatenate([ids[5:], np.zeros((3, 3))]))
    np.testing.assert_array_equal(last[1], [6, 7, 0, 0, 0])
    np.testing.assert_array_equal(last[2], [1, 1, 0, 0, 0])
    np.testing.assert_array_equal(first[2], [1] * 5)


def test_batches_of_many_sizes_are_filled_to_a_multiple_of_the_devices():
    # Batches cut by tokens (batch_size None): 5 rows over 2 processes of 2
    # devices each are filled to 8, 4 to 4; each process takes half.
    dataset, ids, labels = batches([5, 4])
    shares = [
        list(fill_and_share(dataset, None, 2, index, devices=4).as_numpy_iterator())
        for index in (0, 1)
    ]
    assert [[len(batch[1]) for batch in share] for share in shares] == [[4, 2], [4, 2]]
    first = np.concatenate([shares[0][0][1], shares[1][0][1]])
    np.testing.assert_array_equal(first, [1, 2, 3, 4, 5, 0, 0, 0])
    np.testing.assert_array_equal(
        np.concatenate([shares[0][0][2], shares[1][0][2]]), [1] * 5 + [0] * 3
    )
    second = np.concatenate([shares[0][1][0]["ids"], shares[1][1][0]["ids"]])
    np.testing.assert_array_equal(second, ids[5:])


MIRRORED_FIT = """
import sys
import numpy as np
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
if sys.argv[1] == "1":
    from keras_attention import compat

    assert compat.patch_symbolic_build()
import keras
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = keras.Sequential([keras.Input([4]), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
# A first batch of 11 rows: the two replicas get 6 and 5.
rows = np.arange(44, dtype="float32").reshape(11, 4)
model.fit(tf.data.Dataset.from_tensor_slices((rows, rows[:, :1])).batch(11), verbose=0)
print("trained")
"""


def mirrored_fit(patch):
    return subprocess.run(
        [sys.executable, "-c", MIRRORED_FIT, "1" if patch else "0"],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.skipif(not compat.is_affected(), reason="only this Keras needs the patch")
def test_mirrored_fit_with_replica_parts_of_different_sizes_needs_the_patch():
    """Keras averages the first batch over the replicas to build the model:
    parts of 6 and 5 rows cannot be added. With the patch it takes one part."""
    without = mirrored_fit(patch=False)
    assert without.returncode != 0 and "must have the same size and shape" in without.stderr
    patched = mirrored_fit(patch=True)
    assert patched.returncode == 0, patched.stderr[-3000:]
    assert "trained" in patched.stdout
