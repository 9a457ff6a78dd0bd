"""Llama and Mistral converted, held against Hugging Face's own outputs on
the committed tiny checkpoints (fixtures/make_fixtures.py)."""

import numpy as np
import pytest
import sentencepiece
import tensorflow as tf
from convert_helpers import FIXTURES, as_pieces, reference

from keras_attention import decoding
from keras_attention.data.tokenizers import START_ID

NAMES = ["llama", "mistral"]


def checkpoint_pieces(name):
    """The checkpoint's pieces in its id order (tokenizer.model's)."""
    model = sentencepiece.SentencePieceProcessor(
        model_file=str(FIXTURES / name / "tokenizer.model")
    )
    return [model.id_to_piece(i) for i in range(model.get_piece_size())]


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
    for row, ids in zip(prompts(tokenizer, expected["texts"]), expected["input_ids"], strict=True):
        assert as_pieces(tokenizer, row) == [pieces[i] for i in ids]
    round_trip = tokenizer.detokenize(
        tokenizer.tokenize(tf.constant(expected["texts"])).to_tensor()
    )
    assert [t.decode("utf-8") for t in round_trip.numpy()] == expected["round_trip"]


@pytest.mark.parametrize("name", NAMES)
def test_logits_equal_hugging_faces(converted, name):
    expected, arrays = reference(name)
    run = converted(name)
    tokenizer = run.tokenizers["text"]
    ours_of = {piece: i for i, piece in enumerate(tokenizer.vocabulary)}
    order = [ours_of[piece] for piece in checkpoint_pieces(name)]
    for case in expected["logits"]:
        ids = prompts(tokenizer, [expected["texts"][case["text_index"]]])
        logits = np.asarray(run.model(ids))[0]
        np.testing.assert_allclose(logits[:, order], arrays[case["logits"]], atol=1e-4)
    assert len(expected["logits"]) >= 2


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_decoding_equals_generate(converted, name, search):
    expected, _ = reference(name)
    run = converted(name)
    tokenizer, pieces = run.tokenizers["text"], checkpoint_pieces(name)
    ids = prompts(tokenizer, expected["texts"])
    new_tokens = expected[f"{search}_kwargs"]["max_new_tokens"]
    if search == "greedy":
        outputs = decoding.greedy_search(run.model, ids, new_tokens)
    else:
        outputs, _ = decoding.beam_search(
            run.model, ids, new_tokens, beam_size=4, length_penalty=0.0
        )
    for row, reference_row in zip(np.asarray(outputs), expected[search], strict=True):
        theirs = [pieces[i] for i in reference_row["ids"]]
        if theirs[-1] == "</s>":
            theirs = theirs[:-1]
        assert as_pieces(tokenizer, row) == theirs
    assert len({tuple(r["ids"]) for r in expected[search]}) > 5  # the outputs differ
