"""Sampling: each token drawn from the softmax of the logits (temperature,
top-k, nucleus), with noise hashed from each sequence's own seed."""

import keras
from keras import ops

from keras_attention.decoding._loop import _decode, decoding_length, first_argmax
from keras_attention.utils import (
    END_ID,
    NEG_INF,
    START_ID,
    hash_uint32,
    uint32,
    uniform_from_bits,
)


def sample(
    model,
    inputs,
    max_decoding_length=None,
    temperature=1.0,
    top_k=None,
    top_p=None,
    seed=None,
    start_id=START_ID,
    end_id=END_ID,
    use_cache=True,
    *,
    max_new_tokens=None,
    max_length=None,
):
    """Samples each token from the softmax of the logits.

    Each sequence draws its samples from its own seed, the position and the
    token ids alone (a counter-based hash, then the Gumbel-max trick), so a
    sequence's tokens do not depend on the other sequences of the batch: a
    server can batch requests and still give each the answer it gets alone.

    Args:
        model, inputs, max_decoding_length, start_id, end_id, use_cache,
            max_new_tokens, max_length: as in `greedy_search`.
        temperature: float > 0, logits are divided by it (lower = greedier).
            Also a float tensor `[B]`, one per sequence, where a value <= 0
            (or NaN) decodes that sequence greedily; values are clipped to
            [1e-6, 1e6].
        top_k: optional int, sample only among the k most likely tokens.
            Also an int tensor `[B]`, where 0 means no limit.
        top_p: optional float in (0, 1], sample only among the smallest set
            of tokens whose probability adds up to at least p (nucleus).
            Also a float tensor `[B]`, where a value <= 0 or >= 1 means no
            limit.
        seed: int or `keras.random.SeedGenerator`, from which one seed per
            sequence is drawn (the same int gives the same samples), or an
            int tensor `[B]` of the sequences' own seeds.

    Returns:
        int32 ids, shaped as in `greedy_search`.
    """
    if not ops.is_tensor(temperature) and not temperature > 0:
        raise ValueError(f"`temperature` must be > 0. Received: temperature={temperature!r}")
    if not ops.is_tensor(top_k) and top_k is not None and not _is_positive_int(top_k):
        raise ValueError(f"`top_k` must be a positive integer. Received: top_k={top_k!r}")
    if not ops.is_tensor(top_p) and top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"`top_p` must be in (0, 1]. Received: top_p={top_p!r}")
    length = decoding_length(max_decoding_length, max_new_tokens, max_length)
    seeds = _sequence_seeds(seed, ops.shape(inputs)[0])  # [B]
    choose = sampling_choice(temperature, top_k, top_p, seeds)
    return _decode(model, inputs, length, start_id, end_id, use_cache, choose)


def sampling_choice(temperature, top_k, top_p, seeds):
    """The one-best loop's `choose(logits [b, V], position, row_ids [b])`
    that samples, as `sample` describes its arguments (each a Python
    value or a tensor `[B]`; `seeds` int `[B]`). A row whose temperature
    is <= 0 or whose `top_k` is 1 takes the most likely token, the first
    of equal ones (greedy search's choice)."""

    def choose(logits, position, row_ids):
        def own(value):  # an option given per sequence: the rows' own values
            return ops.take(value, row_ids, axis=0) if ops.is_tensor(value) else value

        temperatures = _per_sequence(own(temperature), "float32")
        sampling = temperatures > 0  # False (NaN too): greedy
        if top_k is not None:
            sampling &= _per_sequence(own(top_k), "int32") != 1
        # (Within [1e-6, 1e6], so the scaled logits stay finite.)
        scaled = logits / ops.where(sampling, ops.clip(temperatures, 1e-6, 1e6), 1.0)
        filtered = filter_logits(scaled, top_k=own(top_k), top_p=own(top_p))
        noise = gumbel_noise(own(seeds), position, ops.shape(logits)[-1])
        return ops.where(sampling[:, 0], first_argmax(filtered + noise), first_argmax(logits))

    return choose


def filter_logits(logits, top_k=None, top_p=None):
    """Sets the logits outside the top-k / nucleus (top-p) set to NEG_INF.

    `top_k` and `top_p` are Python numbers, or tensors `[B]` with one value
    per row (0 means no limit; for `top_p` so does >= 1)."""
    vocabulary_size = ops.shape(logits)[-1]
    if top_k is not None or top_p is not None:
        sorted_logits = ops.top_k(logits, vocabulary_size)[0]  # [B, V], descending
    if top_k is not None:
        top_k = _per_sequence(top_k, "int32")
        top_k = ops.where((top_k > 0) & (top_k < vocabulary_size), top_k, vocabulary_size)
        kth_largest = ops.take_along_axis(sorted_logits, top_k - 1, axis=1)  # [B, 1]
        logits = ops.where(logits < kth_largest, NEG_INF, logits)
        sorted_logits = ops.where(sorted_logits < kth_largest, NEG_INF, sorted_logits)
    if top_p is not None:
        top_p = _per_sequence(top_p, "float32")
        top_p = ops.where((top_p > 0) & (top_p < 1), top_p, 1.0)
        probabilities = ops.softmax(sorted_logits, axis=-1)
        before = ops.cumsum(probabilities, axis=-1) - probabilities  # mass above each token
        kept = before < top_p  # always keeps the most likely token
        smallest_kept = ops.min(ops.where(kept, sorted_logits, -NEG_INF), axis=-1, keepdims=True)
        logits = ops.where(logits < smallest_kept, NEG_INF, logits)
    return logits


def gumbel_noise(seeds, position, vocabulary_size):
    """Gumbel(0, 1) noise `[B, V]` that is a function of each row's seed
    `[B]`, the position and the token id only: `argmax(logits + noise)` is a
    sample of `softmax(logits)` (the Gumbel-max trick).

    The uniform numbers come from an integer hash (uint32 multiply, shift,
    xor: the same bits on every backend), not from a random generator's
    state, so nothing but these three numbers decides them."""
    tokens = ops.cast(ops.arange(vocabulary_size), "uint32")
    row = hash_uint32(ops.bitwise_xor(ops.cast(seeds, "uint32"), uint32(0x9E3779B9)))
    row = hash_uint32(ops.bitwise_xor(row, ops.cast(position, "uint32")))  # [B]
    uniform = uniform_from_bits(hash_uint32(ops.bitwise_xor(row[:, None], tokens[None, :])))
    return -ops.log(-ops.log(uniform))  # [B, V]


def _sequence_seeds(seed, batch_size):
    """One seed per sequence `[B]`: the given tensor, or drawn from an int
    or a `SeedGenerator`."""
    if ops.is_tensor(seed) and len(seed.shape) == 1:
        return seed
    generator = (
        seed if isinstance(seed, keras.random.SeedGenerator) else keras.random.SeedGenerator(seed)
    )
    return keras.random.randint((batch_size,), 0, 2**31 - 1, dtype="int32", seed=generator)


def _per_sequence(value, dtype):
    """A Python number as it is; a tensor `[B]` as a column `[B, 1]`, to
    broadcast over the vocabulary."""
    if ops.is_tensor(value):
        return ops.cast(ops.reshape(value, (-1, 1)), dtype)
    return ops.convert_to_tensor([[value]], dtype)


def _is_positive_int(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1
