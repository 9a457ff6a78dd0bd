import numpy as np
import pytest
from helpers import to_numpy
from model_helpers import check_builds_trains_and_saves

from keras_attention.models import build_seq2seq_attention

SOURCE = np.array([[5, 6, 7, 0], [8, 9, 10, 11]], "int32")
TARGET = np.array([[1, 5, 6, 0, 0], [1, 2, 3, 4, 5]], "int32")
VARIANTS = [
    {},
    {"cell": "lstm", "attention": "luong", "input_feeding": True},
    {"bidirectional": False, "attention": "luong", "luong_score": "concat"},
]


@pytest.mark.parametrize("overrides", VARIANTS)
def test_tiny_builds_trains_and_saves(overrides, tmp_path):
    model = build_seq2seq_attention(20, **overrides)
    check_builds_trains_and_saves(
        model, {"source_ids": SOURCE, "target_ids": TARGET}, TARGET, (2, 5, 20), tmp_path
    )


@pytest.mark.parametrize("overrides", VARIANTS)
def test_step_by_step_equals_the_whole_sequence(overrides):
    """The decoder's one-step path (used for decoding) and its scan over the
    whole target (used for training) compute the same thing."""
    model = build_seq2seq_attention(20, **overrides)
    logits = to_numpy(model({"source_ids": SOURCE, "target_ids": TARGET}))
    state = model.decoding_start(SOURCE, TARGET.shape[1])
    for index in range(TARGET.shape[1]):
        step_logits, state = model.decoding_step(TARGET, index, state)
        np.testing.assert_allclose(to_numpy(step_logits), logits[:, index], atol=1e-5)


def test_source_padding_does_not_change_the_logits():
    model = build_seq2seq_attention(20)
    short = {"source_ids": SOURCE[:1, :3], "target_ids": TARGET[:1]}
    long = {"source_ids": np.pad(SOURCE[:1, :3], [[0, 0], [0, 4]]), "target_ids": TARGET[:1]}
    np.testing.assert_allclose(to_numpy(model(short)), to_numpy(model(long)), atol=1e-5)


def test_attention_weights():
    model = build_seq2seq_attention(20)
    weights = model.attention_scores({"source_ids": SOURCE, "target_ids": TARGET})
    weights = to_numpy(weights["decoder_cross_attention"][0])
    assert weights.shape == (2, 1, 5, 4)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    assert np.all(weights[0, :, :, 3] == 0)


def test_bad_arguments():
    with pytest.raises(ValueError, match="cell='rnn'"):
        build_seq2seq_attention(20, cell="rnn")
    with pytest.raises(ValueError, match="attention='cosine'"):
        build_seq2seq_attention(20, attention="cosine")
    with pytest.raises(ValueError, match="preset='big'"):
        build_seq2seq_attention(20, preset="big")
