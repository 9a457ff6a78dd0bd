"""GPT-2, Qwen2 and Llama 3 converted with their byte-level BPE tokenizers,
held against Hugging Face's own outputs on the committed tiny checkpoints
(fixtures/make_bpe_fixtures.py): its ids and round trips on 520 varied
strings, its pre-tokens on 600 strings thick with white space, its logits,
its greedy and beam answers."""

import json
import shutil
from functools import partial

import numpy as np
import pytest
import tensorflow as tf
from convert_helpers import (
    FIXTURES,
    check_beam_answer,
    check_logits,
    log_probability,
    reference,
    write_safetensors,
)

from keras_attention import decoding
from keras_attention.convert import from_huggingface
from keras_attention.convert.checkpoint import read_safetensors
from keras_attention.data.tokenizers import END_ID, START_ID, prompt_start
from keras_attention.data.tokenizers.byte_level_bpe import pre_tokenize, split_pattern

NAMES = ["gpt2", "qwen2", "llama3"]


def strings():
    """`bpe_strings.json`: the strings, and each tokenizer's ids and round trips."""
    return json.loads((FIXTURES / "bpe_strings.json").read_text("utf-8"))


def ours_of(name, tokenizer):
    """Hugging Face's id -> ours, by the token's name (the start and end
    tokens are our ids 1 and 2; an id the tokenizer has no token for is
    named `<|id N|>`)."""
    expected, _ = reference(name)
    pieces = expected["pieces"]
    index = {piece: i for i, piece in enumerate(tokenizer.vocabulary)}
    index[pieces[expected["special_ids"]["eos"]]] = END_ID
    if prompt_start(tokenizer):
        index[pieces[expected["special_ids"]["bos"]]] = START_ID
    return [
        index[pieces[i] if i < len(pieces) else f"<|id {i}|>"]
        for i in range(expected["vocab_size"])
    ]


def prompts(tokenizer, texts):
    """Our prompt ids `[B, P]`, right-padded with 0, as the export makes them:
    the start id first where the checkpoint's tokenizer puts one (Llama 3)."""
    ids = tokenizer.tokenize(tf.constant(texts))
    if prompt_start(tokenizer):
        ids = tf.concat([tf.fill([ids.nrows(), 1], START_ID), ids], axis=1)
    return np.asarray(ids.to_tensor())


def up_to_end(ids):
    """Ids before the first end id, padding left out."""
    ids = list(ids)
    ids = ids[: ids.index(END_ID)] if END_ID in ids else ids
    return [i for i in ids if i != 0]


@pytest.mark.parametrize("name", NAMES)
def test_tokenization_equals_hugging_faces_on_520_strings(converted, name):
    table = strings()
    tokenizer = converted(name).tokenizers["text"]
    ours = ours_of(name, tokenizer)
    texts = table["strings"]
    rows = prompts(tokenizer, texts)
    for text, row, theirs in zip(texts, rows, table[name]["ids"], strict=True):
        assert up_to_end(row) == [ours[i] for i in theirs], repr(text)
    round_trip = tokenizer.detokenize(tokenizer.tokenize(tf.constant(texts)).to_tensor())
    assert [t.decode("utf-8") for t in round_trip.numpy()] == table[name]["round_trip"]
    assert len(texts) >= 500


@pytest.mark.parametrize("name", NAMES)
def test_pre_tokens_equal_tokenizers_on_runs_of_white_space(name):
    """Each pre-tokenizer regex, its `\\s+(?!\\S)` lookahead matched without
    one (RE2 has none), splits 600 strings thick with runs of white space
    as `tokenizers`' `Split` does (`bpe_pre_tokens.json`)."""
    cases = json.loads((FIXTURES / "bpe_pre_tokens.json").read_text("utf-8"))
    pattern, before, lookahead = split_pattern(cases[name]["pattern"])
    ours = pre_tokenize(tf.constant(cases["strings"]), pattern, before, lookahead).to_list()
    for text, row, theirs in zip(cases["strings"], ours, cases[name]["pieces"], strict=True):
        assert [piece.decode("utf-8") for piece in row] == theirs, repr(text)
    assert lookahead and len(cases["strings"]) == 600


@pytest.mark.parametrize("name", NAMES)
def test_logits_equal_hugging_faces(converted, name):
    run = converted(name)
    tokenizer = run.tokenizers["text"]
    order = ours_of(name, tokenizer)
    check_logits(run.model, name, order, partial(prompts, tokenizer), input_ids_too=True)


@pytest.mark.parametrize("name", NAMES)
def test_greedy_equals_generate(converted, name):
    expected, _ = reference(name)
    run = converted(name)
    tokenizer = run.tokenizers["text"]
    ours = ours_of(name, tokenizer)
    ids = prompts(tokenizer, expected["texts"])
    outputs = np.asarray(
        decoding.greedy_search(run.model, ids, expected["greedy_kwargs"]["max_new_tokens"])
    )
    completions = []
    for index, (row, reference_row) in enumerate(zip(outputs, expected["greedy"], strict=True)):
        assert up_to_end(row) == up_to_end([ours[i] for i in reference_row["ids"]])
        prompt_length = len(expected["input_ids"][index])
        completions.append(np.array([row[prompt_length:]]))
    # The completions as text, Hugging Face's decode(skip_special_tokens=True).
    texts = [tokenizer.detokenize(c).numpy()[0].decode("utf-8") for c in completions]
    assert texts == [row["completion"] for row in expected["greedy"]]
    assert len(expected["texts"]) >= 20
    assert len({tuple(r["ids"]) for r in expected["greedy"]}) > 5  # the outputs differ


@pytest.mark.parametrize("name", NAMES)
def test_beam_search_equals_generate_or_finds_better(converted, name):
    expected, _ = reference(name)
    run = converted(name)
    tokenizer = run.tokenizers["text"]
    ours = ours_of(name, tokenizer)
    ids = prompts(tokenizer, expected["texts"])
    outputs, scores = decoding.beam_search(
        run.model, ids, expected["beam_kwargs"]["max_new_tokens"], beam_size=4, length_penalty=0.0
    )
    equal = 0
    for index, reference_row in enumerate(expected["beam"]):
        theirs = [ours[i] for i in reference_row["ids"]]
        answer = up_to_end(np.asarray(outputs)[index])
        score_of_theirs = None  # Hugging Face's answer scored by our model, where they differ
        if answer != up_to_end(theirs):
            prompt_length = len(expected["input_ids"][index])
            logits = np.asarray(run.model(np.array([theirs[:-1]], "int32")))[0]
            score_of_theirs = log_probability(logits[prompt_length - 1 :], theirs[prompt_length:])
        equal += check_beam_answer(
            answer,
            float(scores[index]),
            up_to_end(theirs),
            reference_row["sequences_score"],
            score_of_theirs,
        )
    assert equal >= 20


def test_gpt2_model_names_and_saved_causal_masks_convert_alike(converted, tmp_path):
    """`GPT2Model`'s names (no "transformer." prefix, as openai-community/gpt2
    saves them) and the causal-mask buffers older files hold (`attn.bias`)
    convert to the same model."""
    folder = tmp_path / "gpt2"
    shutil.copytree(FIXTURES / "gpt2", folder)
    tensors = read_safetensors(folder / "model.safetensors")
    renamed = {name.removeprefix("transformer."): value for name, value in tensors.items()}
    for index in range(2):
        renamed[f"h.{index}.attn.bias"] = np.tril(np.ones((1, 1, 128, 128), "float32"))
    write_safetensors(folder / "model.safetensors", renamed)
    ids = np.array([[5, 6, 7, 8]], "int32")
    logits = np.asarray(from_huggingface(folder).model(ids))
    np.testing.assert_array_equal(logits, np.asarray(converted("gpt2").model(ids)))


@pytest.mark.parametrize("name", ["gpt2", "qwen2"])
def test_a_batch_of_empty_texts_tokenizes_eagerly_and_in_a_graph(converted, name):
    """No text has a piece to merge: the merges run no step (a GPT-2
    export's `generate_batch` tokenizes its `suppress_sequences`, "" by
    default, so)."""
    tokenizer = converted(name).tokenizers["text"]
    in_a_graph = tf.function(tokenizer.tokenize, input_signature=[tf.TensorSpec([None], tf.string)])
    for texts in ([""], ["", ""], [], ["", "a b"]):
        for tokenize in (tokenizer.tokenize, in_a_graph):
            rows = tokenize(tf.constant(texts, tf.string)).to_list()
            assert [len(row) for row in rows] == [0 if not t else 2 for t in texts]
