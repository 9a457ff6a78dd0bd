"""`--init-from RUN` on a converted checkpoint under every strategy and
backend a recipe supports: `mirrored` on two logical CPUs (fine-tuning
lowers the validation loss and exports; killed in the middle of an epoch
and resumed, bit for bit as if never stopped), a two-process
`multi_worker` job (its workers agree, the validation loss falls), and JAX
(trains there, exports on TensorFlow, and the export answers in a fresh
process as the trained model does), for the translation and the
language-model recipe."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from convert_helpers import FIXTURES, pairs, validation_loss, write_pairs
from export_helpers import ask_a_fresh_process
from kill_helpers import (
    NEWEST_BEFORE_KILL,
    assert_resumed_as_reference,
    finish,
    kill_and_keep,
    run,
)
from recipe_helpers import CLUSTERS, free_ports

from keras_attention import decoding
from keras_attention.convert import convert
from keras_attention.data.tokenizers import START_ID, load_run_tokenizer, token_ids
from keras_attention.run_files import RunFiles

# Each test trains several runs, some of several processes.
pytestmark = pytest.mark.large
MIRRORED = {"LOGICAL_CPUS": "2"}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The converted Marian and Llama fixtures, and small data files."""
    folder = tmp_path_factory.mktemp("init_from")
    marian = convert(FIXTURES / "marian", folder / "marian", export=False)
    llama = convert(FIXTURES / "llama", folder / "llama", export=False)
    train, validation, test = (
        write_pairs(folder / f"{name}.tsv", pairs(count, seed))
        for name, count, seed in (("train", 96, 0), ("validation", 16, 1), ("test", 8, 2))
    )
    texts = folder / "texts.txt"
    texts.write_text("".join(f"{s} {t}\n" for s, t in pairs(96, 3)), encoding="utf-8")
    return dict(
        marian=marian, llama=llama, train=train, validation=validation, test=test, texts=texts
    )


def translate_flags(files, output_dir, *extra):
    """Six batches of 16 an epoch; two epochs, a checkpoint every two
    steps (the kill at epoch 2, step 3 loses a step), the same batches and
    weights each time (`--deterministic`)."""
    flags = {
        "--init-from": files["marian"],
        "--train-file": files["train"],
        "--validation-file": files["validation"],
        "--test-file": files["test"],
        "--batch-size": 16,
        "--learning-rate": 1e-3,
        "--epochs": 2,
        "--checkpoint-every": 2,
        "--output-dir": output_dir,
    }
    return [str(a) for item in flags.items() for a in item] + ["--deterministic", *extra]


def weights(path):
    return keras.saving.load_model(path).get_weights()


def test_a_killed_mirrored_fine_tuning_resumes_as_if_never_stopped(files, tmp_path):
    """The uninterrupted run also exports (the killed and resumed ones need
    not), and its evaluation and weights are the resumed run's reference."""
    extra = ("--strategy", "mirrored")
    reference = finish(run(translate_flags(files, tmp_path / "reference", *extra), MIRRORED))
    assert reference[0] == 0, reference[2][-3000:]
    assert "strategy mirrored (2 replicas)" in reference[1]
    assert (tmp_path / "reference" / "serving" / "translate" / "1" / "saved_model.pb").is_file()
    assert (
        json.loads((tmp_path / "reference" / "evaluation.json").read_text())["test_examples"] == 8
    )
    assert f"Fine-tuning {files['marian'] / 'model.keras'}" in reference[1]
    rows = pairs(16, 1)  # the validation file's
    before, after = (
        validation_loss(files["marian"], rows),
        validation_loss(tmp_path / "reference", rows),
    )
    assert after < 0.9 * before, (before, after)
    output_dir = tmp_path / "killed"
    flags = translate_flags(files, output_dir, *extra, "--no-export")
    killed_stdout = kill_and_keep(flags, output_dir, MIRRORED)
    resumed = finish(run(flags, MIRRORED))
    assert resumed[0] == 0, resumed[2][-3000:]
    newest = output_dir / "checkpoints" / NEWEST_BEFORE_KILL
    assert f"Resuming from {newest}: epoch 2, step 2" in resumed[1]
    assert_resumed_as_reference(resumed, killed_stdout, reference, output_dir)
    # The converted tokenizers, kept byte for byte through the kill.
    for name in ("source_vocabulary.json", "target_vocabulary.json", "source_vocabulary.model"):
        assert (output_dir / name).read_bytes() == (files["marian"] / name).read_bytes()


@pytest.mark.xdist_group(CLUSTERS)
def test_a_multi_worker_fine_tuning_trains_as_one_job(files, tmp_path):
    """Both workers end with the same weights, and the job lowers the
    validation loss. (How closely a distributed step follows one process's
    is tests/recipes/test_multi_worker.py's; with sentences of different
    lengths it is close, not equal: Keras averages the loss over each
    replica's tokens, then over the replicas.)"""
    extra = ("--epochs", "1", "--no-export", "--strategy", "multi_worker")
    ports = [f"127.0.0.1:{port}" for port in free_ports(2)]
    workers = []
    for index in range(2):
        config = {"cluster": {"worker": ports}, "task": {"type": "worker", "index": index}}
        flags = translate_flags(files, tmp_path / "cluster", *extra)
        workers.append(run(flags, {"TF_CONFIG": json.dumps(config)}))
    results = [finish(worker) for worker in workers]
    for code, _, stderr in results:
        assert code == 0, stderr[-3000:]
    assert "strategy multi_worker (2 replicas)" in results[0][1]
    assert f"Fine-tuning {files['marian'] / 'model.keras'}" in results[0][1]
    chief = weights(tmp_path / "cluster" / "model.keras")
    other = weights(tmp_path / "cluster" / ".worker1" / "model.keras")
    for a, b in zip(chief, other, strict=True):
        np.testing.assert_array_equal(a, b)
    rows = pairs(16, 1)  # the validation file's
    before, after = (
        validation_loss(files["marian"], rows),
        validation_loss(tmp_path / "cluster", rows),
    )
    assert after < before, (before, after)


def on_jax(recipe, flags):
    """The recipe trained on JAX; its export made on TensorFlow."""
    result = subprocess.run(
        [sys.executable, "-m", f"keras_attention.recipes.{recipe}", *map(str, flags)],
        env={**os.environ, "KERAS_BACKEND": "jax"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Exporting with TensorFlow" in result.stdout
    return result.stdout


def assert_trained(run_dir, converted):
    tuned, before = weights(run_dir / "model.keras"), weights(converted / "model.keras")
    assert sum(not np.allclose(a, b) for a, b in zip(tuned, before, strict=True)) > len(before) // 2


def test_a_translator_fine_tuned_on_jax_exports_what_it_translated(files, tmp_path):
    run_dir = tmp_path / "run"
    stdout = on_jax("translate", translate_flags(files, run_dir, "--epochs", "1"))
    assert f"Fine-tuning {files['marian'] / 'model.keras'}" in stdout
    assert f"Exporting with TensorFlow: -m keras_attention.export {run_dir}" in stdout
    assert "/models/translate" in (run_dir / "serving" / "models.config").read_text()
    assert_trained(run_dir, files["marian"])
    # What the JAX model's search translated in the run, against the export.
    rows = [row.split("\t") for row in (run_dir / "test_translations.tsv").read_text().splitlines()]
    sources, translations = [r[0] for r in rows[1:]], [r[2] for r in rows[1:]]
    assert len(sources) == 8 and len(set(translations)) > 1
    (export_path,) = (run_dir / "serving").glob("*/1")
    text = np.array([source.encode() for source in sources], dtype=object)
    answers = ask_a_fresh_process(
        {str(export_path): [("serving_default", {"text": text})]}, tmp_path
    )
    served = answers[str(export_path)]["answers"][0]["translation"]
    assert [t.decode("utf-8") for t in served] == translations


def test_a_language_model_fine_tuned_on_jax_exports_what_it_completes(files, tmp_path):
    run_dir = tmp_path / "run"
    flags = ["--init-from", files["llama"], "--train-file", files["texts"], "--epochs", "1"]
    flags += ["--max-input-length", "32", "--batch-size", "8", "--output-dir", run_dir]
    stdout = on_jax("language_model", flags)
    assert f"Fine-tuning {files['llama'] / 'model.keras'}" in stdout
    assert_trained(run_dir, files["llama"])
    prompts = [s for s, _ in pairs(6, 4)]
    expected = [greedy_completion(run_dir, prompt, new_tokens=8) for prompt in prompts]
    (export_path,) = (run_dir / "serving").glob("*/1")
    request = {
        "prompt": np.array([p.encode() for p in prompts], dtype=object),
        "beam_size": np.ones(len(prompts), "int32"),
        "max_decoding_length": np.full(len(prompts), 8, "int32"),
    }
    answers = ask_a_fresh_process(
        {str(export_path): [("complete_with_options", request)]}, tmp_path
    )
    assert list(answers[str(export_path)]["answers"][0]["completion"]) == expected


def greedy_completion(run_dir, prompt, new_tokens):
    """The run's model's greedy completion of `prompt`, here (TensorFlow),
    as bytes: <s> and the prompt's ids in, the ids after them detokenized."""
    files = RunFiles(run_dir)
    tokenizer = load_run_tokenizer(files, json.loads(files.config.read_text()), "text")
    prompt_ids = np.concatenate(
        [[START_ID], token_ids(tokenizer, tf.constant([prompt]), 64).numpy()[0]]
    )[None].astype("int32")
    ids = decoding.greedy_search(keras.saving.load_model(files.model), prompt_ids, new_tokens)
    return tokenizer.detokenize(np.asarray(ids)[:, prompt_ids.shape[1] :]).numpy()[0]
