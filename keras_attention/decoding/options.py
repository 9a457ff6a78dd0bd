"""CTranslate2's decoding options, with its defaults and its meanings: those
of its `Translator.translate_batch` for the zoo's encoder-decoders
(`search`), and of its `Generator.generate_batch` for its language models
(`generate`), one `DecodingOptions` for both.

CTranslate2 users know these options; a translation or generation service
needs them: an n-best list, a target prefix that the answer must start
with, length and repetition penalties, n-grams never repeated, minimum and
maximum lengths, no unknown token, sequences never produced, sampling.
Each is held against CTranslate2 itself on the same weights
(tests/export/test_translate_batch.py, tests/export/test_generate_batch.py).
"""

import dataclasses

import keras
from keras import ops

from keras_attention.decoding import option_table
from keras_attention.decoding._loop import Scoring, _lengths, _most_likely, _no_padding
from keras_attention.decoding.beam import _search, most_hypotheses
from keras_attention.decoding.constraints import Constraints
from keras_attention.decoding.sampling import _sequence_seeds, sampling_choice
from keras_attention.utils import END_ID, START_ID, UNKNOWN_ID, hash_uint32

# `DecodingOptions` field -> its name in CTranslate2's `generate_batch`,
# where they differ (`option_table`).
GENERATION_NAMES = option_table.generation_names()


@dataclasses.dataclass(frozen=True)
class DecodingOptions:
    """How `search` and `generate` decode; CTranslate2's names, and its
    `translate_batch` defaults (`DecodingOptions.generation` makes them
    with its `generate_batch` names and defaults).

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
            at most beam_size); with a beam of 1 and sampling
            (`sampling_topk` other than 1), any number: that many draws.
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
            CTranslate2: they were given, not chosen. (An encoder-decoder's
            option: a language model's prompt is its prefix.)
        sampling_topk: int >= 0, with a beam of 1: each token is drawn
            from the k most likely (0: from every token); 1 is greedy.
        sampling_topp: float in (0, 1]: drawn from the smallest set of
            most likely tokens whose probability reaches it; 1 is no limit.
        sampling_temperature: float >= 0: the logits are divided by it
            before drawing; 0 is greedy. A sampled hypothesis's score is
            its log-probability under the model (the temperature and the
            filters change what is drawn, not the score), as CTranslate2's.
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
    sampling_topk: object = 1
    sampling_topp: object = 1.0
    sampling_temperature: object = 1.0

    @classmethod
    def generation(cls, **options):
        """Options with CTranslate2's `Generator.generate_batch` names and
        defaults (`option_table`): `max_length` (512) and `min_length` (0)
        are `max_decoding_length` and `min_decoding_length` (what they
        count: `generate`), a beam of 1; the others as in
        `DecodingOptions`. An error names the options as they were
        given."""
        fields = {}
        for option in option_table.decoding_options():
            name = option.generator_name
            if name in options:
                fields[option.name] = options.pop(name)
            elif option.generate is not None and option.generate_default != option.default:
                fields[option.name] = option.generate_default
        try:
            return cls(**fields, **options)
        except ValueError as error:
            message = str(error)
            for field, name in option_table.generation_names().items():
                message = message.replace(field, name)
            raise ValueError(message) from None

    def __post_init__(self):
        # Each option's own range (`option_table`), then the rules between
        # options.
        for option in option_table.decoding_options():
            value = getattr(self, option.name)
            if _is_python(value) and not _python_within(option, value):
                raise ValueError(
                    f"`{option.name}` must be {option.python_requirement()}. "
                    f"Received: {option.name}={value!r}"
                )
        beam, topk, temperature = self.beam_size, self.sampling_topk, self.sampling_temperature
        if all(map(_is_python, (beam, topk, temperature))) and beam > 1 and topk != 1:
            if temperature != 0:
                raise ValueError(
                    "`sampling_topk` must be 1 with a beam size above 1 (sampling draws with "
                    f"beam_size 1). Received: sampling_topk={topk}, beam_size={beam}"
                )
        if all(map(_is_python, (self.beam_size, self.patience, self.num_hypotheses))):
            most = most_hypotheses(self.beam_size, self.patience)
            topk = self.sampling_topk
            drawn = self.beam_size == 1 and (not _is_python(topk) or topk != 1)
            if self.num_hypotheses > most and not drawn:
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


def _python_within(option, value):
    """Whether a Python `value` is of `option`'s type and within its range
    (any value of its type where it has none)."""
    if option.dtype == "bool":
        return isinstance(value, bool)
    if option.range is None:
        return True
    if option.dtype == "int32" and (isinstance(value, bool) or not isinstance(value, int)):
        return False
    if option.dtype == "float32" and not isinstance(value, (int, float)):
        return False
    return bool(option.within(value))


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
    seed=None,
):
    """Translates `source_ids` `[B, S]` as CTranslate2's `translate_batch`
    does with the same `options` (a `DecodingOptions`; `seed`: for
    sampling, as in `generate`).

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
        prefix = _cut(ops.cast(prefix, "int32"), maximum)
        prefix_length = _lengths(prefix)

    limits = maximum - prefix_length  # the tokens after the prefix, per row
    return _search(
        model,
        source_ids,
        limits if room is None else (room, limits),
        options.beam_size,
        _scoring(options, end_id, unknown_id),
        start_id,
        end_id,
        use_cache,
        target_prefix=prefix,
        with_cut=return_cut,
        choose=_choice(options, seed, batch_size),
    )


def generate(
    model,
    prompt_ids,
    options=None,
    include_prompt_in_result=True,
    seed=None,
    start_id=START_ID,
    end_id=END_ID,
    unknown_id=UNKNOWN_ID,
    use_cache=True,
    room=None,
    return_cut=False,
):
    """Continues prompts as CTranslate2's `Generator.generate_batch` does
    with the same `options` (a `DecodingOptions`; None:
    `DecodingOptions.generation()`, its defaults).

    A prompt's first token is where decoding starts (CTranslate2's start
    token: `<s>` for a model whose prompts start with it); its other tokens
    are given, as a target prefix is: their log-probabilities are not in
    the score. What the options count:

    - `include_prompt_in_result` True: the result is the prompt (without a
      first `start_id`) and its continuation; `max_decoding_length` and
      `min_decoding_length` count the prompt's tokens after its first
      (a longer prompt is cut to that many), and so do the length penalty
      and the constraints (a token of the prompt is a repeated token).
    - False: the result is the continuation alone, and the lengths, the
      penalty and the constraints count only its tokens. (CTranslate2
      runs the prompt's shortest length in the batch at once and the rest
      of each as a prefix; here each row is what it would be alone.)

    Args:
        model: a language model (`is_decoder_only`).
        prompt_ids: int `[B, P]`, right-padded with 0, each with at least
            one token.
        include_prompt_in_result: bool, or bool `[B]` (one per prompt).
        seed: for sampling (`options.sampling_topk` other than 1): an int,
            or int `[B]`, each row's own seed (`sample`'s).
        room, return_cut: as in `search`.

    Returns:
        `(ids, scores)`: int32 `[B, N, L]`, each prompt's N best results
        (N: `options.num_hypotheses`), best first, each with its end token
        if it ended, padded with 0 (CTranslate2's `sequences_ids`, with
        `return_end_token=True`); and their scores `[B, N]`,
        log-probabilities over the length penalty.
    """
    if not getattr(model, "is_decoder_only", False):
        raise ValueError(
            "`generate` continues a language model's prompts; for an encoder-decoder use "
            f"`search`. Received: {type(model).__name__}"
        )
    options = DecodingOptions.generation() if options is None else options
    if options.target_prefix is not None:
        raise ValueError(
            "`target_prefix` is a translator's option: a language model's prompt is its prefix"
        )
    prompt = ops.cast(prompt_ids, "int32")
    batch_size = ops.shape(prompt)[0]
    copies = _copies(options)
    if _is_python(copies) and copies == 1:
        arguments = (start_id, end_id, unknown_id, use_cache, room, return_cut)
        return _generate(model, prompt, options, include_prompt_in_result, seed, *arguments)
    # N draws of a prompt (a beam of 1, sampling, `num_hypotheses` N) are
    # N rows of their own, each with a seed of its own.
    draw = ops.cast(ops.arange(batch_size * copies) % copies, "uint32")
    seeds = ops.repeat(_seeds(seed, batch_size), copies, axis=0)
    seeds = ops.where(draw == 0, seeds, ops.bitwise_xor(seeds, hash_uint32(draw)))
    options = dataclasses.replace(
        _repeated(options, copies), num_hypotheses=options.num_hypotheses // copies
    )
    outputs = _generate(
        model,
        ops.repeat(prompt, copies, axis=0),
        options,
        _repeated(include_prompt_in_result, copies),
        seeds,
        start_id,
        end_id,
        unknown_id,
        use_cache,
        room,
        return_cut,
    )
    return _draws_of_each(outputs, batch_size)


def _generate(
    model,
    prompt,
    options,
    include_prompt_in_result,
    seed,
    start_id,
    end_id,
    unknown_id,
    use_cache,
    room,
    return_cut,
):
    """`generate` with one row a prompt (`prompt` int32 `[B, P]`)."""
    batch_size = ops.shape(prompt)[0]
    maximum = ops.cast(options.max_decoding_length, "int32") + ops.zeros((batch_size,), "int32")
    included = ops.logical_or(
        ops.cast(include_prompt_in_result, "bool"), ops.zeros((batch_size,), "bool")
    )
    # With the prompt in the result, the lengths count its tokens after the
    # first: a prompt longer than the result may be is cut to its length.
    prompt = ops.where(included[:, None], _cut(prompt, maximum + 1), prompt)
    prompt_length = _lengths(prompt)  # [B]
    history_start = ops.where(included, 1, prompt_length)
    limits = ops.where(included, maximum + 1, maximum + prompt_length) - prompt_length
    outputs = _search(
        model,
        prompt,
        limits if room is None else (room, limits),
        options.beam_size,
        _scoring(options, end_id, unknown_id, history_start),
        start_id,
        end_id,
        use_cache,
        with_cut=return_cut,
        choose=_choice(options, seed, batch_size),
    )
    # What the result leaves out: the prompt, or a first start token.
    dropped = ops.where(included, ops.cast(prompt[:, 0] == start_id, "int32"), prompt_length)  # [B]
    return (_shift_left(outputs[0], dropped), *outputs[1:])


def _copies(options):
    """How many rows each prompt takes: N for N draws (a beam of 1,
    sampling, `num_hypotheses` N), else 1 (an int, or a scalar tensor)."""
    beam, count, topk = options.beam_size, options.num_hypotheses, options.sampling_topk
    if all(map(_is_python, (beam, count, topk))):
        return count if beam == 1 and topk != 1 else 1
    drawn = (ops.convert_to_tensor(beam) == 1) & ops.any(ops.convert_to_tensor(topk) != 1)
    return ops.where(drawn, ops.cast(count, "int32"), 1)


def _repeated(values, copies):
    """`values` (a `DecodingOptions`, or a value) with each value given per
    prompt (`[B, ...]`) repeated `copies` times, row by row."""
    if isinstance(values, DecodingOptions):
        return dataclasses.replace(
            values,
            **{
                field.name: _repeated(getattr(values, field.name), copies)
                for field in dataclasses.fields(values)
                if field.name not in ("beam_size", "patience", "num_hypotheses")
            },
        )
    if values is None or _is_python(values) or not len(ops.shape(values)):
        return values
    return ops.repeat(ops.convert_to_tensor(values), copies, axis=0)


def _draws_of_each(outputs, batch_size):
    """`generate`'s outputs over N rows a prompt (one hypothesis each) as
    each prompt's N, best first."""
    ids, scores = outputs[0], outputs[1]  # [B * N, 1, L], [B * N, 1]
    ids = ops.reshape(ids, (batch_size, -1, ops.shape(ids)[2]))  # [B, N, L]
    scores = ops.reshape(scores, (batch_size, -1))
    scores, order = ops.top_k(scores, ops.shape(scores)[1])  # best first, ties in order
    ids = ops.take_along_axis(ids, order[..., None], axis=1)
    if len(outputs) == 2:
        return ids, scores
    return ids, scores, ops.any(ops.reshape(outputs[2], (batch_size, -1)), axis=1)


def _seeds(seed, batch_size):
    """Each prompt's seed `[B]` (uint32), from `seed` as `generate` takes it."""
    if not (seed is None or isinstance(seed, (int, keras.random.SeedGenerator))):
        seed = ops.convert_to_tensor(seed, "int32")  # one per row
    return ops.cast(_sequence_seeds(seed, batch_size), "uint32")


def _scoring(options, end_id, unknown_id, history_start=1):
    """`options` as the search loops read them: CTranslate2's length
    penalty and stopping rule, and its rules on each step's logits."""
    return Scoring(
        length_penalty=options.length_penalty,
        patience=options.patience,
        num_hypotheses=options.num_hypotheses,
        history_start=history_start,
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


def _choice(options, seed, batch_size):
    """How a beam of 1 picks each token: the most likely, or (with
    sampling options) a draw from each row's own seed."""
    topk, temperature = options.sampling_topk, options.sampling_temperature
    if _is_python(topk) and _is_python(temperature) and (topk == 1 or temperature == 0):
        return _most_likely
    return sampling_choice(temperature, topk, options.sampling_topp, _seeds(seed, batch_size))


def _cut(ids, lengths):
    """Each row of `ids` `[B, T]` cut to its `lengths` `[B]` tokens."""
    return ops.where(ops.arange(ops.shape(ids)[1])[None, :] < lengths[:, None], ids, 0)


def _shift_left(ids, counts):
    """`ids` `[B, N, L]` with each batch item's first `counts` `[B]`
    positions dropped, 0-padded on the right."""
    width = ops.shape(ids)[2]
    positions = ops.arange(width)[None, None, :] + counts[:, None, None]  # [B, 1, L]
    shifted = ops.take_along_axis(
        ids, ops.broadcast_to(ops.minimum(positions, width - 1), ops.shape(ids)), axis=2
    )
    return ops.where(positions < width, shifted, 0)


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


def score_sequences(model, token_ids):
    """Each token's log-probability given the tokens before it, under a
    language model, as CTranslate2's `Generator.score_batch` gives them:
    a row's first token is read, not scored (its start token), and no end
    token is added; the softmax is the decoding loops' (padding never a
    candidate).

    Args:
        token_ids: int `[B, T]`, 0-padded.

    Returns:
        `(labels, log_probs)`: int32 `[B, T]`, each row's tokens after its
        first, 0-padded; and float32 `[B, T]`, each one's log-probability,
        0 at padding.
    """
    ids = ops.pad(ops.cast(token_ids, "int32"), [[0, 0], [0, 1]])  # [B, T + 1]
    labels = ids[:, 1:]  # t2 .. tn
    logits = ops.cast(model(ids[:, :-1]), "float32")  # read t1 .. tn
    log_probs = ops.log_softmax(_no_padding(logits), axis=-1)  # [B, T, V]
    chosen = ops.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]
    return labels, ops.where(labels != 0, chosen, 0.0)
