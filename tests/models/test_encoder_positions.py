"""The text encoder's position options beyond BERT's: `position_offset`
(RoBERTa's, XLM-RoBERTa's and MPNet's positions start at 2) and the
relative position bias (`relative_attention_num_buckets`, MPNet's)."""

import keras
import numpy as np
import pytest
from helpers import to_numpy

from keras_attention.models import build_transformer_classifier, build_transformer_embedder


def ids():
    return np.array([[5, 6, 7, 8], [9, 10, 0, 0]], "int32")


def test_position_offset_reads_the_table_from_the_offset():
    """Token t adds row `position_offset + t`: the same output as a model
    without the offset whose table is the rows from the offset on."""
    options = dict(positions="learned", max_position_embeddings=12, dropout=0.0, num_layers=1)
    moved = build_transformer_embedder(20, position_offset=2, **options)
    plain = build_transformer_embedder(20, **{**options, "max_position_embeddings": 10})
    for layer in plain.layers:
        if layer.weights and layer.name != "position_embedding":
            layer.set_weights(moved.get_layer(layer.name).get_weights())
    (table,) = moved.get_layer("position_embedding").get_weights()
    plain.get_layer("position_embedding").set_weights([table[2:]])
    np.testing.assert_allclose(to_numpy(moved(ids())), to_numpy(plain(ids())), atol=1e-6)


@pytest.mark.parametrize("builder", ["embedder", "classifier"])
def test_position_offset_is_saved(builder, tmp_path):
    if builder == "embedder":
        model = build_transformer_embedder(
            20, positions="learned", max_position_embeddings=12, position_offset=2
        )
    else:
        model = build_transformer_classifier(
            20, 3, positions="learned", max_position_embeddings=12, position_offset=2
        )
    assert model.get_config()["position_offset"] == 2
    model.save(tmp_path / "model.keras")
    reloaded = keras.saving.load_model(tmp_path / "model.keras")
    assert reloaded.position_offset == 2
    np.testing.assert_allclose(to_numpy(reloaded(ids())), to_numpy(model(ids())), atol=1e-6)


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(positions="rotary", position_offset=2), "with positions='learned' or 'sinusoidal'"),
        (dict(positions="learned", max_position_embeddings=4, position_offset=4), "leave a row"),
        (dict(position_offset=-1), "an integer >= 0"),
        (dict(position_offset=1.5), "must be an integer >= 0"),
    ],
)
def test_a_bad_position_offset_is_refused(options, message):
    with pytest.raises(ValueError, match=message):
        build_transformer_embedder(20, **options)


@pytest.mark.parametrize("builder", ["embedder", "classifier"])
def test_a_relative_position_bias_is_built_used_and_saved(builder, tmp_path):
    options = dict(relative_attention_num_buckets=8, relative_attention_max_distance=16)
    if builder == "embedder":
        model = build_transformer_embedder(20, dropout=0.0, **options)
    else:
        model = build_transformer_classifier(20, 3, dropout=0.0, **options)
    bias = model.encoder.relative_position_bias
    assert (bias.num_buckets, bias.max_distance, bias.num_heads) == (8, 16, 4)
    before = to_numpy(model(ids()))
    bias.set_weights([np.random.default_rng(0).normal(size=(8, 4)).astype("float32")])
    after = to_numpy(model(ids()))
    assert not np.allclose(before, after, atol=1e-4)
    config = model.get_config()
    assert config["relative_attention_num_buckets"] == 8
    assert config["relative_attention_max_distance"] == 16
    model.save(tmp_path / "model.keras")
    reloaded = keras.saving.load_model(tmp_path / "model.keras")
    np.testing.assert_allclose(to_numpy(reloaded(ids())), after, atol=1e-6)


def test_a_relative_position_bias_with_chunk_size_is_refused():
    with pytest.raises(ValueError, match="is not supported with `chunk_size`"):
        build_transformer_embedder(20, relative_attention_num_buckets=8, chunk_size=4)
