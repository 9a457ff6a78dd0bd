"""Llama and Mistral converted, held against Hugging Face's own outputs on
the committed tiny checkpoints (fixtures/make_fixtures.py)."""

from functools import partial

import numpy as np
import pytest
import tensorflow as tf
from convert_helpers import (
    as_pieces,
    check_beam_answer,
    check_logits,
    checkpoint_pieces,
    log_probability,
    reference,
)

from keras_attention import decoding
from keras_attention.data.tokenizers import START_ID

NAMES = ["llama", "mistral"]


def special_in_text(text):
    return "<s>" in text or "</s>" in text


def prompts(tokenizer, texts):
    """Our prompt ids `[B, P]`: the start id (Llama's BOS) and the text's,
    right-padded with 0, as the export makes them."""
    ids = tokenizer.tokenize(tf.constant(texts))
    start = tf.fill([ids.nrows(), 1], START_ID)
    return np.asarray(tf.concat([start, ids], axis=1).to_tensor())


@pytest.mark.parametrize("name", NAMES)
def test_tokenization_equals_hugging_faces(converted, name):
    expected, _ = reference(name)
    tokenizer = converted(name).tokenizers["text"]
    pieces = checkpoint_pieces(name)
    rows = prompts(tokenizer, expected["texts"])
    for text, row, ids in zip(expected["texts"], rows, expected["input_ids"], strict=True):
        if special_in_text(text):
            # Hugging Face reads "<s>" typed in a text as the BOS token; we
            # tokenise it as text, as SentencePiece does (docs/pretrained.md).
            assert as_pieces(tokenizer, row) != [pieces[i] for i in ids]
            continue
        assert as_pieces(tokenizer, row) == [pieces[i] for i in ids]
    kept = [i for i, text in enumerate(expected["texts"]) if not special_in_text(text)]
    texts = tf.constant([expected["texts"][i] for i in kept])
    round_trip = tokenizer.detokenize(tokenizer.tokenize(texts).to_tensor()).numpy()
    assert [t.decode("utf-8") for t in round_trip] == [expected["round_trip"][i] for i in kept]


@pytest.mark.parametrize("name", NAMES)
def test_logits_equal_hugging_faces(converted, name):
    run = converted(name)
    tokenizer = run.tokenizers["text"]
    ours_of = {piece: i for i, piece in enumerate(tokenizer.vocabulary)}
    order = [ours_of[piece] for piece in checkpoint_pieces(name)]
    check_logits(run.model, name, order, partial(prompts, tokenizer))


@pytest.mark.parametrize("name", NAMES)
def test_greedy_equals_generate(converted, name):
    expected, _ = reference(name)
    run = converted(name)
    tokenizer, pieces = run.tokenizers["text"], checkpoint_pieces(name)
    ids = prompts(tokenizer, expected["texts"])
    outputs = decoding.greedy_search(run.model, ids, expected["greedy_kwargs"]["max_new_tokens"])
    for text, row, reference_row in zip(
        expected["texts"], np.asarray(outputs), expected["greedy"], strict=True
    ):
        if special_in_text(text):
            continue  # (see test_tokenization_equals_hugging_faces)
        theirs = [pieces[i] for i in reference_row["ids"]]
        assert as_pieces(tokenizer, row) == strip_end(theirs)
    assert len({tuple(r["ids"]) for r in expected["greedy"]}) > 5  # the outputs differ


@pytest.mark.parametrize("name", NAMES)
def test_beam_search_equals_generate_or_finds_better(converted, name):
    expected, _ = reference(name)
    run = converted(name)
    tokenizer, pieces = run.tokenizers["text"], checkpoint_pieces(name)
    ours_of = {piece: i for i, piece in enumerate(tokenizer.vocabulary)}
    ids = prompts(tokenizer, expected["texts"])
    outputs, scores = decoding.beam_search(
        run.model, ids, expected["beam_kwargs"]["max_new_tokens"], beam_size=4, length_penalty=0.0
    )
    equal = 0
    for index, (text, reference_row) in enumerate(
        zip(expected["texts"], expected["beam"], strict=True)
    ):
        if special_in_text(text):
            continue
        theirs = [ours_of[pieces[i]] for i in reference_row["ids"]]
        prompt_length = len(expected["input_ids"][index])
        logits = np.asarray(run.model(np.array([theirs[:-1]], "int32")))[0]
        score_of_theirs = log_probability(logits[prompt_length - 1 :], theirs[prompt_length:])
        equal += check_beam_answer(
            as_pieces(tokenizer, np.asarray(outputs)[index]),
            float(scores[index]),
            strip_end([pieces[i] for i in reference_row["ids"]]),
            reference_row["sequences_score"],
            score_of_theirs,
        )
    assert equal >= len(expected["texts"]) * 2 // 3


def strip_end(tokens):
    return tokens[:-1] if tokens and tokens[-1] == "</s>" else tokens
