import numpy as np
import pytest
from helpers import to_numpy
from model_helpers import check_builds_trains_and_saves

from keras_attention.models import build_transformer_classifier
from keras_attention.models.text_encoder import segment_ids
from keras_attention.models.transformer_classifier import with_new_head

TOKENS = np.array([[5, 6, 7, 0], [8, 9, 10, 11]], "int32")
LABELS = np.array([0, 2])


@pytest.mark.parametrize("pooling", ["mean", "first"])
def test_tiny_builds_trains_and_saves(pooling, tmp_path):
    model = build_transformer_classifier(20, num_classes=3, pooling=pooling)
    check_builds_trains_and_saves(model, TOKENS, LABELS, (2, 3), tmp_path)


# BERT's options (the converter sets them; tests/convert/test_bert.py holds
# them against transformers' BERT).
BERT_OPTIONS = dict(
    positions="learned",
    max_position_embeddings=8,
    num_segments=2,
    separator_id=2,
    normalize_embeddings=True,
    pooling="pooler",
    activation="gelu",
    layer_norm_epsilon=1e-12,
    scale_embeddings=False,
)
PAIRS = np.array([[1, 5, 2, 6, 7, 2, 0], [1, 8, 9, 10, 2, 11, 2]], "int32")  # [CLS] a [SEP] b [SEP]


def test_with_bert_options_builds_trains_and_saves(tmp_path):
    model = build_transformer_classifier(20, num_classes=3, **BERT_OPTIONS)
    check_builds_trains_and_saves(model, PAIRS, LABELS, (2, 3), tmp_path)


def test_segments_are_counted_from_the_separator():
    assert to_numpy(segment_ids(PAIRS, 2, 2)).tolist() == [
        [0, 0, 0, 1, 1, 1, 1],
        [0, 0, 0, 0, 0, 1, 1],
    ]


def test_a_new_head_starts_from_zero_on_the_same_encoder():
    model = build_transformer_classifier(20, num_classes=3, **BERT_OPTIONS)
    new = with_new_head(model, 5)
    assert to_numpy(new(PAIRS)).shape == (2, 5) and not to_numpy(new(PAIRS)).any()
    np.testing.assert_array_equal(to_numpy(new.pool(PAIRS)), to_numpy(model.pool(PAIRS)))


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
