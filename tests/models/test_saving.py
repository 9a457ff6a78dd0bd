"""A model keeps its dtype policy through a `.keras` file: trained in mixed
precision, it reloads in mixed precision, whatever the global policy."""

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
