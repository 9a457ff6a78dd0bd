"""A converted run is a run like any other: its TF Serving export, reloaded
in a fresh process, answers with Hugging Face's text; its CTranslate2
export translates the same; the explorer opens it. (Large tests: each
converts and exports.)"""

import json
import subprocess
import sys

import ctranslate2
import numpy as np
import pytest
from convert_helpers import FIXTURES, checkpoint_pieces, reference
from export_helpers import ask_a_fresh_process

from keras_attention.convert import convert
from keras_attention.data.tokenizers import load_run_tokenizer
from keras_attention.explore import Explorer
from keras_attention.export import export_model
from keras_attention.run_files import RunFiles

pytestmark = pytest.mark.large


@pytest.fixture(scope="module")
def marian_run(tmp_path_factory):
    """The tiny Marian checkpoint converted and exported by the command, once."""
    run = tmp_path_factory.mktemp("converted") / "marian"
    command = [sys.executable, "-m", "keras_attention.convert", str(FIXTURES / "marian")]
    result = subprocess.run(
        [*command, "--output-dir", str(run)], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"converted {FIXTURES / 'marian'} to {run}" in result.stdout
    return run


def test_the_export_answers_with_hugging_faces_text(marian_run, tmp_path):
    expected, _ = reference("marian")
    texts = expected["texts"]
    config = RunFiles(marian_run).config.read_text()
    assert '"tokenizer": "mapped_subword"' in config
    export = marian_run / "serving" / "marian" / "1"
    # The export's defaults are generation_config.json's: 4 beams, and
    # max_length 32 counting the start token and the forced end token.
    metadata = json.loads((export / "assets.extra" / "keras_attention.json").read_text())
    assert (metadata["beam_size"], metadata["max_decoding_length"]) == (4, 30)
    request = {
        "text": np.array([t.encode() for t in texts], dtype=object),
        "beam_size": np.ones(len(texts), "int32"),
        "max_decoding_length": np.zeros(len(texts), "int32"),  # 0: the run's own
    }
    answers = ask_a_fresh_process({export: [("translate_with_options", request)]}, tmp_path)
    ours = [t.decode("utf-8") for t in answers[export]["answers"][0]["translation"]]
    assert ours == [row["text"] for row in expected["greedy"]]


def test_the_ctranslate2_export_translates_the_same(marian_run, tmp_path):
    expected, _ = reference("marian")
    folder = tmp_path / "ct2"
    subprocess.run(
        [sys.executable, "-m", "keras_attention.export", str(marian_run)]
        + ["--format", "ctranslate2", "--export-dir", str(folder)],
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


def generate_completions(name, tokenizer, cut=0, longest=None):
    """The fixture's prompts (of at most `longest` tokens), and Hugging
    Face's greedy completions of them (`cut` tokens fewer for odd rows) as
    our tokenizer detokenizes them (bytes), and its number of new tokens.
    Not the prompt with "<s>" typed in it, which Hugging Face reads as BOS."""
    expected, _ = reference(name)
    ours_of = {piece: i for i, piece in enumerate(tokenizer.vocabulary)}
    pieces = checkpoint_pieces(name)
    new_tokens = expected["greedy_kwargs"]["max_new_tokens"]
    kept = [
        i
        for i, text in enumerate(expected["texts"])
        if "<s>" not in text and (longest is None or len(expected["input_ids"][i]) - 1 <= longest)
    ]
    texts, completions = [expected["texts"][i] for i in kept], []
    for row_number, i in enumerate(kept):
        text_ids, row = expected["input_ids"][i], expected["greedy"][i]
        generated = [ours_of[pieces[j]] for j in row["ids"][len(text_ids) :]]
        generated = generated[: new_tokens - cut * (row_number % 2)]
        completions.append(tokenizer.detokenize(np.array([generated or [0]])).numpy()[0])
    assert len(set(completions)) > 5
    return texts, completions, new_tokens


def greedy_completions(run, name, texts, new_tokens, folder):
    """The run's export, reloaded in a fresh process: its greedy completions
    of `texts`, `new_tokens` long at most (`complete_with_options`)."""
    export = run / "serving" / name / "1"
    request = {
        "prompt": np.array([t.encode() for t in texts], dtype=object),
        "beam_size": np.ones(len(texts), "int32"),
        "max_decoding_length": np.full(len(texts), new_tokens, "int32"),
    }
    answers = ask_a_fresh_process({export: [("complete_with_options", request)]}, folder)
    return list(answers[export]["answers"][0]["completion"])


@pytest.mark.parametrize("name", ["llama", "mistral"])
def test_a_language_models_export_completes_as_generate_does(name, tmp_path):
    run = convert(FIXTURES / name, tmp_path / name)
    tokenizer = load_run_tokenizer(RunFiles(run), {"tokenizer": "mapped_subword"}, "text")
    texts, completions, new_tokens = generate_completions(name, tokenizer)
    assert greedy_completions(run, name, texts, new_tokens, tmp_path) == completions


def test_a_language_models_xla_export_completes_as_generate_does(converted, tmp_path):
    """`jit_compile=True`: greedy with the export's length runs under XLA
    (prompts padded to a few lengths), in `serving_default` and in the
    options signature's rows that ask for it; other rows as a graph. (The
    export's `max_input_length`, Hugging Face's 24 new tokens, truncates
    prompts: the prompts here are no longer.)"""
    llama = converted("llama")
    tokenizer = llama.tokenizers["text"]
    texts, completions, new_tokens = generate_completions("llama", tokenizer, longest=24)
    export = export_model(
        llama.model, tmp_path, "xla", tokenizer, max_input_length=new_tokens, jit_compile=True
    )
    prompts = np.array([t.encode() for t in texts], dtype=object)
    count = len(texts)
    # Odd rows ask for one token fewer: the graph's search, not XLA's.
    lengths = np.array([new_tokens - (i % 2) for i in range(count)], "int32")
    options = {
        "prompt": prompts,
        "beam_size": np.ones(count, "int32"),
        "max_decoding_length": lengths,
    }
    spec = {
        str(export): [("serving_default", {"prompt": prompts}), ("complete_with_options", options)]
    }
    plain, mixed = ask_a_fresh_process(spec, tmp_path)[str(export)]["answers"]
    assert list(plain["completion"]) == completions
    _, shorter, _ = generate_completions("llama", tokenizer, cut=1, longest=new_tokens)
    assert list(mixed["completion"]) == shorter


@pytest.mark.parametrize("name", ["gpt2", "qwen2", "llama3"])
def test_a_byte_level_bpe_models_export_completes_as_generate_does(name, tmp_path):
    """GPT-2, Qwen2 and Llama 3: the export (its byte-level BPE in the
    graph), reloaded in a fresh process, completes each prompt with the
    text of Hugging Face's greedy completion, `decode(skip_special_tokens=True)`."""
    expected, _ = reference(name)
    run = convert(FIXTURES / name, tmp_path / name)
    assert json.loads(RunFiles(run).config.read_text())["tokenizer"] == "byte_level_bpe"
    texts = expected["texts"]
    new_tokens = expected["greedy_kwargs"]["max_new_tokens"]
    completions = [row["completion"].encode() for row in expected["greedy"]]
    assert greedy_completions(run, name, texts, new_tokens, tmp_path) == completions
    assert len(set(completions)) > 5
