"""The recipes under `KERAS_BACKEND=jax`: train with the same tf.data input,
resume after a kill, train data-parallel with `keras.distribution` on two
host devices of one process and on two processes of one device each (a
multi-process job on 127.0.0.1, killed and resumed too), train in mixed
precision, and end with an export, made by the export command on
TensorFlow, that TF Serving's way of loading answers as the JAX model
decoded.

Every run is its own process (the backend is chosen at import); this test
process runs on TensorFlow and reads what they wrote.
"""

import json
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import keras
import numpy as np
import pytest
from export_helpers import ask_a_fresh_process
from kill_helpers import (
    KILL_AT,
    NEWEST_BEFORE_KILL,
    assert_resumed_as_reference,
    assert_same_run,
    epoch_losses,
    finish,
    flags,
    run,
)
from recipe_helpers import free_ports, tiny_flags

# Each test forks training runs on JAX: `pytest -m large`.
pytestmark = pytest.mark.large

JAX = {"KERAS_BACKEND": "jax"}
# Beside the XLA flags the tests run with (tests/conftest.py's threads), so
# that the two-device run computes as the two processes do.
TWO_HOST_DEVICES = {
    **JAX,
    "XLA_FLAGS": f"--xla_force_host_platform_device_count=2 {os.environ.get('XLA_FLAGS', '')}",
}
BEAM = ("--beam-size", "2", "--no-tune-decoding")
DATA_PARALLEL = (*BEAM, "--strategy", "data_parallel")
# Runs whose export nothing reads skip it: a third of a run.
NO_EXPORT = "--no-export"


@pytest.fixture(scope="module")
def jax_runs(dates_data_dir, tmp_path_factory):
    """An uninterrupted JAX run in one process on one device (beam search 2
    in its evaluation), shared by the tests. It does not export: that an
    export made from a JAX run answers what the JAX model translated is
    tests/convert/test_fine_tune_everywhere.py's check. A JAX run killed and
    resumed is `test_a_killed_process_ends_the_other_and_both_resume_as_uninterrupted`'s."""
    folder = tmp_path_factory.mktemp("jax")
    reference = finish(run(flags(dates_data_dir, folder / "reference", *BEAM, NO_EXPORT), JAX))
    assert reference[0] == 0, reference[2][-3000:]
    return folder, reference


@pytest.fixture(scope="module")
def two_devices(jax_runs, dates_data_dir):
    """`--strategy data_parallel` in one process with two host devices (no
    export: the two-process run's is checked, and an export is made from
    the saved model whatever the strategy)."""
    output_dir = jax_runs[0] / "data_parallel"
    arguments = flags(dates_data_dir, output_dir, *DATA_PARALLEL, NO_EXPORT)
    return output_dir, finish(run(arguments, TWO_HOST_DEVICES))


def test_data_parallel_on_two_devices_trains_as_one(jax_runs, two_devices):
    """`--strategy data_parallel`: each step's batch of 32 split over two
    devices, the gradients combined: the same training as one device, to
    the rounding of the sums."""
    _, reference = jax_runs
    output_dir, (code, stdout, stderr) = two_devices
    assert code == 0, stderr[-3000:]
    assert "strategy data_parallel (2 replicas)" in stdout
    losses = [float(loss) for loss in epoch_losses(stdout)]
    expected = [float(loss) for loss in epoch_losses(reference[1])]
    assert len(losses) == 3
    assert losses == pytest.approx(expected, abs=2e-3)


def test_token_batches_on_two_devices_train_as_on_one(dates_data_dir, tmp_path):
    """`--batch-tokens`: batches of several sizes, each filled with empty
    rows to an even count (`fill_and_share`) and split over two devices,
    train as on one."""
    tokens = ("--batch-tokens", "1024", NO_EXPORT)
    one = finish(run(flags(dates_data_dir, tmp_path / "one", *BEAM, *tokens), JAX))
    two = finish(
        run(flags(dates_data_dir, tmp_path / "two", *DATA_PARALLEL, *tokens), TWO_HOST_DEVICES)
    )
    for code, _, stderr in (one, two):
        assert code == 0, stderr[-3000:]
    assert "strategy data_parallel (2 replicas)" in two[1]
    losses = [float(loss) for loss in epoch_losses(two[1])]
    assert len(losses) == 3
    assert losses == pytest.approx([float(loss) for loss in epoch_losses(one[1])], abs=2e-3)


# --- Two processes of one device each: a multi-process job on 127.0.0.1 ---

JOIN_TIMEOUT = "30"  # seconds (--join-timeout); a kill ends the other process in as many


def start_job(arguments, environment, tmp_dirs, count=2):
    """`count` recipe processes joined as one JAX job, as docs/training.md
    starts them, each with its own temporary folder `tmp_dirs[i]`."""
    job = {
        **JAX,
        **environment,
        "KERAS_DISTRIBUTION_JOB_ADDRESSES": f"127.0.0.1:{free_ports(1)[0]}",
        "KERAS_DISTRIBUTION_NUM_PROCESSES": str(count),
    }
    return [
        run(arguments, {**job, "KERAS_DISTRIBUTION_PROCESS_ID": str(i), "TMPDIR": str(tmp_dirs[i])})
        for i in range(count)
    ]


def job_flags(data_dir, output_dir, *extra):
    return flags(data_dir, output_dir, *DATA_PARALLEL, "--join-timeout", JOIN_TIMEOUT, *extra)


@pytest.fixture(scope="module")
def two_processes(jax_runs, dates_data_dir):
    """An uninterrupted two-process run; and the same run (without its
    export) with process 0 (the coordinator, and the only one that writes)
    killed at `KILL_AT`, then both started again. Returns the folders, the
    uninterrupted run's `(code, stdout, stderr)` of each process, the
    killed run's, the resumed run's, and the temporary folders each process
    was given."""
    folder = jax_runs[0] / "two_processes"
    tmp_dirs = [folder / f"tmp{i}" for i in (0, 1)]
    for tmp in tmp_dirs:
        tmp.mkdir(parents=True)
    uninterrupted_dir, resumed_dir = folder / "reference", folder / "killed"
    uninterrupted = [
        finish(p) for p in start_job(job_flags(dates_data_dir, uninterrupted_dir), {}, tmp_dirs)
    ]
    kill = {"KILL_AT": KILL_AT, "KILL_WORKER": "0"}
    started = time.monotonic()
    restart_flags = job_flags(dates_data_dir, resumed_dir, NO_EXPORT)  # killed, then resumed
    killed = [finish(p) for p in start_job(restart_flags, kill, tmp_dirs)]
    killed_seconds = time.monotonic() - started
    resumed = [finish(p) for p in start_job(restart_flags, {}, tmp_dirs)]
    return SimpleNamespace(
        uninterrupted_dir=uninterrupted_dir,
        resumed_dir=resumed_dir,
        uninterrupted=uninterrupted,
        killed=killed,
        killed_seconds=killed_seconds,
        resumed=resumed,
        tmp_dirs=tmp_dirs,
    )


def test_two_processes_train_as_one_process_on_two_devices(two_processes, two_devices):
    """Two processes of one device each compute what one process computes
    on two devices: the same program over the same split of every batch,
    the gradients summed across processes (gloo) rather than within one.
    Measured on this machine: the same losses and weights bit for bit, run
    after run (and after a kill, below), so the tolerance is none."""
    one_dir, one_process = two_devices
    assert one_process[0] == 0, one_process[2][-3000:]
    for index, (code, stdout, stderr) in enumerate(two_processes.uninterrupted):
        assert code == 0, stderr[-3000:]
        assert f"Process {index} of 2: joining the job at 127.0.0.1:" in stdout
        assert "strategy data_parallel (2 replicas)" in stdout
        losses = epoch_losses(stdout)
        assert len(losses) == 3 and losses == epoch_losses(one_process[1])
    assert_same_run(one_dir, two_processes.uninterrupted_dir)


def test_only_process_0_writes_the_run_and_its_export(two_processes):
    run_dir = two_processes.uninterrupted_dir
    (_, chief, _), (_, other, _) = two_processes.uninterrupted
    assert f"TF Serving export: {run_dir / 'serving' / 'translate' / '1'}" in chief
    assert "Process 1: done; process 0 writes the run's files." in other
    assert "Exporting" not in other and "model:" not in other
    assert not list(run_dir.glob(".worker*"))
    assert [p.name for p in (run_dir / "serving" / "translate").iterdir()] == ["1"]
    # Process 1 wrote only in a temporary folder of its own, removed at its end.
    assert not list(two_processes.tmp_dirs[1].glob("keras-attention-process1-*"))


def test_a_killed_process_ends_the_other_and_both_resume_as_uninterrupted(two_processes):
    """SIGKILL of process 0 at `KILL_AT`: process 1 stops too, within
    --join-timeout, rather than wait forever; started again, both resume at
    the same epoch and step and end with the uninterrupted run's losses and
    weights, bit for bit."""
    (killed_code, killed_stdout, _), (other_code, _, other_stderr) = two_processes.killed
    assert killed_code == -signal.SIGKILL
    assert other_code != 0
    assert "the JAX distributed service detected fatal errors" in other_stderr
    assert two_processes.killed_seconds < 300  # startup, 1.5 epochs, then the timeout
    newest = two_processes.resumed_dir / "checkpoints" / NEWEST_BEFORE_KILL
    for index, (code, stdout, stderr) in enumerate(two_processes.resumed):
        assert code == 0, f"process {index}: {stderr[-3000:]}"
        assert f"Resuming from {newest}: epoch 2, step 2" in stdout
    reference = two_processes.uninterrupted[0]
    assert_resumed_as_reference(
        two_processes.resumed[0], killed_stdout, reference, two_processes.resumed_dir
    )


def test_mixed_precision_on_jax(dates_data_dir, tmp_path):
    output_dir = tmp_path / "run"
    extra = ("--epochs", "1", "--precision", "mixed_float16", NO_EXPORT)
    code, stdout, stderr = finish(run(flags(dates_data_dir, output_dir, *extra), JAX))
    assert code == 0, stderr[-3000:]
    assert "precision mixed_float16" in stdout
    assert all(loss != "nan" for loss in epoch_losses(stdout))
    model = keras.saving.load_model(output_dir / "model.keras", compile=False)
    for name in ("encoder", "decoder", "logits"):  # float16 compute, float32 weights
        assert model.get_layer(name).dtype_policy.name == "mixed_float16"
    assert all(weight.dtype == "float32" for weight in model.trainable_weights)


def recipe_error(arguments, env):
    result = subprocess.run(
        [sys.executable, "-m", "keras_attention.recipes.translate", *arguments],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
    )
    assert "Traceback" not in result.stderr
    return result.returncode, result.stderr


def test_tensorflow_strategies_uneven_batches_and_bad_jobs_are_refused_on_jax(
    tmp_path,
):
    code, stderr = recipe_error(["--strategy", "mirrored", "--output-dir", str(tmp_path)], JAX)
    assert code == 2
    assert "--strategy mirrored is not for KERAS_BACKEND=jax; choose default or data_parallel" in (
        stderr
    )
    arguments = ["--strategy", "data_parallel", "--batch-size", "33", "--output-dir", str(tmp_path)]
    code, stderr = recipe_error(arguments, TWO_HOST_DEVICES)
    assert code == 1
    assert "--batch-size 33 does not split evenly over the 2 devices of --strategy" in stderr
    # A process of a job whose coordinator never answers (nothing listens
    # there) stops with a message, once --join-timeout has passed.
    address = f"127.0.0.1:{free_ports(1)[0]}"
    alone = {**JAX, "KERAS_DISTRIBUTION_JOB_ADDRESSES": address}
    alone.update(KERAS_DISTRIBUTION_NUM_PROCESSES="2", KERAS_DISTRIBUTION_PROCESS_ID="1")
    arguments = ["--strategy", "data_parallel", "--join-timeout", "5"]
    started = time.monotonic()
    code, stderr = recipe_error([*arguments, "--output-dir", str(tmp_path)], alone)
    assert code == 1
    assert time.monotonic() - started < 120  # starting Python and JAX, then 5 s
    assert f"error: process 1 of 2 could not join the JAX job at {address}" in stderr
    assert "within --join-timeout 5 s" in stderr
    # A job's variables with another strategy: each process would train alone.
    code, stderr = recipe_error(["--output-dir", str(tmp_path)], alone)
    assert code == 1
    assert "(a job of several processes): use --strategy data_parallel, not default" in stderr


def test_the_classifier_trains_and_exports_on_jax(dates_data_dir, tmp_path):
    """The classifier: the same flags, trained on JAX, the export made on
    TensorFlow and answered in a fresh process. (The translator and the
    language model: tests/convert/test_fine_tune_everywhere.py, which
    fine-tunes converted checkpoints on JAX and holds their exports against
    the JAX models' answers.)"""
    recipe, text_input, output = "classify", "text", "label"
    output_dir = tmp_path / "run"
    flags = tiny_flags(dates_data_dir, output_dir, "--train-examples", "128")
    result = subprocess.run(
        [sys.executable, "-m", f"keras_attention.recipes.{recipe}", *flags],
        env={**os.environ, **JAX},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Exporting with TensorFlow" in result.stdout
    assert json.loads((output_dir / "evaluation.json").read_text())
    export_path = output_dir / "serving" / recipe / "1"  # the recipe's --export-name
    texts = {text_input: np.array([b"lundi 4 avril 1977"], dtype=object)}
    spec = {str(export_path): [("serving_default", texts)]}
    answer = ask_a_fresh_process(spec, tmp_path)[str(export_path)]["answers"][0]
    assert answer[output].shape == (1,) and answer[output][0]
