import numpy as np
import pytest
from helpers import to_numpy
from model_helpers import check_builds_trains_and_saves

from keras_attention.models import build_transformer_lm

TOKENS = np.array([[1, 5, 6, 7, 0], [1, 8, 9, 10, 11]], "int32")


@pytest.mark.parametrize(
    "overrides",
    [{}, {"positions": "learned", "max_position_embeddings": 16, "tie_output_embeddings": False}],
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
    with pytest.raises(ValueError, match="max_position_embeddings=None"):
        build_transformer_lm(20, positions="learned")


def test_the_modern_preset_is_llamas_block_at_tiny_sizes(tmp_path):
    model = build_transformer_lm(20, preset="modern")
    config = model.get_config()
    expected = dict(
        norm_first=True,
        normalization="rms_norm",
        feed_forward="swiglu",
        positions="rotary",
        num_key_value_heads=2,
        use_bias=False,
        tie_output_embeddings=True,
    )
    assert {name: config[name] for name in expected} == expected
    assert model.positional_encoding is None and model.output_projection is None
    assert not [w.path for w in model.weights if "bias" in w.path]
    # About the tiny preset's size: the key/value heads and the biases saved.
    tiny = build_transformer_lm(20).count_params()
    assert 0.8 * tiny < model.count_params() < tiny
    ids = np.array([[1, 5, 6, 7, 0], [1, 8, 9, 3, 4]], "int32")
    check_builds_trains_and_saves(model, ids, ids, (2, 5, 20), tmp_path)
