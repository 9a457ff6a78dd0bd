"""`--init-from RUN` keeps a converted run's model and tokenisers: flags
that would make others are refused; one epoch of fine-tuning a converted
language model of each family lowers its validation loss. (Fine-tuning
under every strategy and backend: test_fine_tune_everywhere.py.)"""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf
from convert_helpers import FIXTURES, pairs
from kill_helpers import finish, run

from keras_attention.convert import convert
from keras_attention.data.pipeline import language_model_batches
from keras_attention.data.tokenizers import load_run_tokenizer
from keras_attention.recipes.config import InitFromError, parse_config
from keras_attention.recipes.init_from import initial_run
from keras_attention.recipes.translate import PRESETS, TranslateConfig
from keras_attention.run_files import RunFiles


@pytest.mark.parametrize(
    "flag", [["--tokenizer", "subword"], ["--model-preset", "base"], ["--preset", "wmt14_base"]]
)
def test_flags_that_contradict_the_run_are_refused(tmp_path, flag):
    converted = convert(FIXTURES / "marian", tmp_path / "converted", export=False)
    config = parse_config(TranslateConfig, PRESETS, ["--init-from", str(converted), *flag])
    with pytest.raises(InitFromError, match="contradicts --init-from"):
        initial_run(config, ("source", "target"))


def test_a_folder_that_is_not_a_run_is_refused(tmp_path):
    config = parse_config(TranslateConfig, PRESETS, ["--init-from", str(tmp_path)])
    with pytest.raises(InitFromError, match="is not a finished run"):
        initial_run(config, ("source", "target"))


def language_model_loss(run_dir, texts, max_length=32):
    """Mean cross-entropy per real label token of `texts` under a run's
    model, batched as the language-model recipe batches them."""
    import keras_attention.models  # noqa: F401

    files = RunFiles(run_dir)
    config = json.loads(files.config.read_text())
    tokenizer = load_run_tokenizer(files, config, "text")
    model = keras.saving.load_model(files.model)
    batches = language_model_batches(
        tf.data.Dataset.from_tensor_slices(texts), tokenizer, max_length=max_length, batch_size=8
    )
    total, count = 0.0, 0
    for ids, labels in batches:
        logits = np.asarray(model(ids), np.float64)  # [B, T, V]
        largest = logits.max(-1, keepdims=True)
        log_probs = logits - largest - np.log(np.exp(logits - largest).sum(-1, keepdims=True))
        chosen = np.take_along_axis(log_probs, labels.numpy()[..., None], axis=-1)[..., 0]
        real = labels.numpy() != 0
        total -= chosen[real].sum()
        count += real.sum()
    return total / count


@pytest.mark.large
@pytest.mark.parametrize("name", ["llama", "mistral", "gpt2", "qwen2", "llama3"])
def test_one_epoch_of_fine_tuning_lowers_a_language_models_validation_loss(name, tmp_path):
    """SentencePiece (Llama, Mistral) and byte-level BPE (GPT-2, Qwen2,
    Llama 3) runs: the recipe keeps the converted tokenizer and model, and
    one epoch on 96 texts lowers the loss on 16 others."""
    converted = convert(FIXTURES / name, tmp_path / "converted", export=False)
    files = {}
    for split, count, seed in (("train", 96, 3), ("validation", 16, 5)):
        texts = [f"{s} {t}" for s, t in pairs(count, seed)]
        files[split] = tmp_path / f"{split}.txt"
        files[split].write_text("".join(f"{text}\n" for text in texts), encoding="utf-8")
    validation = files["validation"].read_text("utf-8").splitlines()
    flags = ["--init-from", converted, "--train-file", files["train"]]
    flags += ["--validation-file", files["validation"], "--test-file", files["validation"]]
    flags += ["--epochs", "1", "--max-input-length", "32", "--batch-size", "8", "--learning-rate"]
    flags += ["1e-3", "--no-export", "--output-dir", tmp_path / "tuned"]
    code, stdout, stderr = finish(run(list(map(str, flags)), recipe="language_model"))
    assert code == 0, stderr[-3000:]
    assert f"Fine-tuning {converted / 'model.keras'}" in stdout
    vocabularies = sorted(converted.glob("text_vocabulary.*"))
    assert vocabularies
    for vocabulary in vocabularies:
        assert (tmp_path / "tuned" / vocabulary.name).read_bytes() == vocabulary.read_bytes()
    before = language_model_loss(converted, validation)
    after = language_model_loss(tmp_path / "tuned", validation)
    assert after < before - 0.1, (before, after)  # nats per token
