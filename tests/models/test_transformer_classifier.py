import numpy as np
import pytest
from helpers import to_numpy
from model_helpers import check_builds_trains_and_saves

from keras_attention.models import build_transformer_classifier

TOKENS = np.array([[5, 6, 7, 0], [8, 9, 10, 11]], "int32")
LABELS = np.array([0, 2])


@pytest.mark.parametrize("pooling", ["mean", "first"])
def test_tiny_builds_trains_and_saves(pooling, tmp_path):
    model = build_transformer_classifier(20, num_classes=3, pooling=pooling)
    check_builds_trains_and_saves(model, TOKENS, LABELS, (2, 3), tmp_path)


def test_padding_does_not_change_the_prediction():
    model = build_transformer_classifier(20, num_classes=3)
    short, long = TOKENS[:1, :3], np.pad(TOKENS[:1, :3], [[0, 0], [0, 5]])
    np.testing.assert_allclose(to_numpy(model(short)), to_numpy(model(long)), atol=1e-5)


def test_attention_weights():
    model = build_transformer_classifier(20, num_classes=3)
    scores = model.attention_scores(TOKENS)["self_attention"]
    assert len(scores) == 2 and to_numpy(scores[0]).shape == (2, 4, 4, 4)


def test_bad_arguments():
    with pytest.raises(ValueError, match="pooling='max'"):
        build_transformer_classifier(20, 3, pooling="max")
    with pytest.raises(ValueError, match="num_classes=0"):
        build_transformer_classifier(20, 0)
