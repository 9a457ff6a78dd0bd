"""CTranslate2's decoding options (those of its `translate_batch`), with its
defaults and its meanings, for the zoo's encoder-decoders: `search`.

CTranslate2 users know these options; a translation service needs them: an
n-best list, a target prefix that the answer must start with, length and
repetition penalties, n-grams never repeated, minimum and maximum lengths,
no unknown token, sequences never produced. Each is held against
CTranslate2 itself on the same weights (tests/export/test_translate_batch.py).
"""

import dataclasses

from keras import ops

from keras_attention.decoding._loop import Scoring, _no_padding
from keras_attention.decoding.beam import _search, most_hypotheses
from keras_attention.decoding.constraints import Constraints
from keras_attention.utils import END_ID, START_ID, UNKNOWN_ID


@dataclasses.dataclass(frozen=True)
class DecodingOptions:
    """How `search` decodes; CTranslate2's names and defaults.

    Every option but the first three may be a Python value (the same for
    every sequence) or an array or tensor `[B]` (one per sequence; those
    are not checked here: the export checks the values a request sends);
    the first three may be scalar tensors.

    Attributes:
        beam_size: int, live hypotheses per sequence; 1 is greedy search.
        patience: float, the stopping rule (`Scoring.patience`): > 0,
            CTranslate2's (a sequence stops once round(beam_size *
            patience) hypotheses have finished); 0, the zoo's own (search
            on until no live hypothesis can still enter the n-best).
        num_hypotheses: int, how many finished hypotheses to return, best
            first: at most round(beam_size * patience) (with patience 0,
            at most beam_size).
        length_penalty: float alpha: a hypothesis's log-probability is
            divided by its length ** alpha (its length counts every token,
            the target prefix and the end token included).
        repetition_penalty: float > 0: a token produced before has its
            logit divided by it (multiplied where negative); 1 is none.
        no_repeat_ngram_size: int, no n-gram of this size is produced
            twice; 0 is none.
        min_decoding_length: int, the fewest tokens before the end token
            (the target prefix included).
        max_decoding_length: int, the most tokens (the target prefix
            included; the end token too).
        disable_unk: bool, never produce the unknown token.
        suppress_sequences: optional int ids `[B, S, M]` (0-padded): token
            sequences never produced (see `Constraints`).
        target_prefix: optional int ids `[B, P]` (0-padded on the right):
            each answer starts with these tokens (none for a row of 0s).
            Their log-probabilities are not counted in the score, as in
            CTranslate2: they were given, not chosen.
    """

    beam_size: int = 2
    patience: float = 1.0
    num_hypotheses: int = 1
    length_penalty: object = 1.0
    repetition_penalty: object = 1.0
    no_repeat_ngram_size: object = 0
    min_decoding_length: object = 1
    max_decoding_length: object = 256
    disable_unk: object = False
    suppress_sequences: object = None
    target_prefix: object = None

    def __post_init__(self):
        def check(name, condition, requirement):
            value = getattr(self, name)
            if _is_python(value) and not condition(value):
                raise ValueError(f"`{name}` must be {requirement}. Received: {name}={value!r}")

        def is_int(value):
            return isinstance(value, int) and not isinstance(value, bool)

        check("beam_size", lambda v: is_int(v) and v >= 1, "an integer >= 1")
        check("patience", lambda v: isinstance(v, (int, float)) and v >= 0, "a number >= 0")
        check("num_hypotheses", lambda v: is_int(v) and v >= 1, "an integer >= 1")
        check("repetition_penalty", lambda v: isinstance(v, (int, float)) and v > 0, "> 0")
        check("no_repeat_ngram_size", lambda v: is_int(v) and v >= 0, "an integer >= 0")
        check("min_decoding_length", lambda v: is_int(v) and v >= 0, "an integer >= 0")
        check("max_decoding_length", lambda v: is_int(v) and v >= 1, "an integer >= 1")
        check("disable_unk", lambda v: isinstance(v, bool), "a bool")
        if all(map(_is_python, (self.beam_size, self.patience, self.num_hypotheses))):
            most = most_hypotheses(self.beam_size, self.patience)
            if self.num_hypotheses > most:
                raise ValueError(
                    f"`num_hypotheses` must be at most {most} (beam_size {self.beam_size}, "
                    f"patience {self.patience}). Received: num_hypotheses={self.num_hypotheses}"
                )
        minimum, maximum = self.min_decoding_length, self.max_decoding_length
        if _is_python(minimum) and _is_python(maximum) and minimum > maximum:
            raise ValueError(
                "`min_decoding_length` must be at most `max_decoding_length`. Received: "
                f"min_decoding_length={minimum}, max_decoding_length={maximum}"
            )


def _is_python(value):
    """A Python value (the same for every sequence), not an array or a
    tensor of one value per sequence (checked by whoever makes it)."""
    return isinstance(value, (bool, int, float, str)) or value is None


def search(
    model,
    source_ids,
    options=None,
    start_id=START_ID,
    end_id=END_ID,
    unknown_id=UNKNOWN_ID,
    use_cache=True,
    room=None,
    return_cut=False,
):
    """Translates `source_ids` `[B, S]` as CTranslate2's `translate_batch`
    does with the same `options` (a `DecodingOptions`).

    `room`: optional int (or scalar tensor), the width of the answer
    buffers, at least the largest `max_decoding_length` (None: that
    largest). Under XLA the width is a shape, compiled into the program:
    a compiled caller gives one of a few widths, and each row still stops
    at its own `max_decoding_length`. A `room` below a row's
    `max_decoding_length` may cut its search short: `return_cut=True`
    also returns which rows it cut (bool `[B]`), whose answers are then
    not the search's (search them again with more room). A short room
    is worth trying first: every step's work grows with the width.

    Returns:
        `(ids, scores)`: int32 `[B, N, L]`, each sequence's N best answers
        (N: `options.num_hypotheses`), best first, each with its target
        prefix, padded with 0 after its end token; and their scores
        `[B, N]`, log-probabilities over the length penalty.
    """
    options = DecodingOptions() if options is None else options
    batch_size = ops.shape(source_ids)[0]
    maximum = ops.cast(options.max_decoding_length, "int32") + ops.zeros((batch_size,), "int32")
    prefix = options.target_prefix
    prefix_length = 0
    if prefix is not None:
        # A prefix longer than the answer may be is cut to its length.
        prefix = ops.cast(prefix, "int32")
        prefix = ops.where(ops.arange(ops.shape(prefix)[1])[None, :] < maximum[:, None], prefix, 0)
        prefix_length = ops.sum(ops.cast(prefix != 0, "int32"), axis=1)
    scoring = Scoring(
        length_penalty=options.length_penalty,
        form="power",
        patience=options.patience,
        num_hypotheses=options.num_hypotheses,
        constraints=Constraints(
            min_length=options.min_decoding_length,
            repetition_penalty=options.repetition_penalty,
            no_repeat_ngram_size=options.no_repeat_ngram_size,
            disable_unk=options.disable_unk,
            suppress_sequences=options.suppress_sequences,
            end_id=end_id,
            unknown_id=unknown_id,
        ),
    )

    limits = maximum - prefix_length  # the tokens after the prefix, per row
    return _search(
        model,
        source_ids,
        limits if room is None else (room, limits),
        options.beam_size,
        scoring,
        start_id,
        end_id,
        use_cache,
        target_prefix=prefix,
        with_cut=return_cut,
    )


def score_targets(model, source_ids, target_ids, start_id=START_ID, end_id=END_ID):
    """Each target token's log-probability under an encoder-decoder, the end
    token included, as CTranslate2's `score_batch` gives them: the model
    reads `<s> y1 .. yn` and is scored on `y1 .. yn </s>`, with the
    softmax of the decoding loops (padding never a candidate) and no
    length penalty.

    Args:
        source_ids: int `[B, S]`, 0-padded.
        target_ids: int `[B, T]`, 0-padded, without start or end tokens.

    Returns:
        `(labels, log_probs)`: int32 `[B, T + 1]`, each target with its end
        token, 0-padded; and float32 `[B, T + 1]`, 0 at padding.
    """
    target_ids = ops.cast(target_ids, "int32")
    batch_size, width = ops.shape(target_ids)[0], ops.shape(target_ids)[1]
    lengths = ops.sum(ops.cast(target_ids != 0, "int32"), axis=1)  # [B]
    positions = ops.arange(width + 1)[None, :]
    labels = ops.pad(target_ids, [[0, 0], [0, 1]])
    labels = ops.where(positions == lengths[:, None], end_id, labels)  # y1 .. yn </s>
    start = ops.full((batch_size, 1), start_id, "int32")
    read = ops.concatenate([start, target_ids], axis=1)  # <s> y1 .. yn
    logits = ops.cast(model({"source_ids": source_ids, "target_ids": read}), "float32")
    log_probs = ops.log_softmax(_no_padding(logits), axis=-1)  # [B, T + 1, V]
    chosen = ops.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]
    return labels, ops.where(labels != 0, chosen, 0.0)
