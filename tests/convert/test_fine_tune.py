"""`--init-from RUN` fine-tunes a converted checkpoint with the recipes:
its tokenisers are kept, flags that would make others are refused."""

import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from convert_helpers import FIXTURES

from keras_attention.convert import convert
from keras_attention.data.tokenizers import END_ID, START_ID, load_run_tokenizer
from keras_attention.recipes.config import InitFromError, parse_config
from keras_attention.recipes.translate import PRESETS, TranslateConfig, TranslateRecipe
from keras_attention.run_files import RunFiles

WORDS = "the a small big red old new house book child cat dog river town saw bought read".split()


def pairs(count, seed):
    """English phrases and the same in upper case: a task one epoch improves."""
    random = np.random.default_rng(seed)
    sources = [" ".join(random.choice(WORDS, random.integers(2, 6))) for _ in range(count)]
    return [(s, s.upper()) for s in sources]


def write_pairs(path, rows):
    path.write_text("".join(f"{s}\t{t}\n" for s, t in rows), encoding="utf-8")
    return path


def validation_loss(run, rows):
    """Mean cross-entropy per target token of `rows`, teacher-forced."""
    import json

    import keras_attention.models  # noqa: F401

    files = RunFiles(run)
    config = json.loads(files.config.read_text())
    source, target = (load_run_tokenizer(files, config, side) for side in ("source", "target"))
    model = keras.saving.load_model(files.model)
    total, count = 0.0, 0
    for text, translation in rows:
        source_ids = source.tokenize(tf.constant([text])).to_tensor()
        output = target.tokenize(tf.constant([translation]))[0].numpy().tolist()
        inputs = np.array([[START_ID, *output]], "int32")
        labels = [*output, END_ID]
        logits = np.asarray(model({"source_ids": np.asarray(source_ids), "target_ids": inputs}))
        log_probs = (
            logits[0]
            - np.log(np.exp(logits[0] - logits[0].max(-1, keepdims=True)).sum(-1, keepdims=True))
            - logits[0].max(-1, keepdims=True)
        )
        total -= sum(log_probs[i, label] for i, label in enumerate(labels))
        count += len(labels)
    return total / count


def recipe(*flags, timeout=900):
    return subprocess.run(
        [sys.executable, "-m", "keras_attention.recipes.translate", *map(str, flags)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.large
def test_one_epoch_of_fine_tuning_lowers_the_validation_loss(tmp_path):
    converted = convert(FIXTURES / "marian", tmp_path / "converted", export=False)
    train = write_pairs(tmp_path / "train.tsv", pairs(400, 0))
    validation_rows = pairs(30, 1)
    validation = write_pairs(tmp_path / "validation.tsv", validation_rows)
    test = write_pairs(tmp_path / "test.tsv", pairs(10, 2))
    result = recipe(
        "--init-from",
        converted,
        "--train-file",
        train,
        "--validation-file",
        validation,
        "--test-file",
        test,
        "--epochs",
        1,
        "--batch-size",
        16,
        "--learning-rate",
        1e-3,
        "--output-dir",
        tmp_path / "tuned",
        "--no-export",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Fine-tuning" in result.stdout
    tuned = tmp_path / "tuned"
    # The converted tokenisers, kept: the same files, byte for byte.
    for name in ("source_vocabulary.json", "source_vocabulary.model", "target_vocabulary.json"):
        assert (tuned / name).read_bytes() == (converted / name).read_bytes()
    before, after = (
        validation_loss(converted, validation_rows),
        validation_loss(tuned, validation_rows),
    )
    assert after < 0.9 * before, (before, after)


@pytest.mark.parametrize(
    "flag", [["--tokenizer", "subword"], ["--model-preset", "base"], ["--preset", "wmt14_base"]]
)
def test_flags_that_contradict_the_run_are_refused(tmp_path, flag):
    converted = convert(FIXTURES / "marian", tmp_path / "converted", export=False)
    config = parse_config(TranslateConfig, PRESETS, ["--init-from", str(converted), *flag])
    with pytest.raises(InitFromError, match="contradicts --init-from"):
        TranslateRecipe(config).initial_run(("source", "target"))


def test_a_folder_that_is_not_a_run_is_refused(tmp_path):
    config = parse_config(TranslateConfig, PRESETS, ["--init-from", str(tmp_path)])
    with pytest.raises(InitFromError, match="is not a finished run"):
        TranslateRecipe(config).initial_run(("source", "target"))
