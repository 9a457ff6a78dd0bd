"""Beam search, and `best_extensions`, the top-k of its every step."""

from keras import ops, tree

from keras_attention.decoding._loop import (
    Scoring,
    _check_positive_int,
    _decode,
    _is_scalar,
    _lengths,
    _limits,
    _loop_while_rows_remain,
    _most_likely,
    _never_generated,
    _no_padding,
    _prompt,
    decoding_length,
)
from keras_attention.utils import END_ID, NEG_INF, PAD_ID, START_ID, slice_update

# beam_search's length penalty when none is given (see its docstring).
LENGTH_PENALTY = 0.6


def beam_search(
    model,
    inputs,
    max_decoding_length=None,
    beam_size=4,
    length_penalty=LENGTH_PENALTY,
    start_id=START_ID,
    end_id=END_ID,
    use_cache=True,
    return_all_beams=False,
    *,
    max_new_tokens=None,
    max_length=None,
):
    """Extends the `beam_size` best unfinished sequences at every step, and
    keeps the best finished ones aside until none of the unfinished can
    beat them.

    Sequences are ranked by log-probability divided by
    `n ** length_penalty`, CTranslate2's and Hugging Face's length penalty,
    where n counts the generated tokens, the end token included (not a
    language model's prompt). At each step the `2 * beam_size` best
    extensions are scored: those that end (the end token, or the row's
    last allowed position) join the finished hypotheses, which keep their
    `beam_size` best; the best `beam_size` others stay live. A finished
    hypothesis is never pushed out by a live one that looks better for a
    step and ends worse. A row is done when no live hypothesis can reach
    its best finished score (log-probabilities only fall, so the bound is
    a live one's score under the most favourable length penalty still
    possible), or at its `max_decoding_length`.

    Args:
        model, inputs, max_decoding_length, start_id, end_id, use_cache,
            max_new_tokens, max_length: as in `greedy_search`.
        beam_size: int, the number of live beams. 1 is greedy search (as
            in CTranslate2 and OpenNMT). In a TF graph also a scalar int32
            tensor.
        length_penalty: float alpha; 0 ranks by raw log-probability;
            None is the default. Default 0.6 rather than CTranslate2's and Hugging Face's 1: on
            the English-French run (beam 4), 1 lengthened translations and
            scored 0.3 to 1.1 BLEU less on the validation and test splits.
        return_all_beams: bool, return every finished hypothesis kept, not
            only the best (a Python int `beam_size` only).

    Returns:
        `(ids, scores)`: the best finished sequence of each batch item,
        shaped as in `greedy_search`, and its length-normalised
        log-probability `[B]`. With `return_all_beams`, the `beam_size`
        finished ones, best first: ids `[B, K, ...]` and scores `[B, K]`
        (a row with fewer than K finished scores the rest `NEG_INF`).
    """
    if length_penalty is None:
        length_penalty = LENGTH_PENALTY
    _check_positive_int("beam_size", beam_size)
    if return_all_beams and ops.is_tensor(beam_size):
        raise ValueError("return_all_beams=True needs a Python int beam_size, not a tensor")

    ids, scores = _search(
        model,
        inputs,
        decoding_length(max_decoding_length, max_new_tokens, max_length),
        beam_size,
        # n counts the generated tokens: a language model's prompt is not
        # its own (CTranslate2's `include_prompt_in_result=False`).
        Scoring(
            length_penalty,
            history_start=_lengths(ops.cast(inputs, "int32")) if model.is_decoder_only else 1,
        ),
        start_id,
        end_id,
        use_cache,
        best_only=not return_all_beams,
    )
    return ids, scores


def _search(
    model,
    inputs,
    max_length,
    beam_size,
    scoring,
    start_id,
    end_id,
    use_cache,
    target_prefix=None,
    best_only=False,
    with_cut=False,
    choose=_most_likely,
):
    """Greedy search for a beam of 1, beam search for more: the finished
    hypotheses `[B, N, ...]` and their scores `[B, N]`, best first (N:
    `scoring.num_hypotheses`, or the beam size); with `best_only`, the best
    `[B, ...]` and its score `[B]`. `with_cut`: also the rows `[B]` whose
    buffers were too short for their search (`_loop_while_rows_remain`).
    `choose`: how a beam of 1 picks each token (`_decode`'s; sampling's)."""

    def kept(ids, scores, cut):
        answer = (ids[:, 0], scores[:, 0]) if best_only else (ids, scores)
        return answer + ((cut,) if with_cut else ())

    def greedy():
        ids, scores, cut = _decode(
            model,
            inputs,
            max_length,
            start_id,
            end_id,
            use_cache,
            choose,
            scoring,
            target_prefix,
            with_cut=True,
        )
        return kept(ids[:, None], scores[:, None], cut)

    def beams():
        return kept(
            *_beam_search(
                model,
                inputs,
                max_length,
                beam_size,
                scoring,
                start_id,
                end_id,
                use_cache,
                target_prefix,
            )
        )

    if not ops.is_tensor(beam_size):
        return greedy() if beam_size == 1 else beams()
    return ops.cond(beam_size == 1, greedy, beams)


def _beam_search(
    model, inputs, max_length, beam_size, scoring, start_id, end_id, use_cache, target_prefix=None
):
    room, row_limit = _limits(max_length)
    prompt, is_lm = _prompt(model, inputs, start_id, target_prefix)
    batch_size, prompt_width = ops.shape(prompt)[0], ops.shape(prompt)[1]
    K = beam_size
    # The n-best list the search settles (without `num_hypotheses`, the
    # best alone, though the K best finished ones are returned).
    N = 1 if scoring.num_hypotheses is None else scoring.num_hypotheses
    # The zoo's stopping rule, or CTranslate2's (`Scoring.patience`): a
    # Python bool, or a tensor where the patience is one (one search then
    # holds both rules, rather than two searches).
    ours = scoring.patience == 0
    # Finished hypotheses kept per row (CTranslate2's N may exceed K).
    if ours is True:
        kept = K
    elif ops.is_tensor(K) or ops.is_tensor(N):
        kept = ops.maximum(K, N)
    else:
        kept = max(K, N)
    total_length = prompt_width + room

    # Every batch item becomes K rows: [B * K, ...], beams of an item
    # adjacent. The encoder runs once per item; its K rows are copies.
    state = model.decoding_start(inputs, total_length, use_cache=use_cache)
    state = tree.map_structure(lambda x: ops.repeat(x, K, axis=0), state)
    live_tokens = ops.pad(ops.repeat(prompt, K, axis=0), [[0, 0], [0, room]])  # [B*K, L]
    prompt_length = _lengths(prompt)[:, None]  # [B, 1]
    # Only the first beam is live at the start, so the K beams differ.
    first_beam = ops.where(ops.arange(K) == 0, 0.0, NEG_INF)  # [K]
    alpha = scoring.length_penalty
    rows = {
        "prompt_length": prompt_length,
        "history_start": scoring.history_starts(batch_size)[:, None],  # [B, 1]
        # Positions before it may be written.
        "end_length": prompt_length + (row_limit if _is_scalar(row_limit) else row_limit[:, None]),
        # Each row's length penalty (one for all, or one per row).
        "alpha": ops.zeros((batch_size, 1)) + ops.reshape(ops.cast(alpha, "float32"), (-1, 1)),
        "live_log_probs": ops.zeros((batch_size, K)) + first_beam[None, :],
        "finished_tokens": ops.zeros((batch_size, kept, total_length), "int32"),
        "finished_scores": ops.full((batch_size, kept), NEG_INF),
        # How many hypotheses have finished, and whether a step's best
        # candidate has (CTranslate2's stopping rule).
        "finished_count": ops.zeros((batch_size, 1), "int32"),
        "best_finished": ops.zeros((batch_size, 1), "bool"),
    }

    suppressed = bool(getattr(model, "suppressed_ids", None))

    def step(index, rows, hypotheses, row_ids):
        prompt_length, end_length = rows["prompt_length"], rows["end_length"]  # [B, 1]
        history_start = rows["history_start"]  # [B, 1]
        live_tokens = hypotheses["live_tokens"]
        logits, state = model.decoding_step(live_tokens, index, hypotheses["state"])
        batch_size, vocabulary_size = ops.shape(prompt_length)[0], ops.shape(logits)[-1]
        row_start = ops.arange(batch_size)[:, None]  # [B, 1]
        logits = _no_padding(logits)
        logits = scoring.constrain(
            logits,
            live_tokens,
            index,
            ops.repeat(row_ids, K, axis=0),
            ops.repeat(history_start, K, axis=0),
        )
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
        candidate = ops.arange(2 * K)[None, :]  # [1, 2K], best first
        if ours is not True:
            # CTranslate2 lets only the best candidate end at the first
            # step after a target prefix (a prompt's tokens after its first,
            # when they are part of the result): the others that would end
            # are dropped there (its issue #277).
            after_prefix = (position == prompt_length) & (prompt_length > history_start)  # [B, 1]
            dropped = after_prefix & (candidate > 0) & (token == end_id)
            dropped = _pick(ours, False, dropped)
            log_probs = ops.where(dropped, NEG_INF, log_probs)
            token = ops.where(dropped, PAD_ID, token)
        source_rows = ops.reshape(beam + row_start * K, (-1,))  # [B*2K]
        tokens = slice_update(
            ops.take(live_tokens, source_rows, axis=0),
            (0, position),
            ops.cast(ops.reshape(token, (-1, 1)), live_tokens.dtype),
        )  # [B*2K, L]
        is_end = (token == end_id) & ~forced
        ends = (position + 1 >= end_length) | full | is_end  # [B, 2K]
        # Ours: any of the 2K may finish; the K best that do not, stay
        # live. CTranslate2's: of the K best, those that end finish; the
        # others stay live, and each that finished is replaced by the next
        # candidate that does not end.
        ends, live = (
            _pick(ours, ends, ends & (candidate < K)),
            _pick(ours, ~ends, ops.where(candidate < K, ~(ends & (candidate < K)), ~is_end)),
        )

        # Finished: the best of those kept so far and those ending now.
        length = scoring.length(ops.minimum(position + 1, end_length), history_start)  # [B, 1]
        ending_scores = ops.where(ends, log_probs / scoring.penalty(length, rows["alpha"]), NEG_INF)
        finished_scores, kept_index = ops.top_k(
            ops.concatenate([rows["finished_scores"], ending_scores], axis=1), kept
        )  # indices into [B, kept + 2K]; ties keep the older
        every_finished = ops.concatenate(
            [rows["finished_tokens"], ops.reshape(tokens, (batch_size, 2 * K, total_length))],
            axis=1,
        )
        finished_tokens = ops.take_along_axis(every_finished, kept_index[..., None], axis=1)

        # Live: K of those that did not end, the best (ours) or the first
        # in candidate order (CTranslate2's: the same but where candidates
        # were dropped after a prefix).
        order = _pick(ours, log_probs, -ops.cast(candidate, "float32"))
        _, alive = ops.top_k(ops.where(live, order, NEG_INF), K)  # [B, K]
        # (Where fewer than K did not end, a pick that ended is a dead beam.)
        live_log_probs = ops.take_along_axis(ops.where(live, log_probs, NEG_INF), alive, axis=1)
        live_tokens = ops.take(tokens, ops.reshape(alive + row_start * 2 * K, (-1,)), axis=0)
        source_rows = ops.reshape(ops.take_along_axis(beam, alive, axis=1) + row_start * K, (-1,))
        rows = rows | {
            "live_log_probs": live_log_probs,
            "finished_tokens": finished_tokens,
            "finished_scores": finished_scores,
            "finished_count": rows["finished_count"]
            + ops.sum(ops.cast(ends, "int32"), axis=1, keepdims=True),
            "best_finished": rows["best_finished"] | ends[:, 0, None],
        }
        hypotheses = {"live_tokens": live_tokens, "state": _reorder(state, source_rows)}
        return rows, hypotheses

    def done(index, rows):
        end_length = rows["end_length"]
        position = index + 1
        # Ours: a live hypothesis ends with a length between that of ending
        # now and the row's limit, and its log-probability can only fall:
        # the best it can score is its log-probability over the largest
        # penalty. The row is done when that cannot reach the N-th best
        # finished score.
        history_start = rows["history_start"]
        shortest = ops.maximum(scoring.length(position + 1, history_start), 1)
        longest = scoring.length(end_length, history_start)
        largest_penalty = ops.maximum(
            scoring.penalty(shortest, rows["alpha"]), scoring.penalty(longest, rows["alpha"])
        )
        best_live = ops.max(rows["live_log_probs"], axis=1, keepdims=True) / largest_penalty
        nth_best = ops.take(rows["finished_scores"], ops.convert_to_tensor(N - 1), axis=1)
        cannot_win = nth_best[:, None] >= best_live
        if ours is not True:
            # CTranslate2's: enough hypotheses have finished.
            count = rows["finished_count"]
            most = ops.cast(most_hypotheses(K, scoring.patience), "int32")
            early = rows["best_finished"] & (count >= N)
            enough = ops.where(rows["alpha"] == 0, early, count >= most)
            cannot_win = _pick(ours, cannot_win, enough)
        return (cannot_win | (position >= end_length))[:, 0]

    rows = _loop_while_rows_remain(
        done,
        step,
        rows,
        {"live_tokens": live_tokens, "state": state},
        last_index=total_length - 1,
        group=K,
    )
    returned = K if scoring.num_hypotheses is None else N
    finished_tokens = rows["finished_tokens"][:, :returned]  # [B, N, L], best first
    finished_scores = rows["finished_scores"][:, :returned]
    finished_tokens = finished_tokens if is_lm else finished_tokens[:, :, 1:]
    return finished_tokens, finished_scores, rows["cut"]


def most_hypotheses(beam_size, patience):
    """How many hypotheses a search can return: round(beam_size * patience)
    (halves away from 0, as C++'s `std::round`), or with patience 0 the
    beam size."""
    if ops.is_tensor(beam_size) or ops.is_tensor(patience):
        rounded = ops.cast(ops.floor(ops.cast(beam_size, "float32") * patience + 0.5), "int32")
        return ops.where(patience == 0, ops.cast(beam_size, "int32"), rounded)
    return beam_size if patience == 0 else int(beam_size * patience + 0.5)


def _pick(condition, if_true, if_false):
    """`ops.where`; for a Python bool condition, one of the two as it is."""
    if isinstance(condition, bool):
        return if_true if condition else if_false
    return ops.where(condition, if_true, if_false)


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
