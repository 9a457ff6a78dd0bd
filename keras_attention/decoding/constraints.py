"""Rules on what a step may produce, applied to its logits before the
softmax, each with one value per sequence: CTranslate2's (and Hugging
Face's) "logits processors".

- `min_length`: the end token is not produced before this many tokens;
- `repetition_penalty`: a token produced before is made less likely (its
  logit divided by the penalty where positive, multiplied where negative);
- `no_repeat_ngram_size`: no n-gram of this size is produced twice;
- `disable_unk`: the unknown token is never produced;
- `suppress_sequences`: these token sequences are never produced.

Each rule reads the tokens produced so far (the history): in the token
buffer of the decoding loops, positions `history_start` to `index`:
from 1 (position 0 holds the start token, which is not part of it; a
target prefix is, and so is a language model's prompt after its first
token), or, for a language model whose result leaves its prompt out
(CTranslate2's `include_prompt_in_result=False`), from the first position
after the prompt.
"""

import dataclasses

from keras import ops

from keras_attention.utils import NEG_INF, UNKNOWN_ID


@dataclasses.dataclass(frozen=True)
class Constraints:
    """The rules, each a Python value (the same for every sequence) or a
    tensor `[B]` (one per sequence of the batch).

    Attributes:
        min_length: int, the fewest tokens before the end token may be
            produced (the history's length, a target prefix included).
        repetition_penalty: float > 0; 1 changes nothing.
        no_repeat_ngram_size: int; 0 changes nothing.
        disable_unk: bool.
        suppress_sequences: optional int ids `[B, S, M]`, S sequences of at
            most M tokens per batch item, padded with 0. A sequence of one
            token is never produced; of more, its last token is not
            produced after the others.
        end_id, unknown_id: int, the end and unknown token ids.
    """

    min_length: object = 0
    repetition_penalty: object = 1.0
    no_repeat_ngram_size: object = 0
    disable_unk: object = False
    suppress_sequences: object = None
    end_id: int = 2
    unknown_id: int = UNKNOWN_ID

    def apply(self, logits, tokens, index, row_ids, history_start=1):
        """`logits` `[b, V]` with the rules applied.

        Args:
            logits: float32 `[b, V]`, the next token's logits per row.
            tokens: int `[b, L]`, each row's token buffer; the history is at
                positions `history_start` to `index`.
            index: scalar int, the position of the last token so far.
            row_ids: int `[b]`, the batch item each row is (for the values
                given per batch item).
            history_start: int, or int `[b, 1]` (one per row): the first
                position of the history.
        """

        def own(value, dtype):  # [b, 1]: each row's value
            value = ops.convert_to_tensor(value, dtype)
            if len(value.shape):  # one per batch item
                return ops.take(value, row_ids, axis=0)[:, None]
            return ops.reshape(value, (1, 1))

        vocabulary_size = ops.shape(logits)[-1]
        vocabulary = ops.arange(vocabulary_size)[None, :]  # [1, V]
        tokens = ops.cast(tokens, "int32")
        start = ops.cast(history_start, "int32")  # [b, 1] or a scalar
        produced = index + 1 - start  # the history's length, [b, 1]

        penalty = own(self.repetition_penalty, "float32")

        def penalized():
            seen = _mark(tokens, _in_history(tokens, index, start), vocabulary_size)
            lowered = ops.where(logits < 0, logits * penalty, logits / penalty)
            return ops.where(seen & (penalty != 1.0), lowered, logits)

        logits = _when(penalty != 1.0, penalized, logits)
        banned = (produced < own(self.min_length, "int32")) & (vocabulary == self.end_id)
        banned |= own(self.disable_unk, "bool") & (vocabulary == self.unknown_id)
        never = ops.zeros(ops.shape(logits), "bool")
        size = own(self.no_repeat_ngram_size, "int32")
        banned |= _when(
            size > 0,
            lambda: _repeated_ngram_ends(tokens, index, start, size, vocabulary_size),
            never,
        )
        if self.suppress_sequences is not None:
            sequences = ops.take(ops.cast(self.suppress_sequences, "int32"), row_ids, axis=0)
            banned |= _when(
                sequences != 0,
                lambda: _suppressed(tokens, index, produced, sequences, vocabulary_size),
                never,
            )
        return ops.where(banned, NEG_INF, logits)


def _when(used, rule, otherwise):
    """`rule()` if any of `used` (bool, any shape) holds, else `otherwise`:
    a rule no row uses costs a branch not taken, not its work at every
    step."""
    return ops.cond(ops.any(used), rule, lambda: otherwise)


def _in_history(tokens, index, start):
    """Bool `[b, L]`: the positions of the history, `start` (`[b, 1]` or
    a scalar) to `index`."""
    positions = ops.arange(ops.shape(tokens)[1])[None, :]
    return ops.broadcast_to((positions >= start) & (positions <= index), ops.shape(tokens))


def _mark(ids, marked, vocabulary_size):
    """Bool `[b, V]`: True at `(row, ids[row, j])` wherever `marked[row, j]`
    (`ids` and `marked` `[b, N]`)."""
    batch_size, width = ops.shape(ids)[0], ops.shape(ids)[1]
    columns = ops.where(marked, ids, vocabulary_size)  # the unmarked: an extra column
    rows = ops.broadcast_to(ops.arange(batch_size)[:, None], (batch_size, width))
    indices = ops.reshape(ops.stack([rows, columns], axis=-1), (-1, 2))
    counts = ops.scatter(
        indices, ops.ones((batch_size * width,), "int32"), (batch_size, vocabulary_size + 1)
    )
    return counts[:, :vocabulary_size] > 0


def _repeated_ngram_ends(tokens, index, start, size, vocabulary_size):
    """Bool `[b, V]`: the tokens that would complete an n-gram already in
    the history (from position `start`; n = `size` `[b, 1]`, 0 for none).
    The n-gram ending at history position e is repeated when its first
    n - 1 tokens equal the history's last n - 1; its last token, token e,
    is then banned."""
    length = ops.shape(tokens)[1]
    ends = ops.arange(length)[None, :]  # [1, L]: e
    whole = ends >= start + size - 1  # the n-gram starts inside the history
    repeated = ops.broadcast_to((size > 0) & whole & (ends <= index), ops.shape(tokens))

    def compare(distance, repeated):
        # Token e - 1 - distance against the history's token index - distance.
        earlier = ops.take(tokens, _clip(ends[0] - 1 - distance, length), axis=1)
        latest = ops.take(tokens, _clip(index - distance, length), axis=1)[:, None]
        needed = distance <= size - 2
        return repeated & (~needed | (earlier == latest))

    repeated = ops.fori_loop(0, ops.maximum(ops.max(size) - 1, 0), compare, repeated)
    return _mark(tokens, repeated, vocabulary_size)


def _suppressed(tokens, index, produced, sequences, vocabulary_size):
    """Bool `[b, V]`: the last token of each of `sequences` `[b, S, M]`
    (0-padded) whose other tokens end the history (`produced` `[b, 1]`
    tokens long); a sequence of one token is always banned."""
    length, width = ops.shape(tokens)[1], ops.shape(sequences)[2]
    lengths = ops.sum(ops.cast(sequences != 0, "int32"), axis=-1)  # [b, S]
    matches = (lengths >= 1) & (produced >= lengths - 1)  # [b, S]

    def compare(m, matches):
        # The sequence's token m against the history's token at index - (l - 2) + m.
        position = _clip(index - lengths + 2 + m, length)  # [b, S]
        history_token = ops.take_along_axis(tokens, position, axis=1)
        needed = m <= lengths - 2
        return matches & (~needed | (history_token == ops.take(sequences, m, axis=2)))

    matches = ops.fori_loop(0, ops.maximum(width - 1, 0), compare, matches)
    last = ops.take_along_axis(sequences, ops.maximum(lengths - 1, 0)[..., None], axis=2)[..., 0]
    return _mark(last, matches, vocabulary_size)


def _clip(position, length):
    """A position within `[0, length)` (a tensor, even from Python ints)."""
    return ops.clip(ops.convert_to_tensor(position, "int32"), 0, length - 1)
