"""A converted run is a run like any other: its TF Serving export, reloaded
in a fresh process, answers with Hugging Face's text; its CTranslate2
export translates the same; the explorer opens it."""

import subprocess
import sys

import ctranslate2
import numpy as np
import pytest
from convert_helpers import FIXTURES, reference
from export_helpers import ask_a_fresh_process

from keras_attention.convert import convert
from keras_attention.explore import Explorer
from keras_attention.run_files import RunFiles


@pytest.fixture(scope="module")
def marian_run(tmp_path_factory):
    """The tiny Marian checkpoint converted and exported, once."""
    return convert(FIXTURES / "marian", tmp_path_factory.mktemp("converted") / "marian")


def test_the_export_answers_with_hugging_faces_text(marian_run, tmp_path):
    expected, _ = reference("marian")
    texts = expected["texts"]
    config = RunFiles(marian_run).config.read_text()
    assert '"tokenizer": "mapped_subword"' in config
    export = marian_run / "serving" / "marian" / "1"
    request = {
        "text": np.array([t.encode() for t in texts], dtype=object),
        "beam_size": np.ones(len(texts), "int32"),
        "max_length": np.full(len(texts), 10**6, "int32"),  # clamped to the run's
    }
    answers = ask_a_fresh_process({export: [("translate_with_options", request)]}, tmp_path)
    ours = [t.decode("utf-8") for t in answers[export]["answers"][0]["translation"]]
    assert ours == [row["text"] for row in expected["greedy"]]


def test_the_ctranslate2_export_translates_the_same(marian_run, tmp_path):
    expected, _ = reference("marian")
    folder = tmp_path / "ct2"
    subprocess.run(
        [sys.executable, "-m", "keras_attention.export", str(marian_run)]
        + ["--format", "ctranslate2", "--output-dir", str(folder)],
        check=True,
        timeout=600,
    )
    translator = ctranslate2.Translator(str(folder), intra_threads=1)
    results = translator.translate_batch(
        expected["tokens"],  # Hugging Face's source pieces, </s> included
        beam_size=1,
        max_decoding_length=expected["greedy_kwargs"]["max_length"] - 2,
        min_decoding_length=0,
    )
    for result, row in zip(results, expected["greedy"], strict=True):
        assert result.hypotheses[0] == [t for t in row["tokens"][1:] if t != "</s>"]


def test_the_explorer_opens_a_converted_run(marian_run):
    expected, _ = reference("marian")
    explorer = Explorer(marian_run)
    answer = explorer.answer(expected["texts"][3], beam_size=1)
    assert answer["translation"] == expected["greedy"][3]["text"]
    assert answer["source_tokens"][-1] == "</s>"
