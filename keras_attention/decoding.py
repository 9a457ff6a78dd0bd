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
    slice_update,
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

    `suppressed_ids` (optional): token ids never generated, which still
    count in each step's softmax (a converted Marian model's `<pad>`).
    """

    is_decoder_only: bool

    def decoding_start(self, inputs, max_length, use_cache=True):
        """Runs what is computed once (the encoder, the cross-attention keys
        and values) and returns the state the loop carries (KV caches, RNN
        states): a dict of tensor structures, each tensor batch first. What
        is fixed for a sentence (the encoder's output, the source mask, the
        cross-attention keys and values) goes under `"context"`: beam
        search computes it once per sentence and never reorders it."""

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
    return _decode(model, inputs, max_length, start_id, end_id, use_cache, _most_likely)


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

    def choose(logits, position, row_ids):
        def own(value):  # an option given per sequence: the rows' own values
            return ops.take(value, row_ids, axis=0) if ops.is_tensor(value) else value

        temperatures = _per_sequence(own(temperature), "float32")
        sampling = temperatures > 0  # False (NaN too): greedy
        # (Within [1e-6, 1e6], so the scaled logits stay finite.)
        scaled = logits / ops.where(sampling, ops.clip(temperatures, 1e-6, 1e6), 1.0)
        filtered = filter_logits(scaled, top_k=own(top_k), top_p=own(top_p))
        noise = gumbel_noise(own(seeds), position, ops.shape(logits)[-1])
        return ops.where(sampling[:, 0], first_argmax(filtered + noise), first_argmax(logits))

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
    return_all_beams=False,
):
    """Extends the `beam_size` best unfinished sequences at every step, and
    keeps the best finished ones aside until none of the unfinished can
    beat them.

    Sequences are ranked by log-probability divided by the length penalty of
    Wu et al. 2016, `lp(Y) = ((5 + |Y|) / 6) ** length_penalty`, where
    `|Y|` counts the generated tokens, the end token included. At each step
    the `2 * beam_size` best extensions are scored: those that end (the end
    token, or the row's last allowed position) join the finished
    hypotheses, which keep their `beam_size` best; the best `beam_size`
    others stay live. A finished hypothesis is never pushed out by a live
    one that looks better for a step and ends worse. A row is done when no
    live hypothesis can reach its best finished score (log-probabilities
    only fall, so the bound is a live one's score under the most favourable
    length penalty still possible), or at its `max_length`.

    Args:
        model, inputs, max_length, start_id, end_id, use_cache: as in
            `greedy_search`.
        beam_size: int, the number of live beams. 1 is greedy search (as
            in CTranslate2 and OpenNMT). In a TF graph also a scalar int32
            tensor.
        length_penalty: float alpha; 0 ranks by raw log-probability.
        return_all_beams: bool, return every finished hypothesis kept, not
            only the best (a Python int `beam_size` only).

    Returns:
        `(ids, scores)`: the best finished sequence of each batch item,
        shaped as in `greedy_search`, and its length-normalised
        log-probability `[B]`. With `return_all_beams`, the `beam_size`
        finished ones, best first: ids `[B, K, ...]` and scores `[B, K]`
        (a row with fewer than K finished scores the rest `NEG_INF`).
    """
    _check_positive_int("beam_size", beam_size)
    if return_all_beams and ops.is_tensor(beam_size):
        raise ValueError("return_all_beams=True needs a Python int beam_size, not a tensor")

    def greedy():
        ids, scores = _decode(
            model, inputs, max_length, start_id, end_id, use_cache, _most_likely, length_penalty
        )
        return (ids[:, None], scores[:, None]) if return_all_beams else (ids, scores)

    def beams():
        return _beam_search(
            model,
            inputs,
            max_length,
            beam_size,
            length_penalty,
            start_id,
            end_id,
            use_cache,
            return_all_beams,
        )

    if not ops.is_tensor(beam_size):
        return greedy() if beam_size == 1 else beams()
    return ops.cond(beam_size == 1, greedy, beams)


def _beam_search(
    model, inputs, max_length, beam_size, length_penalty, start_id, end_id, use_cache, every=False
):
    room, row_limit = _limits(max_length)
    prompt, is_lm = _prompt(model, inputs, start_id)
    batch_size, prompt_width = ops.shape(prompt)[0], ops.shape(prompt)[1]
    K = beam_size
    total_length = prompt_width + room

    # Every batch item becomes K rows: [B * K, ...], beams of an item
    # adjacent. The encoder runs once per item; its K rows are copies.
    state = model.decoding_start(inputs, total_length, use_cache=use_cache)
    state = tree.map_structure(lambda x: ops.repeat(x, K, axis=0), state)
    live_tokens = ops.pad(ops.repeat(prompt, K, axis=0), [[0, 0], [0, room]])  # [B*K, L]
    prompt_length = _lengths(prompt)[:, None]  # [B, 1]
    # Only the first beam is live at the start, so the K beams differ.
    first_beam = ops.where(ops.arange(K) == 0, 0.0, NEG_INF)  # [K]
    rows = {
        "prompt_length": prompt_length,
        # Positions before it may be written.
        "end_length": prompt_length + (row_limit if _is_scalar(row_limit) else row_limit[:, None]),
        "live_log_probs": ops.zeros((batch_size, K)) + first_beam[None, :],
        "finished_tokens": ops.zeros((batch_size, K, total_length), "int32"),
        "finished_scores": ops.full((batch_size, K), NEG_INF),
    }

    def penalty(length):
        return _length_penalty(length, length_penalty)

    suppressed = bool(getattr(model, "suppressed_ids", None))

    def step(index, rows, hypotheses, row_ids):
        prompt_length, end_length = rows["prompt_length"], rows["end_length"]  # [B, 1]
        live_tokens = hypotheses["live_tokens"]
        logits, state = model.decoding_step(live_tokens, index, hypotheses["state"])
        batch_size, vocabulary_size = ops.shape(prompt_length)[0], ops.shape(logits)[-1]
        row_start = ops.arange(batch_size)[:, None]  # [B, 1]
        logits = _no_padding(logits)
        if suppressed:  # log-probabilities over every token, then the suppressed ones out
            logits = _never_generated(model, ops.log_softmax(logits))
        logits = ops.reshape(logits, (batch_size, K, vocabulary_size))
        position = index + 1
        forced = position < prompt_length  # [B, 1]: still inside the prompt
        full = position >= end_length  # [B, 1]: no room left (a limit of 0)
        vocabulary = ops.arange(vocabulary_size)
        prompt_token = ops.reshape(ops.take(live_tokens, position, axis=1), (batch_size, K, 1))
        # A full row can only add padding, for free; a prompt position only
        # its prompt token, for free (log_softmax gives them 0, the rest NEG_INF).
        only_padding = ops.where(vocabulary == PAD_ID, 0.0, NEG_INF)
        only_prompt = ops.where(vocabulary == prompt_token, 0.0, NEG_INF)
        logits = ops.where(full[..., None], only_padding, logits)
        logits = ops.where(forced[..., None], only_prompt, logits)

        # The 2K best extensions: at most K of them end with the end token,
        # so at least K stay live.
        log_probs, best = best_extensions(
            rows["live_log_probs"], logits, 2 * K, normalized=suppressed
        )  # [B, 2K]
        beam, token = best // vocabulary_size, best % vocabulary_size
        source_rows = ops.reshape(beam + row_start * K, (-1,))  # [B*2K]
        tokens = slice_update(
            ops.take(live_tokens, source_rows, axis=0),
            (0, position),
            ops.cast(ops.reshape(token, (-1, 1)), live_tokens.dtype),
        )  # [B*2K, L]
        ends = (position + 1 >= end_length) | full | ((token == end_id) & ~forced)  # [B, 2K]

        # Finished: the K best of those kept so far and those ending now.
        length = ops.minimum(position + 1, end_length) - prompt_length  # [B, 1]
        ending_scores = ops.where(ends, log_probs / penalty(length), NEG_INF)
        finished_scores, kept = ops.top_k(
            ops.concatenate([rows["finished_scores"], ending_scores], axis=1), K
        )  # [B, K], indices into [B, 3K]; ties keep the older
        every_finished = ops.concatenate(
            [rows["finished_tokens"], ops.reshape(tokens, (batch_size, 2 * K, total_length))],
            axis=1,
        )
        finished_tokens = ops.take_along_axis(every_finished, kept[..., None], axis=1)

        # Live: the K best of those that did not end.
        live_log_probs, alive = ops.top_k(ops.where(ends, NEG_INF, log_probs), K)  # [B, K]
        live_tokens = ops.take(tokens, ops.reshape(alive + row_start * 2 * K, (-1,)), axis=0)
        source_rows = ops.reshape(ops.take_along_axis(beam, alive, axis=1) + row_start * K, (-1,))
        rows = rows | {
            "live_log_probs": live_log_probs,
            "finished_tokens": finished_tokens,
            "finished_scores": finished_scores,
        }
        hypotheses = {"live_tokens": live_tokens, "state": _reorder(state, source_rows)}
        return rows, hypotheses

    def done(index, rows):
        prompt_length, end_length = rows["prompt_length"], rows["end_length"]
        position = index + 1
        # A live hypothesis ends with between `shortest` and the row's limit
        # of generated tokens, and its log-probability can only fall: the
        # best it can score is its log-probability over the largest penalty.
        shortest = ops.maximum(position - prompt_length + 1, 1)
        largest_penalty = ops.maximum(penalty(shortest), penalty(end_length - prompt_length))
        best_live = ops.max(rows["live_log_probs"], axis=1, keepdims=True) / largest_penalty
        return ((rows["finished_scores"][:, :1] >= best_live) | (position >= end_length))[:, 0]

    rows = _loop_while_rows_remain(
        done,
        step,
        rows,
        {"live_tokens": live_tokens, "state": state},
        last_index=total_length - 1,
        group=K,
    )
    finished_tokens, finished_scores = rows["finished_tokens"], rows["finished_scores"]
    if every:  # [B, K, L] and [B, K], best first
        return (finished_tokens if is_lm else finished_tokens[:, :, 1:]), finished_scores
    return _strip_start(finished_tokens[:, 0], is_lm), finished_scores[:, 0]


def _reorder(state, rows):
    """Each live hypothesis takes the state of the beam it extends. A
    sentence's `"context"` is the same in all of its K rows, and a beam only
    ever extends a beam of its own sentence, so the context is left as it is
    (gathering it would copy the cross-attention keys and values every
    step, for nothing)."""
    return {
        key: value
        if key == "context"
        else tree.map_structure(lambda x: ops.take(x, rows, 0), value)
        for key, value in state.items()
    }


def _length_penalty(length, alpha):
    """Wu et al. 2016: `((5 + length) / 6) ** alpha`."""
    return ((5.0 + ops.cast(length, "float32")) / 6.0) ** alpha


# Rows of a batch finish at different steps (in batches of 32 test sentences
# of the English -> French run, the batch ran 2.5 to 3.8 times the row-steps
# its sentences needed alone). The loop drops finished rows from the batch:
# it runs on the whole batch until at most a quarter of the rows are
# unfinished, then on a quarter of the batch, then on a sixteenth. Each size
# is a loop of its own (static shapes, as XLA needs). Halving (2, 4, 8, 16)
# was 11% faster at beam 4, batch 32, but took longer to compile, and XLA's
# CPU compiler crashed on it in the JAX test run (`benchmarks/README.md`).
SHRINK_FACTORS = (4, 16)


def _loop_while_rows_remain(done, step, rows, hypotheses, last_index, group=1):
    """The decoding loop, over fewer rows as rows finish.

    Runs `rows, hypotheses = step(index, rows, hypotheses, row_ids)` for
    index = 0, 1, ... while `index < last_index` and a row is not
    `done(index, rows)` `[b]`. A row that is done keeps its values from
    then on, so each row ends as it would in a batch of its own.

    Args:
        rows: a dict of tensors `[B, ...]`, one entry per batch item.
        hypotheses: a structure of tensors `[B * group, ...]`: `group`
            consecutive entries per batch item (a beam's K), such as the
            decoder's state.
        row_ids: (passed to `step`) int32 `[b]`, the batch item that each of
            the current rows is (for options given per batch item).

    Returns:
        `rows` in the batch's order, each row as its last step left it.
    """
    batch_size = ops.shape(tree.flatten(rows)[0])[0]

    def remaining(index, rows):
        return ops.sum(ops.cast(~done(index, rows), "int32"))

    def run_until(next_size, index, rows, hypotheses, row_ids):
        """Steps while more than `next_size` rows are unfinished."""

        def condition(index, rows, hypotheses):
            return (index < last_index) & (remaining(index, rows) > next_size)

        def body(index, rows, hypotheses):
            new_rows, hypotheses = step(index, rows, hypotheses, row_ids)
            # A row that is done keeps what it has, as it would alone.
            finished = done(index, rows)
            rows = {key: _where_rows(finished, x, new_rows[key]) for key, x in rows.items()}
            return index + 1, rows, hypotheses

        return ops.while_loop(condition, body, (index, rows, hypotheses))

    def keep_unfinished(size, index, rows, hypotheses, row_ids):
        """The unfinished rows (at most `size`), then finished ones to fill
        a batch of `size`: those are copies, marked so."""
        picked = ops.argsort(ops.cast(done(index, rows), "int32"))[:size]
        entries = ops.reshape(picked[:, None] * group + ops.arange(group)[None, :], (-1,))
        return (
            {key: ops.take(x, picked, axis=0) for key, x in rows.items()},
            tree.map_structure(lambda x: ops.take(x, entries, axis=0), hypotheses),
            ops.take(row_ids, picked, axis=0),
            ops.arange(size) >= remaining(index, rows),
        )

    def write(final, rows, row_ids, is_copy):
        slots = ops.where(is_copy, batch_size, row_ids)[:, None]
        return {key: ops.scatter_update(final[key], slots, rows[key]) for key in rows}

    # Each row's final values, plus one row where the copies are written.
    final = {key: ops.pad(x, [[0, 1]] + [[0, 0]] * (len(x.shape) - 1)) for key, x in rows.items()}
    index, row_ids = 0, ops.arange(batch_size, dtype="int32")
    is_copy = ops.zeros((batch_size,), "bool")
    for next_size in _shrunk_sizes(batch_size):
        index, rows, hypotheses = run_until(next_size, index, rows, hypotheses, row_ids)
        final = write(final, rows, row_ids, is_copy)
        rows, hypotheses, row_ids, is_copy = keep_unfinished(
            next_size, index, rows, hypotheses, row_ids
        )
    index, rows, hypotheses = run_until(0, index, rows, hypotheses, row_ids)
    final = write(final, rows, row_ids, is_copy)
    return {key: x[:-1] for key, x in final.items()}


def _shrunk_sizes(batch_size):
    """The smaller batch sizes the loop moves to: a quarter, a sixteenth.
    When the batch size is known and a size would be no smaller than the
    one before (a batch of 4 rows or fewer: 1, then 1 again), that loop is
    left out: it would never run a step."""
    sizes = []
    for factor in SHRINK_FACTORS:
        size = (batch_size + factor - 1) // factor
        if isinstance(size, int) and size >= (sizes[-1] if sizes else batch_size):
            continue
        sizes.append(size)
    return sizes


def _where_rows(condition, x, y):
    """`x` in the rows where `condition` `[B]` holds, `y` in the others."""
    return ops.where(ops.reshape(condition, (-1,) + (1,) * (len(x.shape) - 1)), x, y)


# --- Shared by greedy search and sampling ---


def _decode(model, inputs, max_length, start_id, end_id, use_cache, choose, length_penalty=None):
    """The one-best loop: `choose(logits [b, V], position, row_ids [b]) ->
    ids [b]` picks the token at each position (`row_ids`: which batch item
    each row is). With a `length_penalty` it also returns each sequence's
    log-probability over that penalty `[B]`, as beam search does."""
    room, row_limit = _limits(max_length)
    prompt, is_lm = _prompt(model, inputs, start_id)
    batch_size, prompt_width = ops.shape(prompt)[0], ops.shape(prompt)[1]
    total_length = prompt_width + room
    state = model.decoding_start(inputs, total_length, use_cache=use_cache)
    prompt_length = _lengths(prompt)  # [B]
    rows = {
        "tokens": ops.pad(prompt, [[0, 0], [0, room]]),  # [B, L]
        "prompt_length": prompt_length,
        "end_length": prompt_length + row_limit,  # [B]
        "finished": ops.zeros((batch_size,), "bool"),
        "log_prob": ops.zeros((batch_size,)),  # of the generated tokens, when scored
    }

    def step(index, rows, state, row_ids):
        tokens, prompt_length, end_length = (
            rows["tokens"],
            rows["prompt_length"],
            rows["end_length"],
        )
        logits, state = model.decoding_step(tokens, index, state)
        logits = _no_padding(logits)
        position = index + 1
        forced = position < prompt_length
        frozen = rows["finished"] | (position >= end_length)
        chosen = ops.cast(choose(_never_generated(model, logits), position, row_ids), tokens.dtype)
        token = ops.where(
            forced, ops.take(tokens, position, axis=1), ops.where(frozen, PAD_ID, chosen)
        )
        log_prob = rows["log_prob"]
        if length_penalty is not None:
            token_log_prob = ops.take_along_axis(
                ops.log_softmax(logits), ops.cast(token[:, None], "int32"), axis=1
            )[:, 0]
            log_prob = log_prob + ops.where(forced | frozen, 0.0, token_log_prob)
        return rows | {
            "tokens": slice_update(tokens, (0, position), token[:, None]),
            "finished": frozen | ((token == end_id) & ~forced),
            "log_prob": log_prob,
        }, state

    def done(index, rows):
        return rows["finished"] | (index + 1 >= rows["end_length"])

    rows = _loop_while_rows_remain(done, step, rows, state, last_index=total_length - 1)
    tokens = rows["tokens"]
    if length_penalty is None:
        return _strip_start(tokens, is_lm)
    generated = _lengths(tokens) - prompt_length
    return _strip_start(tokens, is_lm), rows["log_prob"] / _length_penalty(
        generated, length_penalty
    )


def _most_likely(logits, position, row_ids):
    """Greedy search's choice: the most likely token `[B]`."""
    return first_argmax(logits)


def first_argmax(x):
    """`ops.argmax(x, axis=-1)` (the first index of the largest value), as
    two plain reductions: the largest value, then the smallest index that
    holds it. XLA's CPU argmax (one reduction of value-index pairs) took
    3.4x as long over `[128, 8000]` logits (`benchmarks/README.md`)."""
    largest = ops.max(x, axis=-1, keepdims=True)
    size = ops.shape(x)[-1]
    first = ops.min(ops.where(x == largest, ops.arange(size, dtype="int32"), size), axis=-1)
    return ops.minimum(first, size - 1)  # (all NaN: no index holds the largest)


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


def _never_generated(model, scores):
    """`scores [..., V]` with the model's `suppressed_ids` at NEG_INF: tokens
    it never generates that still count in each step's softmax (Hugging
    Face's `bad_words_ids`, such as Marian's `<pad>`)."""
    suppressed = getattr(model, "suppressed_ids", None)
    if not suppressed:
        return scores
    vocabulary = ops.arange(ops.shape(scores)[-1])
    is_suppressed = ops.any(vocabulary[:, None] == ops.array(list(suppressed))[None, :], axis=1)
    return ops.where(is_suppressed, NEG_INF, scores)


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


def best_extensions(log_probs, logits, k, block_size=64, normalized=False):
    """The k best extensions of K hypotheses by one token each: `ops.top_k`
    over the `[B, K * V]` candidates `log_probs + log_softmax(logits)`,
    the same values and indices (ties to the lower index), without making
    them.

    Args:
        log_probs: `[B, K]`, each hypothesis's log-probability so far.
        logits: `[B, K, V]`, the next token's logits for each hypothesis.
        k: int, how many extensions to keep.
        block_size: int, the vocabulary is read in blocks of this many.
        normalized: bool, `logits` are log-probabilities already (not
            normalised again).

    Returns:
        `(values [B, k], indices [B, k])`, best first; index `j * V + v`
        extends hypothesis j with token v.

    Beam search takes the 2K best of K x V extensions at every step. Made
    whole and given to `top_k`, they cost more than the decoder step of the
    `tiny` model on a CPU (`benchmarks/README.md`). Here the logits are read
    twice (each block's largest, then the softmax's sum) and nothing of
    their size is written: the k blocks with the best largest candidate are
    found first, and the top k taken among their candidates alone. The k
    best candidates lie in those blocks: one outside them is at most the
    k-th best block's largest, and those k largest are k candidates at
    least as good.
    """
    batch_size, K, V = ops.shape(logits)[0], ops.shape(logits)[1], logits.shape[2]
    num_blocks = -(-V // block_size)
    # Past the vocabulary's end: never chosen over a real token.
    padded = ops.pad(
        logits, [[0, 0], [0, 0], [0, num_blocks * block_size - V]], constant_values=-float("inf")
    )
    blocks = ops.reshape(padded, (batch_size, K, num_blocks, block_size))
    block_largest = ops.max(blocks, axis=-1)  # [B, K, blocks]
    largest = ops.max(block_largest, axis=-1, keepdims=True)  # [B, K, 1]
    log_sum = ops.log(ops.sum(ops.exp(logits - largest), axis=-1, keepdims=True))  # [B, K, 1]
    if normalized:
        largest = log_sum = ops.zeros_like(largest)

    def score(x, beam_largest, beam_log_sum, beam_log_probs):
        """log_softmax, as XLA computes it, plus the hypothesis's log-probability."""
        return ((x - beam_largest) - beam_log_sum) + beam_log_probs

    if ops.is_tensor(k) or num_blocks <= 2 * k:  # few blocks (or a beam size in a tensor)
        candidates = score(logits, largest, log_sum, log_probs[..., None])
        return ops.top_k(ops.reshape(candidates, (batch_size, K * V)), k)
    block_scores = score(block_largest, largest, log_sum, log_probs[..., None])
    _, picked = ops.top_k(ops.reshape(block_scores, (batch_size, K * num_blocks)), k)
    picked = ops.sort(picked, axis=-1)  # in index order, so ties go to the lower index
    beam, block = picked // num_blocks, picked % num_blocks  # [B, k]
    flat_blocks = ops.reshape(blocks, (batch_size, K * num_blocks, block_size))
    chosen = ops.take_along_axis(flat_blocks, picked[..., None], axis=1)  # [B, k, block]

    def of_beam(x):  # [B, K, 1] -> each chosen block's [B, k, 1]
        return ops.take_along_axis(x[..., 0], beam, axis=1)[..., None]

    candidates = score(chosen, of_beam(largest), of_beam(log_sum), of_beam(log_probs[..., None]))
    values, within = ops.top_k(ops.reshape(candidates, (batch_size, k * block_size)), k)
    at = within // block_size
    token = ops.take_along_axis(block, at, axis=1) * block_size + within % block_size
    return values, ops.take_along_axis(beam, at, axis=1) * V + token
