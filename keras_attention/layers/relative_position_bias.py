import math

import keras
import numpy as np
from keras import ops

from keras_attention.utils import check_bool, check_positive_int


def distance_buckets(num_buckets, max_distance, bidirectional):
    """The bucket of each distance 0, 1, ..., `max_distance` (int32
    `[max_distance + 1]`), in one direction: the first half of the buckets
    one per distance, the other half logarithmically up to `max_distance`,
    farther ones in the last bucket; bidirectional, half the buckets per
    direction. Computed in float32 as T5's `_relative_position_bucket` is,
    so every distance gets the bucket the reference gives it (its float32
    logarithm decides at the edges)."""
    buckets = num_buckets // 2 if bidirectional else num_buckets
    max_exact = buckets // 2
    distances = np.arange(max_distance + 1)
    with np.errstate(divide="ignore"):
        ratio = np.log(distances.astype(np.float32) / np.float32(max_exact))
    scaled = (
        ratio / np.float32(math.log(max_distance / max_exact)) * np.float32(buckets - max_exact)
    )
    large = max_exact + np.where(distances < max_exact, 0, scaled).astype(np.int64)
    return np.where(distances < max_exact, distances, np.minimum(large, buckets - 1)).astype(
        "int32"
    )


@keras.saving.register_keras_serializable(package="keras_attention")
class RelativePositionBias(keras.layers.Layer):
    """A learned bias on the attention scores by relative position, as T5
    (Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a
    Unified Text-to-Text Transformer") and MPNet (Song et al. 2020) add it.

    Key j's distance from query i, `j - i`, falls in one of `num_buckets`
    buckets: one bucket per distance up to `max_exact` (half the buckets
    of a direction), then buckets whose width grows logarithmically up to
    `max_distance`, farther distances sharing the last one. Bidirectional
    (an encoder), half the buckets are for keys after the query and half
    for keys before it; otherwise (a causal decoder) every key after the
    query shares bucket 0 with the query itself. Each bucket has one
    learned value per head, and that value is added to the head's score of
    query i for key j before the softmax. One table, computed once, serves
    every layer of a stack (MPNet's and T5's stacks share theirs).

    Args:
        num_heads: int, the attention heads: one value per head and bucket.
        num_buckets: int >= 4 (even when bidirectional), the buckets.
            Default 32.
        max_distance: int, the distance from which on keys share the last
            bucket of their direction; more than the exact buckets
            (`num_buckets // 4` when bidirectional, `num_buckets // 2`
            otherwise). Default 128.
        bidirectional: bool, buckets for keys on both sides of the query
            (an encoder) or only for those before it. Default True.
        initializer: initializer of the `[num_buckets, num_heads]` table
            (`embeddings`; Hugging Face's `relative_attention_bias.weight`).
            Default `"zeros"`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments (Keras takes a Python int only as a keyword argument):
        query_length: int (or int scalar tensor), Tq.
        key_length: int (or int scalar tensor), Tk. Default `query_length`.
        query_start: int (or int scalar tensor), the position of the first
            query among the keys: 0 for a whole sequence, the cache index
            when decoding one step at a time. Default 0.

    Returns:
        The bias `[1, num_heads, Tq, Tk]`, to add to scores `[B, H, Tq, Tk]`
        (`MultiHeadSelfAttention`'s `attention_bias`).

    Example:

    >>> layer = RelativePositionBias(num_heads=2, num_buckets=8, max_distance=16)
    >>> tuple(layer(query_length=5, key_length=7).shape)
    (1, 2, 5, 7)

    Buckets 0-3 for keys at or before the query (distances 0 and 1 exact,
    2 to 5 in one bucket, 6 and farther in the last), 4-7 for keys after it:

    >>> keras.ops.convert_to_numpy(layer.buckets(1, 20)).tolist()
    [[0, 5, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7]]
    >>> keras.ops.convert_to_numpy(layer.buckets(4)).tolist()
    [[0, 5, 6, 6], [1, 0, 5, 6], [2, 1, 0, 5], [2, 2, 1, 0]]
    """

    def __init__(
        self,
        num_heads,
        num_buckets=32,
        max_distance=128,
        bidirectional=True,
        initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.num_buckets = check_positive_int("num_buckets", num_buckets)
        self.max_distance = check_positive_int("max_distance", max_distance)
        self.bidirectional = check_bool("bidirectional", bidirectional)
        self.initializer = keras.initializers.get(initializer)
        per_direction = num_buckets // 2 if bidirectional else num_buckets
        if num_buckets < 4 or (bidirectional and num_buckets % 2):
            raise ValueError(
                "`num_buckets` must be at least 4, and even when bidirectional (half for each "
                f"direction). Received: num_buckets={num_buckets}, bidirectional={bidirectional}"
            )
        if max_distance <= per_direction // 2:
            raise ValueError(
                "`max_distance` must be more than the distances that have a bucket each "
                f"({per_direction // 2}). Received: max_distance={max_distance}"
            )
        self._distance_buckets = distance_buckets(num_buckets, max_distance, bidirectional)
        # The table's shape is known now: built here, so a call with lengths
        # (no tensor to infer a shape from) finds it.
        self.build()

    def build(self, *args):
        if self.built:
            return
        self.embeddings = self.add_weight(
            shape=(self.num_buckets, self.num_heads),
            initializer=self.initializer,
            name="embeddings",
        )
        self.built = True

    def call(self, query_length, key_length=None, query_start=0):
        buckets = self.buckets(query_length, key_length, query_start)  # [Tq, Tk]
        values = ops.take(self.embeddings, buckets, axis=0)  # [Tq, Tk, H]
        return ops.expand_dims(ops.transpose(values, (2, 0, 1)), 0)

    def buckets(self, query_length, key_length=None, query_start=0):
        """The bucket of each query and key, int32 `[Tq, Tk]`."""
        key_length = query_length if key_length is None else key_length
        query_positions = ops.arange(query_length, dtype="int32") + ops.cast(query_start, "int32")
        key_positions = ops.arange(key_length, dtype="int32")
        relative = key_positions[None, :] - query_positions[:, None]  # [Tq, Tk]: j - i
        if self.bidirectional:
            first = ops.where(relative > 0, self.num_buckets // 2, 0)
            distance = ops.abs(relative)
        else:
            first = ops.zeros_like(relative)
            distance = ops.maximum(-relative, 0)  # keys after the query: distance 0
        table = ops.convert_to_tensor(self._distance_buckets, "int32")
        return first + ops.take(table, ops.minimum(distance, self.max_distance))

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "num_buckets": self.num_buckets,
                "max_distance": self.max_distance,
                "bidirectional": self.bidirectional,
                "initializer": keras.initializers.serialize(self.initializer),
            }
        )
        return config

    def compute_output_shape(self, query_length, key_length=None, query_start=0):
        key_length = query_length if key_length is None else key_length
        static = [
            length if isinstance(length, int) else None for length in (query_length, key_length)
        ]
        return (1, self.num_heads, *static)
