"""Checks every builder's model passes, at its tiny preset."""

import keras
import numpy as np
from helpers import to_numpy


def check_builds_trains_and_saves(model, inputs, labels, expected_shape, tmp_path):
    """Output shape, one `fit` step that changes every weight with a finite
    loss, and a `.keras` round trip with identical outputs and config."""
    assert tuple(to_numpy(model(inputs)).shape) == expected_shape
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    before = [to_numpy(w).copy() for w in model.trainable_weights]
    history = model.fit(inputs, labels, epochs=1, batch_size=len(labels), verbose=0)
    assert np.isfinite(history.history["loss"][0])
    unchanged = [
        w.path
        for w, b in zip(model.trainable_weights, before, strict=True)
        if np.allclose(b, to_numpy(w))
    ]
    assert not unchanged, unchanged

    path = tmp_path / "model.keras"
    model.save(path)
    reloaded = keras.saving.load_model(path)
    assert type(reloaded) is type(model)
    assert reloaded.get_config() == model.get_config()
    np.testing.assert_allclose(
        to_numpy(reloaded(inputs)), to_numpy(model(inputs)), rtol=1e-6, atol=1e-6
    )
