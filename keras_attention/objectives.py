"""The losses, metric, learning-rate schedules and optimizer the recipes
compile with. Registered serializable, so compiled models save and load."""

import math

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_attention")
class MaskedSparseCrossentropy(keras.losses.Loss):
    """Cross-entropy from logits with label smoothing, on integer labels.

    Label smoothing epsilon spreads epsilon of the target mass uniformly over
    the vocabulary (Szegedy et al. 2016; 0.1 in the Transformer paper)
    without building one-hot labels. Keras skips the positions that the
    logits' padding mask marks, so padding never counts.
    """

    def __init__(self, label_smoothing=0.0, name="masked_sparse_crossentropy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.label_smoothing = float(label_smoothing)

    def call(self, y_true, y_pred):
        log_probs = ops.log_softmax(ops.cast(y_pred, "float32"), axis=-1)
        labels = ops.cast(y_true, "int32")
        true_log_prob = ops.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]
        mean_log_prob = ops.mean(log_probs, axis=-1)
        epsilon = self.label_smoothing
        return -((1.0 - epsilon) * true_log_prob + epsilon * mean_log_prob)

    def get_config(self):
        return {**super().get_config(), "label_smoothing": self.label_smoothing}


@keras.saving.register_keras_serializable(package="keras_attention")
class MultipleNegativesRankingLoss(keras.losses.Loss):
    """In-batch negatives for sentence embeddings: sentence-transformers'
    `MultipleNegativesRankingLoss` (Henderson et al. 2017), with its cosine
    similarity and its `scale` of 20.

    `y_pred` `[B, 1 + C, D]` holds each example's vectors: its anchor
    (`[:, 0]`), its positive (`[:, 1]`) and `C - 1` hard negatives
    (`[:, 2:]`, none for pairs). Every anchor is scored against every
    candidate of the batch, the positives then the hard negatives
    (`[B, C * B]`): `scale * cosine(anchor_i, candidate_j)`, and the loss of
    example i is the cross-entropy of those scores with candidate i, its
    own positive, as the label; the other examples' positives and every
    hard negative are its negatives. `y_true` is not read (the label is the
    row's own index), so it can be anything with one value a row, which
    sample weights are shaped as. The vectors are scaled to unit length as
    `torch.nn.functional.normalize` does, dividing by at least 1e-12, so a
    vector of zeros (an empty row that fills a batch) scores 0 against
    everything and has no NaN gradient.
    """

    def __init__(self, scale=20.0, name="multiple_negatives_ranking_loss", **kwargs):
        super().__init__(name=name, **kwargs)
        self.scale = float(scale)

    def call(self, y_true, y_pred):
        vectors = ops.cast(y_pred, "float32")
        # x / max(|x|, 1e-12), with a gradient of 0 (not NaN) at x = 0.
        squares = ops.sum(vectors * vectors, axis=-1, keepdims=True)
        vectors = vectors * ops.rsqrt(ops.maximum(squares, 1e-24))
        anchors = vectors[:, 0]  # [B, D]
        # [C * B, D]: every positive, then every first hard negative, ...
        candidates = ops.reshape(ops.transpose(vectors[:, 1:], (1, 0, 2)), (-1, vectors.shape[-1]))
        scores = self.scale * ops.matmul(anchors, ops.transpose(candidates))  # [B, C * B]
        labels = ops.arange(ops.shape(scores)[0])
        log_probs = ops.log_softmax(scores, axis=-1)
        return -ops.take_along_axis(log_probs, labels[:, None], axis=-1)[:, 0]

    def get_config(self):
        return {**super().get_config(), "scale": self.scale}


@keras.saving.register_keras_serializable(package="keras_attention")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)
    ("Attention Is All You Need", 5.3): linear warm-up, then 1/sqrt(step)."""

    def __init__(self, model_dim, warmup_steps=4000, scale=1.0):
        self.model_dim = model_dim
        self.warmup_steps = warmup_steps
        self.scale = scale

    def __call__(self, step):
        step = ops.cast(step, "float32") + 1.0
        return (self.scale / math.sqrt(self.model_dim)) * ops.minimum(
            ops.rsqrt(step), step * self.warmup_steps**-1.5
        )

    def get_config(self):
        return {"model_dim": self.model_dim, "warmup_steps": self.warmup_steps, "scale": self.scale}


@keras.saving.register_keras_serializable(package="keras_attention")
class DecayToEnd(keras.optimizers.schedules.LearningRateSchedule):
    """The `base` learning rate (a number or a schedule), falling linearly
    to 0 over the last `decay_share` of `total_steps` ("warm-up, stable,
    decay"): the steps before the decay do not depend on `total_steps`, so
    a run may learn how many steps it has after its first ones. Without
    `total_steps` (None), the base rate as it is."""

    def __init__(self, base, total_steps=None, decay_share=0.2):
        if not 0 < decay_share <= 1:
            raise ValueError(f"`decay_share` must be in (0, 1]; got {decay_share}")
        if isinstance(base, dict):  # as get_config gives it
            base = keras.saving.deserialize_keras_object(base)
        self.base = base
        self.total_steps = total_steps
        self.decay_share = decay_share

    @property
    def decay_start(self):
        """The first step of the decay (None without `total_steps`)."""
        if self.total_steps is None:
            return None
        return int(self.total_steps * (1 - self.decay_share))

    def __call__(self, step):
        rate = self.base(step) if callable(self.base) else self.base
        if self.total_steps is None:
            return rate
        left = self.total_steps - ops.cast(step, "float32")
        length = self.total_steps - self.decay_start
        return rate * ops.clip(left / length, 0.0, 1.0)

    def get_config(self):
        base = self.base
        if isinstance(base, keras.optimizers.schedules.LearningRateSchedule):
            base = keras.saving.serialize_keras_object(base)
        return {"base": base, "total_steps": self.total_steps, "decay_share": self.decay_share}


@keras.saving.register_keras_serializable(package="keras_attention")
class AveragingAdam(keras.optimizers.Adam):
    """Adam that keeps an exponential moving average of the weights
    (Keras's `use_ema=True`, `ema_momentum`) and puts it into the model only
    when asked: `use_average()`. Keras's own optimizer puts it there at the
    end of every `model.fit`, and a recipe calls `fit` once an epoch, so
    the average would replace the weights it trains every epoch. The
    average is an optimizer variable: checkpoints keep it."""

    def __init__(self, *args, ema_momentum=0.999, **kwargs):
        kwargs.pop("use_ema", None)  # (always; from a saved config)
        super().__init__(*args, use_ema=True, ema_momentum=ema_momentum, **kwargs)
        self._put_average = False

    def finalize_variable_values(self, var_list):
        if self._put_average:
            super().finalize_variable_values(var_list)

    def use_average(self, var_list):
        """Assigns the moving average to `var_list` (the model's trainable
        variables)."""
        self._put_average = True
        try:
            self.finalize_variable_values(var_list)
        finally:
            self._put_average = False


@keras.saving.register_keras_serializable(package="keras_attention")
class MaskedAccuracy(keras.metrics.Mean):
    """Token accuracy over real (unpadded) positions only."""

    def __init__(self, name="token_accuracy", **kwargs):
        super().__init__(name=name, **kwargs)

    def update_state(self, y_true, y_pred, sample_weight=None):
        predicted = ops.argmax(y_pred, axis=-1)  # int64 on TF, int32 on JAX
        correct = ops.cast(ops.equal(predicted, ops.cast(y_true, predicted.dtype)), "float32")
        real = ops.cast(ops.not_equal(y_true, 0), "float32")  # padding labels are 0
        return super().update_state(correct, sample_weight=real)
