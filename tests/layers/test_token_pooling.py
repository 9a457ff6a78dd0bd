import doctest

import keras
import numpy as np
import pytest
from helpers import run_layer_test, to_numpy

from keras_attention.layers import TokenPooling
from keras_attention.layers import token_pooling as token_pooling_module

MODES = token_pooling_module.MODES


def sentence_transformers_pooling(x, mask, mode):
    """sentence-transformers' `Pooling.forward` (v5), in numpy float64: the
    mask as floats times the tokens, clamped sums, and the last token found
    by flipping the mask and taking its argmax. One deliberate difference:
    a text with no real token gives zeros under `"max"` (theirs gives -1e9)."""
    x = x.astype("float64")
    batch, length, _ = x.shape
    expanded = np.broadcast_to(mask[..., None], x.shape).astype("float64")
    if mode == "cls":
        return x[:, 0]
    if mode == "max":
        pooled = np.where(expanded == 0, -1e9, x).max(axis=1)
        return np.where(mask.any(axis=1, keepdims=True), pooled, 0.0)
    if mode in ("mean", "mean_sqrt_len_tokens"):
        summed = (x * expanded).sum(axis=1)
        count = np.clip(expanded.sum(axis=1), 1e-9, None)
        return summed / (count if mode == "mean" else np.sqrt(count))
    if mode == "weightedmean":
        weighted = expanded * np.arange(1, length + 1, dtype="float64")[None, :, None]
        return (x * weighted).sum(axis=1) / np.clip(weighted.sum(axis=1), 1e-9, None)
    if mode == "lasttoken":
        flipped = mask[:, ::-1].astype("int64")
        values, indices = flipped.max(axis=1), flipped.argmax(axis=1)
        indices = np.where(values == 0, length - 1, indices)
        gather = length - indices - 1  # [B]
        return (x * expanded)[np.arange(batch), gather]
    raise AssertionError(mode)


def random_masks(rng, batch, length):
    """Right-padded, left-padded and scattered masks, each row with at least
    one real token."""
    lengths = rng.integers(1, length + 1, size=batch)
    positions = np.arange(length)[None]
    right = positions < lengths[:, None]
    left = positions >= length - lengths[:, None]
    scattered = rng.random((batch, length)) < 0.5
    scattered[np.arange(batch), rng.integers(0, length, size=batch)] = True
    return {"right": right, "left": left, "scattered": scattered}


@pytest.mark.parametrize("mode", MODES)
def test_layer_contract(mode, tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 5, 4)).astype("float32")
    mask = np.array([[True] * 5, [True] * 3 + [False] * 2])
    run_layer_test(
        TokenPooling,
        {"mode": mode},
        {"x": x, "padding_mask": mask},
        expected_shape=(2, 4),
        tmp_path=tmp_path,
    )


@pytest.mark.parametrize("mode", MODES)
def test_equals_sentence_transformers_pooling(mode):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(6, 9, 5)).astype("float32")
    layer = TokenPooling(mode)
    for padding, mask in random_masks(rng, 6, 9).items():
        expected = sentence_transformers_pooling(x, mask, mode)
        output = to_numpy(layer(x, padding_mask=mask))
        np.testing.assert_allclose(output, expected, rtol=1e-6, atol=1e-6, err_msg=padding)
    # No mask: every token is real.
    np.testing.assert_allclose(
        to_numpy(layer(x)),
        sentence_transformers_pooling(x, np.ones((6, 9), bool), mode),
        rtol=1e-6,
        atol=1e-6,
    )


def test_weights_and_last_positions_by_hand():
    """weightedmean weighs position t by t + 1 of the padded sequence;
    lasttoken takes the last real position, left- or right-padded."""
    x = np.array([[[1.0], [2.0], [4.0], [8.0]]] * 2, "float32")
    mask = np.array([[True, True, True, False], [False, True, True, True]])
    weighted = to_numpy(TokenPooling("weightedmean")(x, padding_mask=mask))
    np.testing.assert_allclose(
        weighted[:, 0], [(1 + 2 * 2 + 3 * 4) / 6, (2 * 2 + 3 * 4 + 4 * 8) / 9], rtol=1e-6
    )
    np.testing.assert_array_equal(
        to_numpy(TokenPooling("lasttoken")(x, padding_mask=mask)), [[4], [8]]
    )
    np.testing.assert_array_equal(to_numpy(TokenPooling("cls")(x, padding_mask=mask)), [[1], [1]])


@pytest.mark.parametrize("mode", MODES)
def test_appended_padding_changes_nothing(mode):
    rng = np.random.default_rng(2)
    x = rng.normal(size=(4, 6, 3)).astype("float32")
    garbage = (1e4 * rng.normal(size=(4, 3, 3))).astype("float32")
    garbage[0, 0, 0], garbage[1, 1, 1], garbage[2, 2, 2] = np.nan, np.inf, -np.inf
    padded = np.concatenate([x, garbage], axis=1)
    layer = TokenPooling(mode)
    for padding, mask in random_masks(rng, 4, 6).items():
        longer_mask = np.concatenate([mask, np.zeros((4, 3), bool)], axis=1)
        np.testing.assert_allclose(
            to_numpy(layer(padded, padding_mask=longer_mask)),
            to_numpy(layer(x, padding_mask=mask)),
            rtol=1e-6,
            atol=1e-6,
            err_msg=padding,
        )


@pytest.mark.parametrize("mode", MODES)
def test_a_text_without_real_tokens_gives_zeros(mode):
    x = np.random.default_rng(3).normal(size=(2, 4, 3)).astype("float32")
    mask = np.array([[False] * 4, [True, True, False, False]])
    output = to_numpy(TokenPooling(mode)(x, padding_mask=mask))
    np.testing.assert_array_equal(output[0], x[0, 0] if mode == "cls" else np.zeros(3))
    np.testing.assert_allclose(
        output[1], sentence_transformers_pooling(x, mask, mode)[1], rtol=1e-6, atol=1e-6
    )


def test_bad_arguments():
    with pytest.raises(
        ValueError, match=r"`mode` must be one of \(.*'lasttoken'\)\. Received: mode='median'"
    ):
        TokenPooling("median")
    x = np.zeros((2, 4, 3), "float32")
    with pytest.raises(ValueError, match="padding_mask"):
        TokenPooling()(x, padding_mask=np.ones((2, 5), bool))
    with pytest.raises(ValueError, match="boolean mask"):
        TokenPooling()(x, padding_mask=np.ones((2, 4), "float32"))
    with pytest.raises(ValueError, match=r"\[B, T, D\]"):
        TokenPooling()(np.zeros((2, 3), "float32"))


@pytest.fixture
def mixed_float16():
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_float16")
    yield
    keras.config.set_dtype_policy(previous)


@pytest.mark.parametrize("mode", MODES)
def test_mixed_float16_matches_float32(mode, mixed_float16):
    """The float16 output is the float32 layer's, rounded: sums run in
    float32, so 64 tokens of about 3000, whose sum is past float16's
    largest (65504), still pool right."""
    rng = np.random.default_rng(4)
    x = (3000 + 100 * rng.normal(size=(3, 64, 4))).astype("float16")
    mask = random_masks(rng, 3, 64)["left"]
    mask[2] = False
    layer = TokenPooling(mode)
    output = layer(x, padding_mask=mask)
    assert keras.backend.standardize_dtype(output.dtype) == "float16"
    in_float32 = to_numpy(
        TokenPooling(mode, dtype="float32")(x.astype("float32"), padding_mask=mask)
    )
    np.testing.assert_allclose(to_numpy(output).astype("float32"), in_float32, rtol=1e-3)
    expected = sentence_transformers_pooling(x.astype("float32"), mask, mode)
    np.testing.assert_allclose(in_float32, expected, rtol=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_implicit_mask_is_the_padding_mask(mode):
    ids = np.array([[3, 5, 0, 0, 0], [2, 9, 4, 6, 1], [0, 0, 7, 8, 0]])
    embedding = keras.layers.Embedding(10, 4, mask_zero=True)
    layer = TokenPooling(mode)
    explicit = to_numpy(layer(embedding(ids), padding_mask=ids != 0))
    inputs = keras.Input((None,), dtype="int32")
    pooled = layer(embedding(inputs))
    assert getattr(pooled, "_keras_mask", None) is None  # one vector per text: no mask
    model = keras.Model(inputs, keras.layers.Dense(2)(pooled))
    pooling_model = keras.Model(inputs, pooled)
    np.testing.assert_allclose(pooling_model.predict(ids, verbose=0), explicit, atol=1e-6)
    assert model.predict(ids, verbose=0).shape == (3, 2)


def test_docstring_example_runs():
    result = doctest.testmod(token_pooling_module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0, result
