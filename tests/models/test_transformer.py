import keras
import numpy as np
import pytest
from helpers import to_numpy
from model_helpers import check_builds_trains_and_saves

from keras_attention.models import build_transformer

SOURCE = np.array([[5, 6, 7, 0], [8, 9, 10, 11]], "int32")
TARGET = np.array([[1, 5, 6, 0, 0], [1, 2, 3, 4, 5]], "int32")


@pytest.mark.parametrize(
    "overrides",
    [{}, {"norm_first": True}, {"share_embeddings": True, "tie_output_embeddings": True}],
)
def test_tiny_builds_trains_and_saves(overrides, tmp_path):
    model = build_transformer(20, preset="tiny", **overrides)
    check_builds_trains_and_saves(
        model, {"source_ids": SOURCE, "target_ids": TARGET}, TARGET, (2, 5, 20), tmp_path
    )


def transformer_parameters(vocabulary, d, ff, layers, shared=True):
    """Count of the paper's base model, written out term by term."""
    attention = 4 * (d * d + d)  # W^Q, W^K, W^V, W^O with biases
    feed_forward = d * ff + ff + ff * d + d
    layer_norm = 2 * d
    encoder_layer = attention + feed_forward + 2 * layer_norm
    decoder_layer = 2 * attention + feed_forward + 3 * layer_norm
    embeddings = vocabulary * d if shared else 3 * vocabulary * d
    return embeddings + layers * (encoder_layer + decoder_layer)


def test_base_preset_has_the_papers_size():
    model = build_transformer(37000, preset="base")
    assert model.count_params() == transformer_parameters(37000, 512, 2048, 6)
    # "Transformer (base model) ... 65 x 10^6" parameters (Table 3).
    assert 0.95 * 65e6 < model.count_params() < 1.05 * 65e6
    config = model.get_config()
    assert (config["num_layers"], config["model_dim"], config["num_heads"]) == (6, 512, 8)
    assert (config["intermediate_dim"], config["dropout"]) == (2048, 0.1)


def test_big_preset_sizes():
    config = build_transformer(100, preset="big").get_config()
    assert (config["model_dim"], config["num_heads"], config["intermediate_dim"]) == (
        1024,
        16,
        4096,
    )
    assert config["dropout"] == 0.3


def test_padded_target_positions_do_not_count_in_the_loss():
    model = build_transformer(20)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    inputs = {"source_ids": SOURCE, "target_ids": TARGET}
    logits = model(inputs)
    labels = TARGET.copy()
    other_labels = labels.copy()
    other_labels[0, 3:] = 7  # labels at padded positions change
    assert np.isclose(float(loss(labels, logits)), float(loss(other_labels, logits)))
    other_labels[0, 1] = 7  # a label at a real position changes
    assert not np.isclose(float(loss(labels, logits)), float(loss(other_labels, logits)))


def test_source_padding_does_not_change_the_logits():
    model = build_transformer(20)
    short = {"source_ids": SOURCE[:1, :3], "target_ids": TARGET[:1]}
    long = {"source_ids": np.pad(SOURCE[:1, :3], [[0, 0], [0, 4]]), "target_ids": TARGET[:1]}
    np.testing.assert_allclose(to_numpy(model(short)), to_numpy(model(long)), atol=1e-5)


def test_attention_weights_of_every_layer():
    model = build_transformer(20, num_layers=3)
    scores = model.attention_scores({"source_ids": SOURCE, "target_ids": TARGET})
    assert len(scores["encoder_self_attention"]) == 3
    assert to_numpy(scores["encoder_self_attention"][0]).shape == (2, 4, 4, 4)
    assert to_numpy(scores["decoder_self_attention"][2]).shape == (2, 4, 5, 5)
    cross = to_numpy(scores["decoder_cross_attention"][1])
    assert cross.shape == (2, 4, 5, 4)
    assert np.all(cross[0, :, :, 3] == 0)  # padded source position


def test_bad_arguments():
    with pytest.raises(ValueError, match="preset='huge'"):
        build_transformer(20, preset="huge")
    with pytest.raises(ValueError, match="source_vocabulary_size=20"):
        build_transformer(20, 30, share_embeddings=True)
    with pytest.raises(ValueError, match="num_heads=3, model width=64"):
        build_transformer(20, num_heads=3)
    with pytest.raises(ValueError, match="num_layers=0"):
        build_transformer(20, num_layers=0)
