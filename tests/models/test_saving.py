"""A model keeps its dtype policy through a `.keras` file: trained in mixed
precision, it reloads in mixed precision, whatever the global policy."""

import warnings
from pathlib import Path

import keras
import numpy as np
import pytest
from helpers import to_numpy

from keras_attention.models import (
    build_seq2seq_attention,
    build_transformer,
    build_transformer_classifier,
    build_transformer_lm,
)

TOKENS = np.array([[5, 6, 7, 0], [8, 9, 10, 11]], "int32")
PAIR = {"source_ids": TOKENS, "target_ids": TOKENS}
BUILDS = {
    "transformer": (lambda **kw: build_transformer(20, preset="tiny", **kw), PAIR),
    "seq2seq": (lambda **kw: build_seq2seq_attention(20, preset="tiny", **kw), PAIR),
    "classifier": (lambda **kw: build_transformer_classifier(20, 3, preset="tiny", **kw), TOKENS),
    "lm": (lambda **kw: build_transformer_lm(20, preset="tiny", **kw), TOKENS),
}


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_mixed_precision_survives_a_round_trip(name, tmp_path):
    build, inputs = BUILDS[name]
    model = build(dtype="mixed_bfloat16")
    path = tmp_path / "model.keras"
    model.save(path)
    reloaded = keras.saving.load_model(path)  # the global policy is float32
    policies = {layer.name: layer.dtype_policy.name for layer in reloaded.layers}
    assert policies == {layer.name: layer.dtype_policy.name for layer in model.layers}
    assert policies[model.layers[-2].name] == "mixed_bfloat16"  # (a head may be float32)
    assert all(weight.dtype == "float32" for weight in reloaded.weights if "float" in weight.dtype)
    np.testing.assert_array_equal(to_numpy(reloaded(inputs)), to_numpy(model(inputs)))
    assert build().get_config()["dtype"] == "float32"


FIXTURES = Path(__file__).parent / "fixtures"


def load_without_warnings(path):
    """`keras.saving.load_model(path)`, where a `FutureWarning` or a
    `DeprecationWarning` (an old argument name read with a warning) fails."""
    import keras_attention.models  # noqa: F401  (registers the classes)

    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        warnings.simplefilter("error", DeprecationWarning)
        return keras.saving.load_model(path)


@pytest.mark.parametrize("name", ["language_model", "translator"])
def test_files_saved_before_the_rename_to_sliding_window_load_and_answer_alike(name):
    """Written by the package before `window_size` became `sliding_window`
    (fixtures/make_saved_models.py): they load without a warning, with
    their window, and give the outputs they gave then."""
    reference = np.load(FIXTURES / "saved_models.npz")
    model = load_without_warnings(FIXTURES / f"{name}.keras")
    ids = reference["ids"]
    inputs = ids if name == "language_model" else {"source_ids": ids, "target_ids": ids[:, :5]}
    np.testing.assert_allclose(to_numpy(model(inputs)), reference[name], rtol=1e-5, atol=1e-6)
    assert model.sliding_window == (3 if name == "language_model" else 4)
    assert "sliding_window" in model.get_config() and "window_size" not in model.get_config()


def test_window_size_still_works_for_a_release_with_a_warning():
    from keras_attention.layers import MultiHeadSelfAttention, TransformerBlock

    with pytest.warns(FutureWarning, match="`window_size` is deprecated.*`sliding_window`"):
        layer = MultiHeadSelfAttention(num_heads=2, window_size=3)
    assert layer.sliding_window == 3 and "window_size" not in layer.get_config()
    with pytest.warns(FutureWarning, match="`window_size` is deprecated"):
        block = TransformerBlock(num_heads=2, intermediate_dim=8, window_size=2)
    assert block.sliding_window == 2
    with pytest.warns(FutureWarning, match="`window_size` is deprecated"):
        model = build_transformer_lm(20, preset="tiny", window_size=4)
    assert model.sliding_window == 4
    assert all(b.sliding_window == 4 for b in model.decoder.blocks)
    with pytest.raises(TypeError, match="give `sliding_window` only, not also `window_size`"):
        MultiHeadSelfAttention(num_heads=2, sliding_window=3, window_size=5)


@pytest.mark.parametrize(
    "name", ["learned_language_model", "learned_classifier", "position_layers"]
)
def test_files_saved_before_the_rename_to_max_position_embeddings_load_and_answer_alike(name):
    """Written by the package while a position table's size was `max_length`
    (fixtures/make_saved_position_tables.py): they load without a warning,
    with their table, and give the outputs they gave then."""
    reference = np.load(FIXTURES / "saved_position_tables.npz")
    model = load_without_warnings(FIXTURES / f"{name}.keras")
    inputs = reference["vectors" if name == "position_layers" else "ids"]
    np.testing.assert_allclose(to_numpy(model(inputs)), reference[name], rtol=1e-5, atol=1e-6)
    if name == "position_layers":
        tables = [layer.max_position_embeddings for layer in model.layers[1:]]
        assert tables == [12, 16]
        assert all("max_length" not in layer.get_config() for layer in model.layers[1:])
    else:
        assert model.max_position_embeddings == 12
        assert model.positional_encoding.max_position_embeddings == 12
        config = model.get_config()
        assert config["max_position_embeddings"] == 12 and "max_length" not in config


def test_max_length_still_works_for_a_release_with_a_warning():
    """`max_length`, the position table's name before, still builds the
    same models, with a FutureWarning naming `max_position_embeddings`;
    both names at once are refused."""
    from keras_attention.models.transformer_lm import PRESETS, TransformerLM
    from keras_attention.models.zoo_model import resolve_preset

    message = "`max_length` is deprecated.*`max_position_embeddings`"
    with pytest.warns(FutureWarning, match=message):
        model = build_transformer_lm(20, positions="learned", max_length=8)
    assert model.max_position_embeddings == model.positional_encoding.max_position_embeddings == 8
    assert "max_length" not in model.get_config()
    with pytest.warns(FutureWarning, match=message):
        model = TransformerLM(20, num_layers=1, positions="learned", max_length=6)
    assert model.max_position_embeddings == 6
    with pytest.warns(FutureWarning, match=message):
        classifier = build_transformer_classifier(20, 3, positions="learned", max_length=8)
    assert classifier.positional_encoding.max_position_embeddings == 8
    # Over a preset that sets the table (GPT-2 small's 1024), the old name wins.
    with pytest.warns(FutureWarning, match=message):
        arguments = resolve_preset(PRESETS, "small", {"max_length": 64}, TransformerLM)
    assert arguments["max_position_embeddings"] == 64 and "max_length" not in arguments
    both = "give `max_position_embeddings` only, not also `max_length`"
    with pytest.raises(TypeError, match=both):
        build_transformer_lm(20, positions="learned", max_position_embeddings=8, max_length=8)
    with pytest.raises(TypeError, match=both):
        TransformerLM(20, positions="learned", max_position_embeddings=8, max_length=8)
    with pytest.raises(TypeError, match=both):
        build_transformer_classifier(
            20, 3, positions="learned", max_position_embeddings=8, max_length=8
        )


@pytest.mark.parametrize(
    "name",
    ["stack_options_translator", "stack_options_classifier", "stack_options_language_model"],
)
def test_files_saved_while_each_model_declared_its_stack_options_load_and_answer_alike(name):
    """Written by the package while each model declared the stack's options
    itself, before `StackOptions` (fixtures/make_saved_stack_options.py):
    they load without a warning, with their options, and give the outputs
    they gave then."""
    reference = np.load(FIXTURES / "saved_stack_options.npz")
    model = load_without_warnings(FIXTURES / f"{name}.keras")
    ids = reference["ids"]
    inputs = {"source_ids": ids, "target_ids": ids[:, :5]} if "translator" in name else ids
    np.testing.assert_allclose(to_numpy(model(inputs)), reference[name], rtol=1e-5, atol=1e-6)
    stack = model.decoder if "language_model" in name else model.encoder
    assert model.num_key_value_heads == 1 and model.use_gate
    assert all(block.num_key_value_heads == 1 and block.use_gate for block in stack.blocks)
    assert stack.get_config()["sliding_window"] == model.sliding_window
    config = model.get_config()
    assert {"num_layers", "num_heads", "sliding_window", "layer_norm_epsilon"} <= set(config)
    assert type(model).from_config(config).get_config() == config
