"""model.fit under MultiWorkerMirroredStrategy: two local worker processes on
127.0.0.1 (TF_CONFIG), against one process at the same global batch."""

import json
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
from recipe_helpers import CLUSTERS, free_ports

import keras_attention  # noqa: F401  (registers the models for loading)
from keras_attention import compat

# Clusters of local worker processes: `pytest -m large`.
pytestmark = [pytest.mark.large, pytest.mark.xdist_group(CLUSTERS)]

HERE = Path(__file__).parent


def run_cluster(command, num_workers=2, timeout=240):
    """Starts `command(index, ports)` for each worker; returns their results."""
    ports = ",".join(map(str, free_ports(num_workers)))
    processes = [
        subprocess.Popen(
            command(index, ports), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for index in range(num_workers)
    ]
    results = []
    for process in processes:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for p in processes:
                p.kill()
            raise
        results.append((process.returncode, stdout, stderr))
    return results


def fit_command(output, patch):
    def command(index, ports):
        return [
            sys.executable,
            str(HERE / "multi_worker_fit.py"),
            str(index),
            ports,
            str(output(index)),
            "1" if patch else "0",
        ]

    return command


def test_model_fit_matches_a_single_process_with_the_patch(tmp_path):
    single = tmp_path / "single.npz"
    subprocess.run(
        fit_command(lambda i: single, patch=False)(-1, ""), check=True, capture_output=True
    )
    results = run_cluster(fit_command(lambda i: tmp_path / f"worker{i}.npz", patch=True))
    for returncode, _, stderr in results:
        assert returncode == 0, stderr[-3000:]
    expected = np.load(single)
    for index in range(2):
        got = np.load(tmp_path / f"worker{index}.npz")
        np.testing.assert_allclose(got["loss"], expected["loss"], rtol=1e-5)
        for name in expected.files:
            np.testing.assert_allclose(got[name], expected[name], rtol=1e-4, atol=1e-6)


@pytest.mark.skipif(not compat.is_affected(), reason="only this Keras needs the patch")
def test_without_the_patch_keras_fit_fails(tmp_path):
    """Shows why the patch exists; if this starts passing, Keras has been fixed
    and AFFECTED_VERSIONS should end before this version."""
    results = run_cluster(fit_command(lambda i: tmp_path / f"worker{i}.npz", patch=False))
    assert all(returncode != 0 for returncode, _, _ in results)
    assert any("PerReplica" in stderr for _, _, stderr in results)


def test_the_translate_recipe_trains_like_one_process(tmp_path):
    data_dir = tmp_path / "tfds"
    flags = [
        "--data-dir",
        str(data_dir),
        "--train-examples",
        "128",
        "--test-examples",
        "8",
        "--epochs",
        "1",
        "--batch-size",
        "16",
        "--model-overrides",
        '{"dropout": 0.0}',
        # tf.data's seeded shuffle orders examples differently once distributed,
        # so the comparison with one process runs unshuffled.
        "--no-shuffle",
        # Adam divides by sqrt(v) + epsilon: with the paper's 1e-9, a gradient
        # that is zero up to summation order still moves a weight by a full
        # step, in a random direction. A larger epsilon lets such noise stay
        # noise, so the weights can be compared closely.
        "--adam-epsilon",
        "1e-3",
    ]
    recipe = [sys.executable, "-m", "keras_attention.recipes.translate", *flags]
    single = subprocess.run(
        # The cluster's chief exports; the single process need not.
        [*recipe, "--output-dir", str(tmp_path / "single"), "--no-export"],
        capture_output=True,
        text=True,
    )
    assert single.returncode == 0, single.stderr[-3000:]

    def worker(index, ports):
        config = {
            "cluster": {"worker": [f"127.0.0.1:{p}" for p in ports.split(",")]},
            "task": {"type": "worker", "index": index},
        }
        return [
            "env",
            f"TF_CONFIG={json.dumps(config)}",
            *recipe,
            "--strategy",
            "multi_worker",
            "--output-dir",
            str(tmp_path / "cluster"),
        ]

    results = run_cluster(worker)
    for returncode, _, stderr in results:
        assert returncode == 0, stderr[-3000:]
    assert "strategy multi_worker (2 replicas)" in results[0][1]
    # The chief writes the run's files; the other worker writes beside them.
    assert (tmp_path / "cluster" / "evaluation.json").is_file()
    assert (tmp_path / "cluster" / ".worker1" / "model.keras").is_file()

    # The same losses, as printed (4 decimals)...
    def losses(stdout):
        return [
            line.split(" - loss: ")[1].split(" - ")[0]
            for line in stdout.splitlines()
            if " - loss: " in line
        ]

    assert losses(results[0][1]) == losses(single.stdout) == losses(results[1][1])

    # ...and the same weights: the workers exactly, the single process up to
    # float32 summation order.
    def weights(path):
        return keras.saving.load_model(path).get_weights()

    chief, other = (
        weights(tmp_path / "cluster" / "model.keras"),
        weights(tmp_path / "cluster" / ".worker1" / "model.keras"),
    )
    expected = weights(tmp_path / "single" / "model.keras")
    for a, b, c in zip(chief, other, expected, strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, c, atol=1e-5)
