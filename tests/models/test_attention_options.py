"""The builders with today's attention options: grouped-query heads, a
sliding window, an output gate and rotary or ALiBi positions reach every
attention layer, train, save, and decode with the cache as without it."""

import numpy as np
import pytest
from helpers import to_numpy
from model_helpers import check_builds_trains_and_saves

from keras_attention import decoding
from keras_attention.models import (
    build_transformer,
    build_transformer_classifier,
    build_transformer_lm,
)

# Llama's block beside the attention options: RMS norms, SwiGLU, no biases.
OPTIONS = dict(
    num_key_value_heads=2,
    sliding_window=3,
    use_gate=True,
    normalization="rms_norm",
    feed_forward="swiglu",
    use_bias=False,
)
SMALL = dict(num_layers=1, model_dim=16, num_heads=4, intermediate_dim=32)
IDS = np.array([[5, 6, 7, 8, 9, 3], [8, 9, 10, 0, 0, 0]], "int32")
TARGET = np.array([[1, 5, 6, 7, 0], [1, 2, 3, 4, 5]], "int32")


def attention_layers(model):
    stacks = [getattr(model, name) for name in ("encoder", "decoder") if hasattr(model, name)]
    for stack in stacks:
        for block in stack.blocks:
            yield block.self_attention, True
            if getattr(block, "has_cross_attention", False):
                yield block.cross_attention, False


@pytest.mark.parametrize(
    "builder,positions", [("transformer", "alibi"), ("lm", "rotary"), ("classifier", "rotary")]
)
def test_each_builder_passes_the_options_to_every_attention_layer(builder, positions, tmp_path):
    options = dict(OPTIONS, positions=positions)
    if builder == "transformer":
        model = build_transformer(20, **SMALL, **options)
        inputs, labels, shape = {"source_ids": IDS, "target_ids": TARGET}, TARGET, (2, 5, 20)
    elif builder == "lm":
        model = build_transformer_lm(20, **SMALL, **options)
        inputs, labels, shape = IDS, IDS, (2, 6, 20)
    else:
        model = build_transformer_classifier(20, 3, **SMALL, **options)
        inputs, labels, shape = IDS, np.array([0, 2]), (2, 3)
    layers = list(attention_layers(model))
    assert len(layers) == (3 if builder == "transformer" else 1)
    for layer, is_self_attention in layers:
        assert (layer.num_key_value_heads, layer.use_gate) == (2, True)
        # The window and the positions are the self-attention's; the
        # cross-attention reads the whole source, unturned.
        assert layer.sliding_window == (3 if is_self_attention else None)
        assert getattr(layer, "positions", None) == (positions if is_self_attention else None)
    assert model.positional_encoding is None  # nothing is added to the embeddings
    check_builds_trains_and_saves(model, inputs, labels, shape, tmp_path)


@pytest.mark.parametrize("positions", ["rotary", "alibi"])
@pytest.mark.parametrize("builder", ["transformer", "lm"])
def test_decoding_with_the_options_uses_a_smaller_cache_and_equals_no_cache(builder, positions):
    options = dict(OPTIONS, positions=positions)
    if builder == "transformer":
        model, inputs = build_transformer(20, **SMALL, **options), IDS
    else:
        model, inputs = build_transformer_lm(20, **SMALL, **options), IDS[:, :3]
    cache = model.decoder.initial_caches(2, 8)[0]
    assert tuple(cache[0].shape) == (2, 2, 8, 4)  # [B, H_kv, max_length, d]
    for search in (decoding.greedy_search, decoding.beam_search):
        cached = search(model, inputs, 8)
        uncached = search(model, inputs, 8, use_cache=False)
        if search is decoding.beam_search:
            cached, uncached = cached[0], uncached[0]
        np.testing.assert_array_equal(to_numpy(cached), to_numpy(uncached))


@pytest.mark.parametrize("builder", ["transformer", "lm", "classifier"])
def test_global_every_alternates_windowed_and_global_layers(builder):
    options = dict(SMALL, num_layers=4, sliding_window=2, global_every=2)
    if builder == "transformer":
        model = build_transformer(20, **options)
    elif builder == "lm":
        model = build_transformer_lm(20, **options)
    else:
        model = build_transformer_classifier(20, 3, **options)
    reloaded = type(model).from_config(model.get_config())
    for built in (model, reloaded):
        for stack in [getattr(built, n) for n in ("encoder", "decoder") if hasattr(built, n)]:
            windows = [block.self_attention.sliding_window for block in stack.blocks]
            assert windows == [2, None, 2, None]


def test_a_windowed_layer_reads_its_window_and_a_global_layer_everything():
    model = build_transformer_lm(20, **dict(SMALL, num_layers=2), sliding_window=2, global_every=2)
    windowed, global_ = (to_numpy(w) for w in model.attention_scores(IDS)["self_attention"])
    distance = np.subtract.outer(np.arange(6), np.arange(6))  # i - j
    assert np.all(windowed[0][:, distance >= 2] == 0)
    assert np.all(windowed[0][:, (distance >= 0) & (distance < 2)] > 0)
    assert np.all(global_[0][:, distance >= 0] > 0)


def test_the_windowed_modern_preset_decodes_with_the_cache_as_without():
    model = build_transformer_lm(20, preset="modern_windowed", sliding_window=2)
    assert [b.self_attention.sliding_window for b in model.decoder.blocks] == [2, None]
    for search in (decoding.greedy_search, decoding.beam_search):
        cached = search(model, IDS[:, :3], 9)
        uncached = search(model, IDS[:, :3], 9, use_cache=False)
        if search is decoding.beam_search:
            cached, uncached = cached[0], uncached[0]
        np.testing.assert_array_equal(to_numpy(cached), to_numpy(uncached))


@pytest.mark.parametrize(
    "options,message",
    [
        (
            dict(global_every=2),
            "needs a .sliding_window.. Received: global_every=2, sliding_window=None",
        ),
        (dict(sliding_window=4, global_every=0), "global_every"),
    ],
)
def test_global_every_refusals(options, message):
    with pytest.raises(ValueError, match=message):
        build_transformer_lm(20, **SMALL, **options)
