"""A recipe run killed with SIGKILL in the middle of an epoch, then started
again with the same command, resumes at the same epoch and step and ends as
if it had never stopped.

No tolerance. With `--deterministic` the resumed run trains on the same
batches in the same order from the same weights, optimizer state and dropout
random state, under every strategy tested (default and a two-process
`multi_worker` job here; `mirrored` on two logical CPUs in
tests/convert/test_fine_tune_everywhere.py, on a fine-tuning run), so each
test asks for the validation losses as printed, the same evaluation and the
same weights, bit for bit.

The killed run starts from scratch, as its reference did, with the same
seed: its first epoch's validation loss must equal the reference's, and
the run resumed from the weights it left must end with the reference's
weights and evaluation. So the default-strategy test is also the check
that the same seed gives the same weights and results (two runs from
scratch, bit for bit).

Distributed runs were not always reproducible: `model.fit` left to find the
end of an epoch's data ran the train step once more on the spent iterator,
and the optimizer's step counter moved on some replicas and not others
(see `recipes/training.py: fit`). The test of that cause is in test_resume.py.
"""

import json
import re
import shutil
import signal
import time

import pytest
from kill_helpers import (
    KILL_AT,
    NEWEST_BEFORE_KILL,
    assert_resumed_as_reference,
    assert_same_run,
    epoch_losses,
    finish,
    flags,
    kill_and_keep,
    run,
)
from recipe_helpers import CLUSTERS, check_language_model_export, free_ports

# Each test trains and kills several runs, some of several processes: `pytest -m large`.
pytestmark = pytest.mark.large
NO_EXPORT = "--no-export"  # the export is tested elsewhere; here it would be a third of a run


@pytest.fixture(scope="module")
def default_strategy_runs(dates_data_dir, tmp_path_factory):
    """One uninterrupted run and one killed run, shared by the tests that
    resume the killed one (each on its own copy). Without the export
    (`--no-export`): nothing here reads it, and it is a third of a run."""
    folder = tmp_path_factory.mktemp("default_strategy")
    reference = finish(run(flags(dates_data_dir, folder / "reference", NO_EXPORT)))
    assert reference[0] == 0, reference[2][-3000:]
    # A run without its export still draws its attention map, from the model.
    assert "TF Serving export: none (--no-export" in reference[1]
    assert (folder / "reference" / "attention.png").is_file()
    assert not (folder / "reference" / "serving").exists()
    killed_flags = flags(dates_data_dir, folder / "killed", NO_EXPORT)
    killed = kill_and_keep(killed_flags, folder / "killed", {})
    return folder, reference, killed


@pytest.mark.parametrize("damage", [None, "truncate the newest"])
def test_a_killed_run_resumes_at_the_same_step(damage, default_strategy_runs, dates_data_dir):
    folder, reference, killed_stdout = default_strategy_runs
    output_dir = folder / ("resumed-damaged" if damage else "resumed")
    shutil.copytree(folder / "killed", output_dir)
    checkpoints = output_dir / "checkpoints"
    newest = checkpoints / NEWEST_BEFORE_KILL
    if damage:  # as if the disk lost half of it: the one before is used
        weights = newest / "model.weights.h5"
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])

    resumed = finish(run(flags(dates_data_dir, output_dir, NO_EXPORT)))
    assert resumed[0] == 0, resumed[2][-3000:]
    if damage:
        assert f"checkpoint {newest} is unreadable" in resumed[1]
        assert (checkpoints / "unreadable").is_dir()
        assert (
            "Resuming from" in resumed[1]
            and NEWEST_BEFORE_KILL not in resumed[1].split("Resuming from")[1].splitlines()[0]
        )
    else:
        assert f"Resuming from {newest}: epoch 2, step 2" in resumed[1]
    assert_resumed_as_reference(resumed, killed_stdout, reference, output_dir)


TOKEN_BATCHES = ("--batch-tokens", "1024")  # 21 to 128 dates a batch, by their length


def test_a_killed_run_with_token_batches_resumes_at_the_same_step(dates_data_dir, tmp_path):
    """Batches cut by tokens (`--batch-tokens`): of several sizes, fewer
    than the 8 batches of 32 an epoch of 256 pairs has otherwise."""
    reference = finish(
        run(flags(dates_data_dir, tmp_path / "reference", NO_EXPORT, *TOKEN_BATCHES))
    )
    assert reference[0] == 0, reference[2][-3000:]
    steps = int(re.search(r"^(\d+)/\1 - ", reference[1], re.MULTILINE).group(1))
    assert 3 <= steps < 8  # the kill is at epoch 2's third step
    output_dir = tmp_path / "killed"
    arguments = flags(dates_data_dir, output_dir, NO_EXPORT, *TOKEN_BATCHES)
    killed_stdout = kill_and_keep(arguments, output_dir, {})
    resumed = finish(run(arguments))
    assert f"Resuming from {output_dir / 'checkpoints' / NEWEST_BEFORE_KILL}" in resumed[1]
    assert_resumed_as_reference(resumed, killed_stdout, reference, output_dir)


def cluster(arguments, env_for=lambda index: {}):
    ports = [f"127.0.0.1:{port}" for port in free_ports(2)]
    processes = []
    for index in range(2):
        config = {"cluster": {"worker": ports}, "task": {"type": "worker", "index": index}}
        env = {"TF_CONFIG": json.dumps(config), **env_for(index)}
        processes.append(run([*arguments, "--strategy", "multi_worker"], env))
    return processes


@pytest.mark.xdist_group(CLUSTERS)
def test_a_cluster_with_a_killed_worker_restarts_from_the_chiefs_checkpoint(
    dates_data_dir, tmp_path
):
    """With batches cut by tokens, of several sizes, each split between the
    two workers (sentence batches are test_multi_worker.py's)."""
    arguments = flags(dates_data_dir, tmp_path / "reference", NO_EXPORT, *TOKEN_BATCHES)
    reference = [finish(p) for p in cluster(arguments)]
    assert all(code == 0 for code, _, _ in reference), reference[0][2][-3000:]

    # Worker 1 dies mid-epoch; worker 0, waiting for it, is stopped too (as a
    # job scheduler would), and the job is started again as it was.
    output_dir = tmp_path / "killed"
    arguments = flags(dates_data_dir, output_dir, NO_EXPORT, *TOKEN_BATCHES)
    chief, worker = cluster(arguments, lambda index: {"KILL_AT": KILL_AT, "KILL_WORKER": "1"})
    assert finish(worker)[0] == -signal.SIGKILL
    time.sleep(2)
    chief.kill()
    chief.communicate()
    assert not (output_dir / "evaluation.json").exists()
    assert (output_dir / "checkpoints" / NEWEST_BEFORE_KILL).is_dir()

    resumed = [finish(p) for p in cluster(arguments)]
    for code, stdout, stderr in resumed:
        assert code == 0, stderr[-3000:]
        # Every worker resumes from the chief's checkpoint.
        assert f"Resuming from {output_dir / 'checkpoints' / NEWEST_BEFORE_KILL}" in stdout
    assert epoch_losses(resumed[0][1]) == epoch_losses(reference[0][1])[1:]
    assert_same_run(tmp_path / "reference", output_dir)


def test_a_killed_language_model_run_with_the_windowed_modern_preset_resumes(
    dates_data_dir, tmp_path
):
    """The language-model recipe with `modern_windowed` (every option of the
    `modern` preset, and sliding-window layers between global ones)."""
    lm = "language_model"
    extra = ["--model-preset", "modern_windowed"]
    reference = finish(run(flags(dates_data_dir, tmp_path / "reference", *extra), recipe=lm))
    assert reference[0] == 0, reference[2][-3000:]
    output_dir = tmp_path / "killed"
    killed_stdout = kill_and_keep(flags(dates_data_dir, output_dir, *extra), output_dir, {}, lm)
    resumed = finish(run(flags(dates_data_dir, output_dir, *extra), recipe=lm))
    assert resumed[0] == 0, resumed[2][-3000:]
    newest = output_dir / "checkpoints" / NEWEST_BEFORE_KILL
    assert f"Resuming from {newest}: epoch 2, step 2" in resumed[1]
    assert_resumed_as_reference(
        resumed, killed_stdout, reference, output_dir, results=("perplexity", "test_loss")
    )
    check_language_model_export(output_dir / "serving" / lm / "1")
