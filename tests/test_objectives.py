"""The loss, metric and schedule of the Transformer paper (`keras_attention.objectives`)."""

import math

import keras
import numpy as np
import pytest
from helpers import to_numpy

from keras_attention.objectives import (
    AveragingAdam,
    DecayToEnd,
    MaskedAccuracy,
    MaskedSparseCrossentropy,
    MultipleNegativesRankingLoss,
    TransformerSchedule,
)


def test_label_smoothed_loss_matches_the_formula_and_skips_padding():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 3, 5)).astype("float32")
    labels = np.array([[1, 4, 0], [2, 3, 3]])
    epsilon = 0.1
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    per_token = -(
        (1 - epsilon) * np.take_along_axis(log_probs, labels[..., None], -1)[..., 0]
        + epsilon * log_probs.mean(-1)
    )
    loss = MaskedSparseCrossentropy(epsilon)
    np.testing.assert_allclose(float(loss(labels, logits)), per_token.mean(), rtol=1e-5)

    # With the logits' padding mask, padded positions do not count.
    mask = labels != 0
    masked_logits = keras.ops.convert_to_tensor(logits)
    masked_logits._keras_mask = keras.ops.convert_to_tensor(mask)
    np.testing.assert_allclose(
        float(loss(labels, masked_logits)), per_token[mask].mean(), rtol=1e-5
    )


def test_schedule_is_the_papers():
    schedule = TransformerSchedule(512, warmup_steps=4000)
    for step in (1, 100, 3999, 4000, 10000, 100000):
        expected = 512**-0.5 * min(step**-0.5, step * 4000**-1.5)
        np.testing.assert_allclose(float(schedule(step - 1)), expected, rtol=1e-5)
    peak = float(schedule(3999))
    assert peak == pytest.approx(512**-0.5 * 4000**-0.5, rel=1e-5)
    assert float(schedule(2000)) < peak and float(schedule(20000)) < peak
    assert math.isclose(
        float(
            keras.optimizers.schedules.deserialize(keras.optimizers.schedules.serialize(schedule))(
                10
            )
        ),
        float(schedule(10)),
    )


def test_decay_to_end_falls_linearly_to_zero_over_the_last_share():
    constant = DecayToEnd(0.5, total_steps=100, decay_share=0.2)
    assert constant.decay_start == 80
    # Written out: the rate until step 80, then 0.5 * (100 - step) / 20.
    for step, expected in [(0, 0.5), (79, 0.5), (80, 0.5), (90, 0.25), (99, 0.025), (100, 0.0)]:
        assert float(constant(step)) == pytest.approx(expected, abs=1e-7), step
    assert float(constant(150)) == 0.0  # past the end: still 0
    # Without an end, the base rate as it is; with a schedule, its value times the factor.
    paper = TransformerSchedule(64, warmup_steps=10)
    assert float(DecayToEnd(paper)(30)) == pytest.approx(float(paper(30)))
    decayed = DecayToEnd(paper, total_steps=50, decay_share=0.5)
    for step in (5, 24, 25, 40, 49):
        factor = min(1.0, (50 - step) / 25)
        assert float(decayed(step)) == pytest.approx(float(paper(step)) * factor, rel=1e-5)
    copy = keras.optimizers.schedules.deserialize(keras.optimizers.schedules.serialize(decayed))
    assert isinstance(copy.base, TransformerSchedule)
    assert [float(copy(s)) for s in (3, 30, 45)] == [float(decayed(s)) for s in (3, 30, 45)]
    with pytest.raises(ValueError, match="decay_share"):
        DecayToEnd(0.1, decay_share=0)


def test_averaging_adam_keeps_the_moving_average_and_puts_it_in_only_when_asked(tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(12, 3)), rng.normal(size=(12, 2))
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(AveragingAdam(learning_rate=0.1, ema_momentum=0.6), "mse")
    after_each_step = []
    record = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: after_each_step.append(
            [v.numpy() for v in model.trainable_variables]
        )
    )
    # Two fits, as a recipe's epochs: neither puts the average in.
    model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0, callbacks=[record])
    model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0, callbacks=[record])
    last = [v.numpy() for v in model.trainable_variables]
    for kept, trained in zip(last, after_each_step[-1], strict=True):
        np.testing.assert_array_equal(kept, trained)
    # Written out: the first step's weights, then 0.6 * average + 0.4 * weights.
    expected = after_each_step[0]
    for weights in after_each_step[1:]:
        expected = [0.6 * a + 0.4 * w for a, w in zip(expected, weights, strict=True)]
    model.optimizer.use_average(model.trainable_variables)
    for average, value in zip(expected, model.trainable_variables, strict=True):
        np.testing.assert_allclose(value.numpy(), average, rtol=1e-5, atol=1e-6)
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    assert isinstance(loaded.optimizer, AveragingAdam) and loaded.optimizer.ema_momentum == 0.6


def test_token_accuracy_ignores_padding():
    metric = MaskedAccuracy()
    logits = np.zeros((1, 4, 3), "float32")
    logits[0, [0, 1, 2, 3], [1, 2, 2, 0]] = 1.0  # predicts 1, 2, 2, 0
    metric.update_state(np.array([[1, 1, 2, 0]]), logits)
    assert float(to_numpy(metric.result())) == pytest.approx(2 / 3)


def multiple_negatives_ranking_loss(anchors, positives, negatives=None, scale=20.0):
    """sentence-transformers' MultipleNegativesRankingLoss in numpy, each
    example's loss: cross-entropy of `scale` * cosine(anchor i, every
    positive, then every hard negative) with positive i as the label."""

    def unit(x):  # torch.nn.functional.normalize
        return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)

    candidates = positives if negatives is None else np.concatenate([positives, negatives])
    scores = scale * unit(anchors).astype("float64") @ unit(candidates).T.astype("float64")
    shifted = scores - scores.max(1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(1, keepdims=True))
    return -log_probs[np.arange(len(anchors)), np.arange(len(anchors))]


@pytest.mark.parametrize("hard_negatives", [False, True])
def test_multiple_negatives_ranking_loss_is_sentence_transformers(hard_negatives):
    rng = np.random.default_rng(0)
    anchors, positives, negatives = rng.normal(size=(3, 5, 8)).astype("float32")
    positives[1] *= 7.0  # the scale of a vector does not count: cosine
    sides = [anchors, positives, *([negatives] if hard_negatives else [])]
    y_pred = np.stack(sides, axis=1)  # [B, 1 + C, D]
    expected = multiple_negatives_ranking_loss(
        anchors, positives, negatives if hard_negatives else None
    )
    loss = MultipleNegativesRankingLoss()
    assert loss.scale == 20.0
    labels = np.zeros(5)  # not read
    np.testing.assert_allclose(to_numpy(loss.call(labels, y_pred)), expected, rtol=1e-4)
    np.testing.assert_allclose(float(to_numpy(loss(labels, y_pred))), expected.mean(), rtol=1e-4)
    # Sample weights weigh examples (an empty row that fills a batch: 0).
    weights = np.array([1, 1, 1, 0, 0], "float32")
    np.testing.assert_allclose(
        float(to_numpy(loss(labels, y_pred, sample_weight=weights))),
        expected[:3].sum() / 5,  # Keras's mean over the batch's rows
        rtol=1e-4,
    )
    # Another scale; and a config that restores it.
    restored = MultipleNegativesRankingLoss.from_config(
        MultipleNegativesRankingLoss(5).get_config()
    )
    np.testing.assert_allclose(
        to_numpy(restored.call(labels, y_pred)),
        multiple_negatives_ranking_loss(
            anchors, positives, negatives if hard_negatives else None, scale=5.0
        ),
        rtol=1e-4,
    )


def test_multiple_negatives_ranking_loss_of_a_zero_vector_is_finite():
    """A vector of zeros (an empty row that fills a batch) scores 0 against
    every anchor, and the gradient stays finite (not NaN)."""
    y_pred = np.random.default_rng(1).normal(size=(3, 2, 4)).astype("float32")
    y_pred[2] = 0.0
    expected = multiple_negatives_ranking_loss(y_pred[:, 0], y_pred[:, 1])
    loss = MultipleNegativesRankingLoss()
    np.testing.assert_allclose(to_numpy(loss.call(None, y_pred)), expected, rtol=1e-4)
    if keras.backend.backend() == "jax":
        import jax

        gradient = jax.grad(lambda x: loss.call(None, x).sum())(y_pred)
    else:
        import tensorflow as tf

        x = tf.constant(y_pred)
        with tf.GradientTape() as tape:
            tape.watch(x)
            total = tf.reduce_sum(loss.call(None, x))
        gradient = tape.gradient(total, x)
    assert np.isfinite(to_numpy(gradient)).all()
