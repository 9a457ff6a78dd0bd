"""`python -m keras_attention.export RUN`: a finished run's folder to TF
Serving's layout, from either Keras backend."""

import os
import subprocess
import sys

import tensorflow as tf
from export_helpers import TEXTS, decode_in_process, make_run

from keras_attention import export


def test_a_run_exports_from_tensorflow_and_from_jax(exports, tmp_path):
    run = make_run(exports, tmp_path / "run")
    expected = decode_in_process(exports.translator, exports.tokenizer, TEXTS)
    for backend, name in (("tensorflow", "from_tf"), ("jax", "from_jax")):
        result = subprocess.run(
            [sys.executable, "-m", "keras_attention.export", str(run / "model.keras")]
            + ["--base", str(tmp_path / "serving"), "--name", name],
            env={**os.environ, "KERAS_BACKEND": backend},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert ("runs again with KERAS_BACKEND=tensorflow" in result.stdout) == (backend == "jax")
        version = tmp_path / "serving" / name / "1"
        assert f"to {version}" in result.stdout
        served = tf.saved_model.load(str(version)).signatures["serving_default"]
        assert list(served(text=tf.constant(TEXTS))["translation"].numpy()) == expected
    config = (tmp_path / "serving" / "models.config").read_text()
    assert "from_tf" in config and "from_jax" in config


def test_a_folder_that_is_not_a_run_is_refused(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "keras_attention.export", str(tmp_path)],
        env={**os.environ, "KERAS_BACKEND": "tensorflow"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 1
    assert f"error: {tmp_path / 'model.keras'} not found" in result.stderr
    assert export.versions(tmp_path) == []
