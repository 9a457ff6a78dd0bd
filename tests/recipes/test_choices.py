"""What a recipe chooses when a flag is left unset: batches and epochs
for the corpus's size, and the line that says why it trains in float32
(`benchmarks/bfloat16.py` measured why)."""

import contextlib
import io
import types

import pytest

from keras_attention.recipes import translate
from keras_attention.recipes.choices import (
    batch_tokens_for,
    bfloat16_flags,
    epochs_for,
    precision_note,
)
from keras_attention.recipes.translate import TranslateConfig, TranslateRecipe

# As many words as an epoch of the English-French corpus of
# examples/build_catalog_corpus.py (860,000, both sides).
EN_FR_SIZED = ["one two three four five six seven eight nine ten"] * 86_000


def test_a_large_corpus_is_batched_by_tokens_and_a_small_one_by_sentences():
    assert batch_tokens_for(10_000) == 1024 and batch_tokens_for(75_898) == 1024
    assert batch_tokens_for(9_999) == 0 and batch_tokens_for(20) == 0
    # Batches by tokens train more words a minute: more epochs fit.
    assert (epochs_for(EN_FR_SIZED), epochs_for(EN_FR_SIZED, by_tokens=True)) == (2, 4)
    assert epochs_for(["a few words"]) == 20 and epochs_for(EN_FR_SIZED * 10) == 1


def chosen(flags, **recipe_choices):
    """What a translation recipe given `flags` (TranslateConfig fields)
    chooses for EN_FR_SIZED, and what it printed."""
    recipe = TranslateRecipe(TranslateConfig(train_file="pairs.tsv", **flags))
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        config = recipe.choose_for_data(EN_FR_SIZED, **recipe_choices)
    assert recipe.config == config  # the batches are made from it (`batching`)
    return config, printed.getvalue()


def test_the_epochs_follow_the_batches_chosen_or_given():
    config, printed = chosen({}, batch_tokens=1024)
    assert (config.batch_tokens, config.epochs, config.final_decay) == (1024, 4, 0.2)
    assert TranslateRecipe(config).batching()["batch_tokens"] == 1024
    assert "--batch-tokens 1024, --final-decay 0.2, --epochs 4" in printed
    config, printed = chosen({"batch_tokens": 0}, batch_tokens=1024)  # sentences, as asked
    assert (config.batch_tokens, config.epochs) == (0, 2) and "--batch-tokens" not in printed
    config, printed = chosen({}, batch_tokens=0)
    assert (config.batch_tokens, config.epochs) == (0, 2) and "--batch-tokens" not in printed
    config, _ = chosen({"batch_tokens": 2048, "final_decay": 0.0}, batch_tokens=0)
    assert (config.batch_tokens, config.epochs, config.final_decay) == (2048, 4, 0.0)
    config, _ = chosen({"time_budget": 10.0}, batch_tokens=1024)
    assert config.epochs is None  # planned by the budget


def test_the_cpu_s_bfloat16_instructions_are_read_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("model name\t: Xeon\nflags\t\t: fpu avx512f avx512_bf16 amx_bf16 amx_tile\n")
    assert bfloat16_flags(cpuinfo) == ["amx_bf16", "avx512_bf16"]
    cpuinfo.write_text("model name\t: EPYC\nflags\t\t: fpu avx2 avx512f\n")
    assert bfloat16_flags(cpuinfo) == []
    assert bfloat16_flags(tmp_path / "missing") == []


def test_one_line_says_why_float32_is_kept():
    with_amx = precision_note("float32", ["amx_bf16", "avx512_bf16"])
    assert with_amx.startswith("precision float32: this CPU has amx_bf16, avx512_bf16, but ")
    assert "--precision mixed_bfloat16" in with_amx and "\n" not in with_amx
    without = precision_note("float32", [])
    assert "no bfloat16 instructions" in without and "\n" not in without
    assert precision_note("mixed_bfloat16", ["amx_bf16"]) is None
    assert precision_note("mixed_float16", []) is None


def test_what_was_chosen_is_still_tuned_after_training(monkeypatch):
    """The beam size chosen for the data (4) is not a given one: the
    decoding tuned after training may change it (and the length penalty)."""
    recipe = TranslateRecipe(TranslateConfig(train_file="pairs.tsv"))
    with contextlib.redirect_stdout(io.StringIO()):
        config = recipe.choose_for_data(EN_FR_SIZED, beam_size=4, batch_tokens=0)
    asked = []

    def tune_decoding(model, data, given):
        asked.append(given)
        raise StopIteration  # the rest of the evaluation is not this test's

    monkeypatch.setattr(translate, "tune_decoding", tune_decoding)
    with pytest.raises(StopIteration):
        recipe.evaluate(None, types.SimpleNamespace(config=config), None)
    ((given,),) = [asked]
    assert config.beam_size == 4 and (given.beam_size, given.length_penalty) == (None, None)
