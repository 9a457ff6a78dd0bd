"""What greedy search, sampling and beam search share: the loop that drops
finished rows, the one-best loop, and the helpers of both.

Private to the package.
"""

import dataclasses

from keras import ops, tree

from keras_attention.renamed import renamed_argument
from keras_attention.utils import (
    NEG_INF,
    PAD_ID,
    check_positive_int,
    slice_update,
    tensorflow_kernels_are_faster,
)

# Rows of a batch finish at different steps (in batches of 32 test sentences
# of the English -> French run, the batch ran 2.5 to 3.8 times the row-steps
# its sentences needed alone). The loop drops finished rows from the batch:
# it runs on the whole batch until at most a quarter of the rows are
# unfinished, then on a quarter of the batch, then on a sixteenth. Each size
# is a loop of its own (static shapes, as XLA needs; in a plain TensorFlow
# graph of any batch size, one loop shrinks instead). Halving (2, 4, 8, 16)
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
        `rows` in the batch's order, each row as its last step left it,
        and `"cut"` bool `[B]`: the rows the loop left unfinished, its
        last index reached (the buffers were too short for them).
    """
    batch_size = ops.shape(tree.flatten(rows)[0])[0]

    def remaining(index, rows):
        return ops.sum(ops.cast(~done(index, rows), "int32"))

    def advance(index, rows, hypotheses, row_ids):
        """One step; a row that is done keeps what it has, as it would alone."""
        new_rows, hypotheses = step(index, rows, hypotheses, row_ids)
        finished = done(index, rows)
        rows = {key: _where_rows(finished, x, new_rows[key]) for key, x in rows.items()}
        return index + 1, rows, hypotheses

    def take_rows(picked, rows, hypotheses, row_ids):
        """The rows `picked` `[b]`, with their `group` entries of `hypotheses`."""
        entries = ops.reshape(picked[:, None] * group + ops.arange(group)[None, :], (-1,))
        return (
            {key: ops.take(x, picked, axis=0) for key, x in rows.items()},
            tree.map_structure(lambda x: ops.take(x, entries, axis=0), hypotheses),
            ops.take(row_ids, picked, axis=0),
        )

    def write(final, index, rows, row_ids, is_copy=None):
        slots = row_ids if is_copy is None else ops.where(is_copy, batch_size, row_ids)
        rows = rows | {"cut": ~done(index, rows)}
        return {key: ops.scatter_update(final[key], slots[:, None], rows[key]) for key in rows}

    def run_until(next_size, index, rows, hypotheses, row_ids):
        """Steps while more than `next_size` rows are unfinished."""

        def condition(index, rows, hypotheses):
            return (index < last_index) & (remaining(index, rows) > next_size)

        def body(index, rows, hypotheses):
            return advance(index, rows, hypotheses, row_ids)

        return ops.while_loop(condition, body, (index, rows, hypotheses))

    def keep_unfinished(size, index, rows, hypotheses, row_ids):
        """The unfinished rows (at most `size`), then finished ones to fill
        a batch of `size`: those are copies, marked so."""
        picked = ops.argsort(ops.cast(done(index, rows), "int32"))[:size]
        is_copy = ops.arange(size) >= remaining(index, rows)
        return (*take_rows(picked, rows, hypotheses, row_ids), is_copy)

    def run_shrinking(final, rows, hypotheses, row_ids):
        """The loops of static sizes as one loop whose batch shrinks as it
        runs (`_batch_size_may_change_in_a_loop`): whenever at most a
        quarter of its rows are unfinished, every row is written to `final`
        and only the unfinished ones go on. The same answers, but the step
        (the model's decoder) is traced once, not once a size."""

        def condition(index, rows, hypotheses, row_ids, final):
            return (index < last_index) & (remaining(index, rows) > 0)

        def keep_only_unfinished(index, rows, hypotheses, row_ids, final):
            final = write(final, index, rows, row_ids)
            picked = ops.where(~done(index, rows))[0]  # [b]
            return (*take_rows(picked, rows, hypotheses, row_ids), final)

        def body(index, rows, hypotheses, row_ids, final):
            index, rows, hypotheses = advance(index, rows, hypotheses, row_ids)
            shrink = remaining(index, rows) * SHRINK_FACTORS[0] <= ops.shape(row_ids)[0]
            values = (rows, hypotheses, row_ids, final)
            values = ops.cond(shrink, lambda: keep_only_unfinished(index, *values), lambda: values)
            return (index, *values)

        loop_values = (0, rows, hypotheses, row_ids, final)
        index, rows, hypotheses, row_ids, final = ops.while_loop(condition, body, loop_values)
        return write(final, index, rows, row_ids)

    # Each row's final values, plus one row where the copies are written.
    final = rows | {"cut": ops.zeros((batch_size,), "bool")}
    final = {key: ops.pad(x, [[0, 1]] + [[0, 0]] * (len(x.shape) - 1)) for key, x in final.items()}
    row_ids = ops.arange(batch_size, dtype="int32")
    if _batch_size_may_change_in_a_loop(batch_size):
        final = run_shrinking(final, rows, hypotheses, row_ids)
        return {key: x[:-1] for key, x in final.items()}
    index = 0
    is_copy = ops.zeros((batch_size,), "bool")
    for next_size in _shrunk_sizes(batch_size):
        index, rows, hypotheses = run_until(next_size, index, rows, hypotheses, row_ids)
        final = write(final, index, rows, row_ids, is_copy)
        rows, hypotheses, row_ids, is_copy = keep_unfinished(
            next_size, index, rows, hypotheses, row_ids
        )
    index, rows, hypotheses = run_until(0, index, rows, hypotheses, row_ids)
    final = write(final, index, rows, row_ids, is_copy)
    return {key: x[:-1] for key, x in final.items()}


def _batch_size_may_change_in_a_loop(batch_size):
    """Whether the loop's rows may be a tensor whose batch size changes from
    step to step: in a TensorFlow graph that XLA does not compile, where the
    batch size is not known while tracing (an export's signatures)."""
    return not isinstance(batch_size, int) and tensorflow_kernels_are_faster()


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


@dataclasses.dataclass(frozen=True)
class Scoring:
    """How a search scores a finished hypothesis, and when beam search
    stops a row.

    Attributes:
        length_penalty: alpha, a float or a float tensor `[B]`: the
            hypothesis's log-probability is divided by `n ** alpha`, as in
            CTranslate2 and Hugging Face, n counting its tokens from
            `history_start` on, the end token included (for an
            encoder-decoder, every token after the start token, a target
            prefix's too); 0 ranks by log-probability alone. (The
            log-probability never counts a prefix's tokens: they are
            given, not chosen.)
        patience: beam search's stopping rule. 0, the zoo's own: a row
            searches on until no live hypothesis can still enter its n-best.
            Above 0, CTranslate2's: a row stops once round(beam_size *
            patience) hypotheses have finished, or, with a length penalty
            of 0, once the best candidate of a step has finished and
            `num_hypotheses` have.
        num_hypotheses: optional int, how many finished hypotheses beam
            search returns per row (None: `beam_size`).
        constraints: optional `Constraints`, applied to every step's logits.
        history_start: int, or int `[B]` (one per batch item): the first
            position of a hypothesis's own tokens, those that the length
            penalty counts and the constraints read
            (1: all but the start token; a language model's prompt
            length: what follows its prompt, CTranslate2's
            `include_prompt_in_result=False`).
    """

    length_penalty: object = 1.0
    patience: object = 0
    num_hypotheses: object = None
    constraints: object = None
    history_start: object = 1

    def length(self, written, history_start=1):
        """The length n of a hypothesis whose last token is at position
        `written - 1` (`history_start`: the row's first position of its
        own tokens)."""
        return written - history_start

    def penalty(self, length, alpha=None):
        """The divisor of a hypothesis's log-probability, `n ** alpha`
        (`alpha`: each row's, broadcast against `length`; None:
        `length_penalty`). A hypothesis of no tokens (a limit of 0) is
        divided by 1."""
        alpha = self.length_penalty if alpha is None else alpha
        return ops.maximum(ops.cast(length, "float32"), 1.0) ** alpha

    def constrain(self, logits, tokens, index, row_ids, history_start=1):
        if self.constraints is None:
            return logits
        return self.constraints.apply(logits, tokens, index, row_ids, history_start)

    def history_starts(self, batch_size):
        """Each batch item's `history_start`, int32 `[B]`."""
        return ops.cast(self.history_start, "int32") + ops.zeros((batch_size,), "int32")


def _decode(
    model,
    inputs,
    max_decoding_length,
    start_id,
    end_id,
    use_cache,
    choose,
    scoring=None,
    target_prefix=None,
    with_cut=False,
):
    """The one-best loop: `choose(logits [b, V], position, row_ids [b]) ->
    ids [b]` picks the token at each position (`row_ids`: which batch item
    each row is). With a `scoring` (a `Scoring`) it applies its constraints
    and also returns each sequence's score `[B]`, as beam search does.
    `target_prefix`: optional ids `[B, P]` (0-padded) that an
    encoder-decoder's answers start with. `with_cut`: also return the
    rows whose buffer was too short (`_loop_while_rows_remain`'s `"cut"`)."""
    room, row_limit = _limits(max_decoding_length)
    prompt, is_lm = _prompt(model, inputs, start_id, target_prefix)
    batch_size, prompt_width = ops.shape(prompt)[0], ops.shape(prompt)[1]
    total_length = prompt_width + room
    state = model.decoding_start(inputs, total_length, use_cache=use_cache)
    prompt_length = _lengths(prompt)  # [B]
    rows = {
        "tokens": ops.pad(prompt, [[0, 0], [0, room]]),  # [B, L]
        "prompt_length": prompt_length,
        "history_start": ops.ones((batch_size,), "int32")
        if scoring is None
        else scoring.history_starts(batch_size),
        "end_length": prompt_length + row_limit,  # [B]
        "finished": ops.zeros((batch_size,), "bool"),
        "log_prob": ops.zeros((batch_size,)),  # of the chosen tokens, when scored
    }

    def step(index, rows, state, row_ids):
        tokens, prompt_length, end_length = (
            rows["tokens"],
            rows["prompt_length"],
            rows["end_length"],
        )
        logits, state = model.decoding_step(tokens, index, state)
        logits = _no_padding(logits)
        if scoring is not None:
            logits = scoring.constrain(
                logits, tokens, index, row_ids, rows["history_start"][:, None]
            )
        position = index + 1
        forced = position < prompt_length
        frozen = rows["finished"] | (position >= end_length)
        chosen = ops.cast(choose(_never_generated(model, logits), position, row_ids), tokens.dtype)
        token = ops.where(
            forced, ops.take(tokens, position, axis=1), ops.where(frozen, PAD_ID, chosen)
        )
        log_prob = rows["log_prob"]
        if scoring is not None:
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
    if scoring is None:
        answer = (_strip_start(tokens, is_lm),)
    else:
        length = scoring.length(_lengths(tokens), rows["history_start"])
        answer = (_strip_start(tokens, is_lm), rows["log_prob"] / scoring.penalty(length))
    answer += (rows["cut"],) if with_cut else ()
    return answer if len(answer) > 1 else answer[0]


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


def _prompt(model, inputs, start_id, target_prefix=None):
    """The tokens each sequence starts from: the prompt for a language model,
    the start token (then any target prefix) for an encoder-decoder."""
    if model.is_decoder_only:
        return ops.cast(inputs, "int32"), True
    start = ops.full((ops.shape(inputs)[0], 1), start_id, "int32")
    if target_prefix is None:
        return start, False
    return ops.concatenate([start, ops.cast(target_prefix, "int32")], axis=1), False


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


def decoding_length(max_decoding_length, max_new_tokens=None, max_length=None):
    """The most tokens a search generates, by whichever name its caller
    used: `max_decoding_length` (CTranslate2's), `max_new_tokens` (Hugging
    Face's, for a language model the tokens after the prompt: the same
    number) or `max_length` (this package's before; deprecated). One, and
    only one, must be given."""
    given = {
        name: value
        for name, value in [("max_new_tokens", max_new_tokens), ("max_length", max_length)]
        if value is not None
    }
    if max_decoding_length is not None and given or len(given) > 1:
        names = ["max_decoding_length"] * (max_decoding_length is not None) + sorted(given)
        raise TypeError(f"give one of {', '.join(names)}, not several (they are one limit)")
    if "max_new_tokens" in given:
        return given["max_new_tokens"]
    length = renamed_argument(  # (the warning points at the line that called the search)
        given, "max_decoding_length", max_decoding_length, old="max_length", stacklevel=4
    )
    if length is None:
        raise TypeError("missing the most tokens to generate: `max_decoding_length`")
    return length


def _limits(max_decoding_length):
    """`(room, row_limit)`: how many new tokens the buffer holds, and each
    row's limit, a scalar or (with one `max_decoding_length` per row) `[B]`.
    A `max_decoding_length` that is already such a pair is returned as it
    is: a compiled caller gives the buffer's width apart from the limits,
    so that XLA compiles one program per width, not one per set of limits."""
    if isinstance(max_decoding_length, tuple):
        return max_decoding_length
    _check_positive_int("max_decoding_length", max_decoding_length, ranks=(0, 1))
    if _is_scalar(max_decoding_length):
        return max_decoding_length, max_decoding_length
    # (At least 1: the largest of an empty batch's limits is the smallest int.)
    return ops.maximum(ops.max(max_decoding_length), 1), ops.cast(max_decoding_length, "int32")
