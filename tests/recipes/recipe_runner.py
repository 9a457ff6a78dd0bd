"""Runs a recipe as its command does, with two test settings from the
environment (run by test_resume_after_kill.py):

    KILL_AT=EPOCH:STEP python recipe_runner.py RECIPE [FLAGS...]

- `KILL_AT`: the process sends itself SIGKILL right after training step STEP
  of epoch EPOCH (1-based, as printed). Pick a step that is not a checkpoint
  step: the work since the last checkpoint is lost, as in a real kill. With
  `KILL_WORKER=I`, only process I of several (a `multi_worker` worker, or a
  JAX process) kills itself.
- `LOGICAL_CPUS=N`: split the CPU into N logical devices (for `mirrored`).
"""

import importlib
import json
import os
import signal
import sys

import tensorflow as tf

from keras_attention.recipes import resume

if os.environ.get("LOGICAL_CPUS"):
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * int(os.environ["LOGICAL_CPUS"])
    )

if os.environ.get("KILL_AT"):
    kill_at = tuple(int(n) for n in os.environ["KILL_AT"].split(":"))
    task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
    index = os.environ.get("KERAS_DISTRIBUTION_PROCESS_ID", task.get("index"))
    this_process = os.environ.get("KILL_WORKER") in (None, str(index))
    save_every = resume.SaveEvery.on_train_batch_end

    def on_train_batch_end(self, batch, logs=None):
        save_every(self, batch, logs)
        if this_process and (self.start.epoch + 1, self.start.step + batch + 1) == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    resume.SaveEvery.on_train_batch_end = on_train_batch_end

recipe, *flags = sys.argv[1:]
importlib.import_module(f"keras_attention.recipes.{recipe}").main(flags)
