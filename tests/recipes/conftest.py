import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
from recipe_helpers import tiny_flags

# TensorFlow is imported in the fixtures, not here: pytest-xdist's main
# process reads this file too, and would print TensorFlow's start-up lines
# (tests/conftest.py starts it quietly in the processes that run tests).


@pytest.fixture(scope="session")
def dates_data_dir(tmp_path_factory):
    """The offline dates data set, prepared once for every recipe test."""
    import tensorflow_datasets as tfds

    import keras_attention.data.multilingual_dates  # noqa: F401

    data_dir = tmp_path_factory.mktemp("tfds")
    tfds.builder("multilingual_dates", data_dir=data_dir).download_and_prepare()
    return data_dir


@pytest.fixture(scope="session")
def first_run(tmp_path_factory):
    """A newcomer's first run, made once: the README's command in a fresh
    process, with no data set prepared yet (an empty TFDS_DATA_DIR, as on a
    fresh machine, so the run generates it), at tiny sizes, two epochs, the
    train step compiled by XLA. Its console and its files are checked by
    test_console.py."""
    folder = tmp_path_factory.mktemp("first_run")
    # The test suite quiets TensorFlow for itself (tests/conftest.py); the
    # command must do it on its own.
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["TFDS_DATA_DIR"] = str(folder / "tensorflow_datasets")
    output_dir = folder / "run"
    flags = tiny_flags(None, output_dir, "--epochs", "2", "--checkpoint-every", "4")
    result = subprocess.run(
        [sys.executable, "-m", "keras_attention.recipes.translate", *flags, "--jit-compile"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=folder,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return SimpleNamespace(output_dir=output_dir, stdout=result.stdout, stderr=result.stderr)


@pytest.fixture(autouse=True)
def deterministic_ops_as_they_were():
    """A recipe run in the test process with --deterministic turns on
    TensorFlow's deterministic ops for the whole process (a later recipe run
    sets them as its own flags say, but a model compiled or loaded outside a
    run would find them on, and Keras would drop its jit_compile with a
    warning): each test leaves them as it found them."""
    from keras_attention import compat

    was_on = compat.is_op_determinism_enabled()
    yield
    if compat.is_op_determinism_enabled() and not was_on:
        compat.disable_op_determinism()
