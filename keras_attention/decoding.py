"""Batched decoding for every model of the zoo: greedy, beam search, sampling.

The loops talk to a model only through the `Decodable` protocol below, so a
new model decodes (and exports) by implementing it.

The loops are `keras.ops.while_loop`s over fixed-size buffers, so they trace
into a `tf.function` (and compile with XLA) and export in a SavedModel. They
stop early once every sequence of the batch has produced the end token.

Token ids: 0 is padding (never generated), `start_id` (default 1) starts a
target, `end_id` (default 2) ends it.
"""

from typing import Protocol

import keras
from keras import ops, tree

from keras_attention.utils import (
    END_ID,
    NEG_INF,
    PAD_ID,
    START_ID,
    check_positive_int,
    hash_uint32,
    uint32,
    uniform_from_bits,
)


class Decodable(Protocol):
    """What a model provides to be decoded (`Transformer`, `Seq2SeqAttention`
    and `TransformerLM` do).

    `is_decoder_only`: True for a language model, whose inputs are prompts
    (`[B, P]`, right-padded with 0) that decoding continues, returning each
    prompt with its continuation. False for an encoder-decoder, whose inputs
    are source ids; decoding starts from `start_id` and returns only what
    it generated.
    """

    is_decoder_only: bool

    def decoding_start(self, inputs, max_length, use_cache=True):
        """Runs what is computed once (the encoder, the cross-attention keys
        and values) and returns the state the loop carries (KV caches, RNN
        states): a structure of tensors, each batch first."""

    def decoding_step(self, token_ids, index, state):
        """Float32 logits `[B, V]` for the token after position `index` of
        `token_ids [B, max_length]`, and the new state. With a cache only
        position `index` is run."""


def greedy_search(model, inputs, max_length, start_id=START_ID, end_id=END_ID, use_cache=True):
    """Picks the most likely token at every step.

    Args:
        model: a zoo model (`Transformer`, `Seq2SeqAttention`, `TransformerLM`).
        inputs: source ids `[B, S]`, or for a `TransformerLM` prompt ids
            `[B, P]` (right-padded with 0).
        max_length: int, the most tokens generated per sequence; also an
            int32 tensor, a scalar or `[B]` (a limit per sequence).
        start_id, end_id: int, the start and end token ids.
        use_cache: bool, run only the newest position each step (KV cache,
            RNN state) instead of the whole prefix. Same tokens, less work.

    Returns:
        int32 ids: `[B, max_length]` generated tokens for encoder-decoders,
        `[B, P + max_length]` prompt and completion for language models
        (the largest `max_length`, when there is one per sequence); padded
        with 0 after the end token.
    """
    return _decode(
        model,
        inputs,
        max_length,
        start_id,
        end_id,
        use_cache,
        choose=lambda logits, position: ops.argmax(logits, axis=-1),
    )


def sample(
    model,
    inputs,
    max_length,
    temperature=1.0,
    top_k=None,
    top_p=None,
    seed=None,
    start_id=START_ID,
    end_id=END_ID,
    use_cache=True,
):
    """Samples each token from the softmax of the logits.

    Each sequence draws its samples from its own seed, the position and the
    token ids alone (a counter-based hash, then the Gumbel-max trick), so a
    sequence's tokens do not depend on the other sequences of the batch: a
    server can batch requests and still give each the answer it gets alone.

    Args:
        model, inputs, max_length, start_id, end_id, use_cache: as in
            `greedy_search`.
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
    seeds = _sequence_seeds(seed, ops.shape(inputs)[0])  # [B]
    temperature = _per_sequence(temperature, "float32")
    sampling = temperature > 0  # False (NaN too): greedy

    def choose(logits, position):
        # (Within [1e-6, 1e6], so the scaled logits stay finite.)
        scaled = logits / ops.where(sampling, ops.clip(temperature, 1e-6, 1e6), 1.0)
        filtered = filter_logits(scaled, top_k=top_k, top_p=top_p)
        sampled = ops.argmax(filtered + gumbel_noise(seeds, position, ops.shape(logits)[-1]), -1)
        return ops.where(sampling[:, 0], sampled, ops.argmax(logits, axis=-1))

    return _decode(model, inputs, max_length, start_id, end_id, use_cache, choose)


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


def beam_search(
    model,
    inputs,
    max_length,
    beam_size=4,
    length_penalty=0.6,
    start_id=START_ID,
    end_id=END_ID,
    use_cache=True,
):
    """Keeps the `beam_size` best partial sequences at every step.

    Sequences are ranked by log-probability divided by the length penalty of
    Wu et al. 2016, `lp(Y) = ((5 + |Y|) / 6) ** length_penalty`; a finished
    sequence keeps its score while the others grow. The search stops when
    every beam of every batch item has ended.

    Args:
        model, inputs, max_length, start_id, end_id, use_cache: as in
            `greedy_search`.
        beam_size: int, the number of beams. 1 gives greedy search. In a TF
            graph also a scalar int32 tensor.
        length_penalty: float alpha; 0 ranks by raw log-probability.

    Returns:
        `(ids, scores)`: the best sequence of each batch item, shaped as in
        `greedy_search`, and its length-normalised log-probability `[B]`.
    """
    _check_positive_int("beam_size", beam_size)
    room, row_limit = _limits(max_length)
    prompt, is_lm = _prompt(model, inputs, start_id)
    batch_size, prompt_width = ops.shape(prompt)[0], ops.shape(prompt)[1]
    K = beam_size
    total_length = prompt_width + room

    # Every batch item becomes K rows: [B * K, ...], beams of an item adjacent.
    def beams(x):
        return ops.repeat(x, K, axis=0)

    state = model.decoding_start(beams(inputs), total_length, use_cache=use_cache)
    tokens = ops.pad(beams(prompt), [[0, 0], [0, room]])  # [B*K, L]
    prompt_length = ops.reshape(beams(_lengths(prompt)), (batch_size, K))  # [B, K]
    end_length = prompt_length + (row_limit if _is_scalar(row_limit) else row_limit[:, None])
    # Only the first beam is live at the start, so the K beams differ.
    first_beam = ops.where(ops.arange(K) == 0, 0.0, NEG_INF)  # [K]
    log_probs = ops.zeros((batch_size, K)) + first_beam[None, :]
    finished = ops.zeros((batch_size, K), "bool")
    lengths = ops.zeros((batch_size, K), "int32")  # generated tokens per beam

    def penalty(length):
        return ((5.0 + ops.cast(length, "float32")) / 6.0) ** length_penalty

    def step(index, tokens, log_probs, finished, lengths, state):
        logits, state = model.decoding_step(tokens, index, state)
        vocabulary_size = ops.shape(logits)[-1]
        step_log_probs = ops.reshape(
            ops.log_softmax(_no_padding(logits)), (batch_size, K, vocabulary_size)
        )
        position = index + 1
        forced = position < prompt_length  # [B, K]: still inside the prompt
        frozen = finished | (position >= end_length)
        vocabulary = ops.arange(vocabulary_size)
        prompt_token = ops.reshape(ops.take(tokens, position, axis=1), (batch_size, K, 1))
        # A frozen beam can only add padding, for free; a prompt position only
        # its prompt token, for free.
        only_padding = ops.where(vocabulary == PAD_ID, 0.0, NEG_INF)
        only_prompt = ops.where(vocabulary == prompt_token, 0.0, NEG_INF)
        step_log_probs = ops.where(frozen[..., None], only_padding, step_log_probs)
        step_log_probs = ops.where(forced[..., None], only_prompt, step_log_probs)

        candidates = log_probs[..., None] + step_log_probs  # [B, K, V]
        new_lengths = ops.where(frozen | forced, lengths, lengths + 1)
        ranked = candidates / penalty(new_lengths)[..., None]
        _, best = ops.top_k(ops.reshape(ranked, (batch_size, K * vocabulary_size)), K)
        beam, token = best // vocabulary_size, best % vocabulary_size  # [B, K]

        def follow(x):  # per-beam values of the beams that were kept
            return ops.take_along_axis(x, beam, axis=1)

        log_probs = ops.take_along_axis(
            ops.reshape(candidates, (batch_size, K * vocabulary_size)), best, axis=1
        )
        finished = follow(frozen) | ((token == end_id) & ~follow(forced))
        lengths = follow(new_lengths)
        rows = ops.reshape(beam + ops.arange(batch_size)[:, None] * K, (-1,))  # [B*K]
        tokens = ops.take(tokens, rows, axis=0)
        tokens = ops.slice_update(
            tokens, (0, position), ops.cast(ops.reshape(token, (-1, 1)), tokens.dtype)
        )
        state = tree.map_structure(lambda x: ops.take(x, rows, axis=0), state)
        return index + 1, tokens, log_probs, finished, lengths, state

    def not_done(index, tokens, log_probs, finished, lengths, state):
        frozen = finished | (index + 1 >= end_length)
        return (index < total_length - 1) & ~ops.all(frozen)

    _, tokens, log_probs, _, lengths, _ = ops.while_loop(
        not_done, step, (0, tokens, log_probs, finished, lengths, state)
    )
    scores = log_probs / penalty(lengths)  # [B, K]
    best = ops.argmax(scores, axis=-1)  # [B]
    rows = best + ops.arange(batch_size) * K
    tokens = ops.take(tokens, rows, axis=0)
    best_scores = ops.take_along_axis(scores, best[:, None], axis=1)[:, 0]
    return _strip_start(tokens, is_lm), best_scores


# --- Shared by greedy search and sampling ---


def _decode(model, inputs, max_length, start_id, end_id, use_cache, choose):
    """The one-best loop: `choose(logits [B, V], position) -> ids [B]` picks
    the token at each position."""
    room, row_limit = _limits(max_length)
    prompt, is_lm = _prompt(model, inputs, start_id)
    batch_size, prompt_width = ops.shape(prompt)[0], ops.shape(prompt)[1]
    total_length = prompt_width + room
    state = model.decoding_start(inputs, total_length, use_cache=use_cache)
    tokens = ops.pad(prompt, [[0, 0], [0, room]])  # [B, L]
    prompt_length = _lengths(prompt)  # [B]
    end_length = prompt_length + row_limit  # [B]
    finished = ops.zeros((batch_size,), "bool")

    def step(index, tokens, finished, state):
        logits, state = model.decoding_step(tokens, index, state)
        position = index + 1
        forced = position < prompt_length
        frozen = finished | (position >= end_length)
        chosen = ops.cast(choose(_no_padding(logits), position), tokens.dtype)
        token = ops.where(
            forced, ops.take(tokens, position, axis=1), ops.where(frozen, PAD_ID, chosen)
        )
        finished = frozen | ((token == end_id) & ~forced)
        tokens = ops.slice_update(tokens, (0, position), token[:, None])
        return index + 1, tokens, finished, state

    def not_done(index, tokens, finished, state):
        frozen = finished | (index + 1 >= end_length)
        return (index < total_length - 1) & ~ops.all(frozen)

    _, tokens, _, _ = ops.while_loop(not_done, step, (0, tokens, finished, state))
    return _strip_start(tokens, is_lm)


def _prompt(model, inputs, start_id):
    """The tokens each sequence starts from: the prompt for a language model,
    the start token for an encoder-decoder."""
    if model.is_decoder_only:
        return ops.cast(inputs, "int32"), True
    return ops.full((ops.shape(inputs)[0], 1), start_id, "int32"), False


def _lengths(prompt):
    return ops.sum(ops.cast(ops.not_equal(prompt, PAD_ID), "int32"), axis=1)


def _strip_start(tokens, is_lm):
    return tokens if is_lm else tokens[:, 1:]


def _no_padding(logits):
    """Padding is never generated."""
    is_padding = ops.arange(ops.shape(logits)[-1]) == PAD_ID
    return ops.where(is_padding, NEG_INF, logits)


def _check_positive_int(name, value, ranks=(0,)):
    """A Python int must be >= 1. An integer tensor of one of `ranks` passes
    unchecked: a TF graph (such as an exported signature) may pass one, and
    clamps it."""
    if ops.is_tensor(value) and "int" in str(value.dtype) and len(value.shape) in ranks:
        return
    check_positive_int(name, value)


def _is_scalar(value):
    return not ops.is_tensor(value) or len(value.shape) == 0


def _limits(max_length):
    """`(room, row_limit)`: how many new tokens the buffer holds, and each
    row's limit, a scalar or (with one `max_length` per row) `[B]`."""
    _check_positive_int("max_length", max_length, ranks=(0, 1))
    if _is_scalar(max_length):
        return max_length, max_length
    # (At least 1: the largest of an empty batch's limits is the smallest int.)
    return ops.maximum(ops.max(max_length), 1), ops.cast(max_length, "int32")
