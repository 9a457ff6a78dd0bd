"""Runs for the explorer's tests, laid out as the recipes write them but
made in seconds: an untrained tiny model of each family, a character
vocabulary, and the config fields the explorer reads."""

import dataclasses
import json
import os
import shutil

import keras

from keras_attention.data.tokenizers import CharacterTokenizer
from keras_attention.models import (
    build_seq2seq_attention,
    build_transformer,
    build_transformer_classifier,
    build_transformer_lm,
)
from keras_attention.recipes.classify import ClassifyConfig
from keras_attention.recipes.language_model import LanguageModelConfig
from keras_attention.recipes.translate import TranslateConfig
from keras_attention.run_files import RunFiles

ALPHABET = "abcdefghijklmnopqrstuvwxyz 0123456789-"
LABELS = ["en", "fr", "de"]


def make_run(folder, kind, max_length=24, beam_size=3):
    """A run of `kind` ("transformer", "seq2seq_attention", "classifier",
    "language_model") in `folder`; returns the folder."""
    keras.utils.set_random_seed(7)
    files = RunFiles(folder)
    files.folder.mkdir(parents=True, exist_ok=True)
    tokenizer = CharacterTokenizer(ALPHABET)
    size = len(tokenizer.vocabulary)
    common = dict(tokenizer="character", max_input_length=max_length, output_dir=str(folder))
    if kind in ("transformer", "seq2seq_attention"):
        build = build_transformer if kind == "transformer" else build_seq2seq_attention
        model = build(size, size)
        config = TranslateConfig(model=kind, beam_size=beam_size, **common)
        sides = ("source", "target")
    elif kind == "classifier":
        model = build_transformer_classifier(size, len(LABELS))
        config = ClassifyConfig(**common)
        files.labels.write_text(json.dumps(LABELS))
        sides = ("text",)
    else:
        model = build_transformer_lm(size, max_position_embeddings=max_length)
        config = LanguageModelConfig(**common)
        sides = ("text",)
    for side in sides:
        tokenizer.save(files.vocabulary(side, "character"))
    model.save(files.model)
    files.config.write_text(json.dumps(dataclasses.asdict(config)))
    return files.folder


CHROMIUM = "KERAS_ATTENTION_CHROMIUM"  # a Chromium or Chrome binary, if not Debian's


def launch_chromium(playwright, purpose):
    """Chromium, headless, from `playwright` (Playwright's sync API): the
    binary `KERAS_ATTENTION_CHROMIUM` names, or Debian's `chromium`. What
    runs the explorer's browser tests, and draws its pictures in docs/
    (docs/make_figures.py).
    Raises RuntimeError, saying what to install, when there is none;
    `purpose` says what needs it ("The explorer's browser tests")."""
    path = os.environ.get(CHROMIUM) or shutil.which("chromium")
    if not path:
        raise RuntimeError(
            f"{purpose} need Chromium: apt-get install chromium, "
            f"or set {CHROMIUM} to a Chromium or Chrome binary"
        )
    return playwright.chromium.launch(executable_path=path, args=["--no-sandbox", "--disable-gpu"])
