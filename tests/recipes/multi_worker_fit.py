"""One process of a multi-worker `model.fit` (run by test_multi_worker.py).

    python multi_worker_fit.py INDEX PORTS OUTPUT PATCH

INDEX -1 trains in one process with the default strategy; otherwise this is
worker INDEX of a cluster on 127.0.0.1:PORTS (comma separated). PATCH 1
applies `keras_attention.compat.patch()`. Writes the losses and
the final weights to OUTPUT (.npz).
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf

index, ports, output, patch = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4] == "1"
if index >= 0:
    workers = [f"127.0.0.1:{port}" for port in ports.split(",")]
    os.environ["TF_CONFIG"] = json.dumps(
        {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
    )
    if patch:
        from keras_attention import compat

        compat.patch()
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
else:
    strategy = tf.distribute.get_strategy()

import keras  # noqa: E402

from keras_attention.models import build_transformer  # noqa: E402
from keras_attention.recipes.strategy import shard_by_data  # noqa: E402

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
source = rng.integers(3, 20, size=(64, 6)).astype("int32")
target = rng.integers(3, 20, size=(64, 5)).astype("int32")
batches = tf.data.Dataset.from_tensor_slices(
    ({"source_ids": source, "target_ids": target}, target)
).batch(16)  # the global batch
with strategy.scope():
    model = build_transformer(20, dropout=0.0)
    model.compile(
        optimizer=keras.optimizers.SGD(0.1),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
history = model.fit(shard_by_data(batches), epochs=2, verbose=0)
weights = {f"weight_{i}": w for i, w in enumerate(model.get_weights())}
np.savez(output, loss=np.array(history.history["loss"]), **weights)
