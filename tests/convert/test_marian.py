"""OPUS-MT (Marian) converted, held against Hugging Face's own outputs on
the committed tiny checkpoints (fixtures/make_fixtures.py)."""

import json

import numpy as np
import pytest
import tensorflow as tf
from convert_helpers import (
    FIXTURES,
    as_pieces,
    check_beam_answer,
    log_probability,
    reference,
    source_ids,
)

from keras_attention import decoding
from keras_attention.data.tokenizers import END_ID, START_ID

NAMES = ["marian", "marian_separate"]


@pytest.mark.parametrize("name", NAMES)
def test_tokenization_equals_marian_tokenizer(converted, name):
    expected, _ = reference(name)
    tokenizer = converted(name).tokenizers["source"]
    ids = tokenizer.tokenize(tf.constant(expected["texts"])).to_list()
    ours = [[tokenizer.vocabulary[i] for i in row] for row in ids]
    assert ours == expected["tokens"]


@pytest.mark.parametrize("name", NAMES)
def test_logits_equal_hugging_faces(converted, name):
    expected, arrays = reference(name)
    model = converted(name).model
    source, target = converted(name).tokenizers["source"], converted(name).tokenizers["target"]
    target_ids = {piece: i for i, piece in enumerate(target.vocabulary)}
    checked = 0
    for case in expected["logits"]:
        text = expected["texts"][case["text_index"]]
        tokens = expected["greedy"][case["text_index"]]["tokens"]
        # The decoder input: our start id, then the checkpoint's tokens.
        decoder_input = [START_ID] + [
            target_ids[t] for t in tokens[1 : len(case["decoder_input_ids"])]
        ]
        inputs = {
            "source_ids": np.asarray(source_ids(source, [text])),
            "target_ids": np.array([decoder_input], "int32"),
        }
        logits = model(inputs)
        ours = np.asarray(logits)[0]
        theirs = arrays[case["logits"]]
        # Our rows in the checkpoint's order: each piece's logit.
        order = [target_ids.get(t) for t in target_pieces(name)]
        known = [i for i, o in enumerate(order) if o is not None and o > 1]
        np.testing.assert_allclose(ours[:, [order[i] for i in known]], theirs[:, known], atol=1e-4)
        checked += 1
    assert checked >= 2


@pytest.mark.parametrize("name", NAMES)
def test_greedy_and_beam_equal_generate(converted, name):
    expected, _ = reference(name)
    run = converted(name)
    source, target = run.tokenizers["source"], run.tokenizers["target"]
    ids = source_ids(source, expected["texts"])
    max_length = run.config["max_decoding_length"]
    greedy = decoding.greedy_search(run.model, ids, max_length)
    beams, scores = decoding.beam_search(
        run.model, ids, max_length, beam_size=4, length_penalty=0.0
    )
    pieces = target_pieces(name)
    target_ids = {piece: i for i, piece in enumerate(target.vocabulary)}
    equal = 0
    for index, (greedy_ref, beam_ref) in enumerate(
        zip(expected["greedy"], expected["beam"], strict=True)
    ):
        assert as_pieces(target, greedy[index]) == strip([pieces[i] for i in greedy_ref["ids"]])
        theirs = strip([pieces[i] for i in beam_ref["ids"]])
        # Hugging Face's answer scored by our model (its forced end token
        # at the limit scores 0, so it is left out there).
        labels = [target_ids[t] for t in theirs]
        if len(theirs) < max_length:
            labels.append(END_ID)
        inputs = {
            "source_ids": np.asarray(ids[index : index + 1]),
            "target_ids": np.array([[START_ID, *labels[:-1]]], "int32"),
        }
        logits = np.asarray(run.model(inputs))[0]
        equal += check_beam_answer(
            as_pieces(target, beams[index]),
            float(scores[index]),
            theirs,
            beam_ref["sequences_score"],
            log_probability(logits, labels),
        )
    assert equal >= len(expected["beam"]) * 2 // 3
    assert len({tuple(r["ids"]) for r in expected["greedy"]}) > 5  # the outputs differ


def target_pieces(name):
    """The checkpoint's target pieces in its id order."""
    folder = FIXTURES / name
    file = folder / "target_vocab.json"
    vocabulary = json.loads((file if file.is_file() else folder / "vocab.json").read_text("utf-8"))
    return sorted(vocabulary, key=vocabulary.get)


def strip(tokens):
    """Hugging Face's output tokens without the start and the end token."""
    tokens = tokens[1:]
    return tokens[:-1] if tokens and tokens[-1] == "</s>" else tokens
