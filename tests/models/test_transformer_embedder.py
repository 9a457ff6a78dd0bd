import keras
import numpy as np
import pytest
from helpers import to_numpy
from model_helpers import check_builds_trains_and_saves

from keras_attention.models import build_transformer_embedder

TOKENS = np.array([[5, 6, 7, 0], [8, 9, 10, 11]], "int32")
LABELS = np.array([0, 2])  # (a loss over the vector's first entries: any loss trains it)


@pytest.mark.parametrize(
    "options",
    [
        dict(pooling="mean"),
        dict(pooling="cls", output_dim=4, output_activation="tanh", unit_normalize=True),
        dict(pooling="weightedmean", output_dim=4, output_use_bias=False),
    ],
)
def test_tiny_builds_trains_and_saves(options, tmp_path):
    model = build_transformer_embedder(20, **options)
    width = options.get("output_dim", 64)
    check_builds_trains_and_saves(model, TOKENS, LABELS, (2, width), tmp_path)


@pytest.mark.parametrize("pooling", ["mean", "max", "lasttoken", "mean_sqrt_len_tokens"])
def test_padding_does_not_change_a_texts_vector(pooling):
    model = build_transformer_embedder(20, pooling=pooling, unit_normalize=True)
    alone = to_numpy(model(TOKENS[:1, :3]))
    padded = to_numpy(model(np.array([[5, 6, 7, 0, 0, 0]], "int32")))
    np.testing.assert_allclose(padded, alone, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(alone, axis=1), 1, atol=1e-6)


def test_vectors_are_float32_under_mixed_precision():
    model = build_transformer_embedder(20, dtype="mixed_float16", output_dim=8)
    assert keras.backend.standardize_dtype(model(TOKENS).dtype) == "float32"


@pytest.mark.parametrize(
    "options, error, message",
    [
        (dict(poling="mean"), TypeError, "unexpected keyword argument 'poling'"),
        (dict(pooling="median"), ValueError, "`mode` must be one of"),
        (dict(output_activation="tanh"), ValueError, "`output_activation` needs `output_dim`"),
        (dict(output_dim=0), ValueError, "output_dim"),
        (dict(preset="huge"), ValueError, "`preset` must be one of"),
    ],
)
def test_bad_arguments_are_named(options, error, message):
    with pytest.raises(error, match=message):
        build_transformer_embedder(20, **options)
