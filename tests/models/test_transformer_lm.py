import numpy as np
import pytest
from helpers import to_numpy
from model_helpers import check_builds_trains_and_saves

from keras_attention.models import build_transformer_lm

TOKENS = np.array([[1, 5, 6, 7, 0], [1, 8, 9, 10, 11]], "int32")


@pytest.mark.parametrize(
    "overrides", [{}, {"positions": "learned", "max_length": 16, "tie_output_embeddings": False}]
)
def test_tiny_builds_trains_and_saves(overrides, tmp_path):
    model = build_transformer_lm(20, **overrides)
    check_builds_trains_and_saves(model, TOKENS, TOKENS, (2, 5, 20), tmp_path)


def test_no_position_sees_the_future():
    model = build_transformer_lm(20)
    logits = to_numpy(model(TOKENS))
    changed = TOKENS.copy()
    changed[:, 3:] = 4
    np.testing.assert_allclose(to_numpy(model(changed))[:, :3], logits[:, :3], atol=1e-5)


def test_attention_weights():
    scores = build_transformer_lm(20).attention_scores(TOKENS)["self_attention"]
    weights = to_numpy(scores[1])
    assert weights.shape == (2, 4, 5, 5)
    assert np.all(np.triu(weights[0, 0], k=1) == 0)


def test_bad_arguments():
    with pytest.raises(ValueError, match="positions='absolute'"):
        build_transformer_lm(20, positions="absolute")
    with pytest.raises(ValueError, match="max_length=None"):
        build_transformer_lm(20, positions="learned")
