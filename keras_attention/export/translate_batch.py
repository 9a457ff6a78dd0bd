"""The `translate_batch` and `score_batch` signatures of a translator's
export: CTranslate2's `translate_batch`, with text in and text out, every
option a `[B]` input; and its `score_batch`.

`score_batch`: `source` and `target`, string `[B]` -> `tokens` string
`[B, T]` (each target's tokens and `</s>`, "" padded), `log_probs` float32
`[B, T]` (each token's log-probability, 0 at padding) and `log_prob` `[B]`
(their sum), as CTranslate2 scores: the end token included, no length
penalty. Sources are cut to the export's `max_input_length` tokens, targets to
`MAX_DECODING_LENGTH`.

Inputs (B texts; every option one value per text):

| input | dtype, shape | CTranslate2's default |
|---|---|---|
| `text` | string `[B]` | |
| `target_prefix` | string `[B]`, "" for none | |
| `beam_size` | int32 `[B]` | 2 |
| `patience` | float32 `[B]` (0: the zoo's stopping rule) | 1 |
| `num_hypotheses` | int32 `[B]` | 1 |
| `length_penalty` | float32 `[B]` | 1 |
| `repetition_penalty` | float32 `[B]` | 1 |
| `no_repeat_ngram_size` | int32 `[B]` | 0 |
| `min_decoding_length` | int32 `[B]` | 1 |
| `max_decoding_length` | int32 `[B]` | 256 |
| `disable_unk` | bool `[B]` | false |
| `return_attention` | bool `[B]` | false |
| `replace_unknowns` | bool `[B]` | false |
| `suppress_sequences` | string `[B, S]`, "" padded | none |

Every input but `text` may also be left out (TF Serving then feeds the
SignatureDef's default, CTranslate2's, a `[1]` tensor) or sent as one
value for every text (`[1]`, `[1, S]`): the graph repeats it for each text.

Outputs: `hypotheses` string `[B, N]` (N: the batch's largest
`num_hypotheses`; a row's n-best list is its first `num_hypotheses`, best
first, the others ""), `scores` float32 `[B, N]` (0 after a row's list),
`tokens` string `[B, N, T]`, each hypothesis's tokens ("" padded),
`alignments` int32 `[B, N, T]`, the source position each token attended to
most (-1 padded, and -1 for rows without `return_attention`), and
`attention` float32 `[B, N, T, S]`, each token's attention over the source
tokens (its last decoder layer's cross-attention averaged over the heads;
0 for rows without `return_attention`, and S is 0 when no row asks).
Alignments and attention come from one more pass of the model over the
answers, run only when a row asks (`keras_attention.decoding.alignments`).
Each text of `suppress_sequences` is tokenized as the target side is, into
the sequence of tokens never produced. With `replace_unknowns`, an `<unk>`
token of an answer becomes the source token it is aligned to (as the
source text has it, where the source tokenizer can say:
`tokenize_as_strings`), in `tokens` and in the hypothesis's text.

The options mean what they mean in `keras_attention.decoding.search`. A
row whose options are out of range (a beam size outside 1 to
`MAX_BEAM_SIZE`, more hypotheses than the beam can give, a maximum length
outside 1 to `MAX_DECODING_LENGTH` or below the minimum, a repetition
penalty <= 0, a negative patience, n-gram size or minimum) fails the
request with an InvalidArgument error that names the option, the row and
its value. Source texts are cut to the export's `max_input_length` tokens, as in
the other signatures.
"""

import dataclasses
import inspect

import tensorflow as tf

from keras_attention import decoding
from keras_attention.data.pipeline import bucket_of, length_buckets, pad_to_bucket
from keras_attention.data.tokenizers import (
    END_ID,
    PAD_ID,
    UNKNOWN_ID,
    repair_utf8,
    token_ids,
)

MAX_BEAM_SIZE = 16  # the most beams a request may ask for, in every signature
# The most tokens a request may ask for: a bound on the buffers one request
# makes the server allocate.
MAX_DECODING_LENGTH = 1024
# The most draws of one prompt a request may ask for (`num_hypotheses` with
# sampling): each is a row of the search.
MAX_DRAWS = 64

# Option input -> (dtype, CTranslate2's default).
OPTIONS = {
    "beam_size": (tf.int32, 2),
    "patience": (tf.float32, 1.0),
    "num_hypotheses": (tf.int32, 1),
    "length_penalty": (tf.float32, 1.0),
    "repetition_penalty": (tf.float32, 1.0),
    "no_repeat_ngram_size": (tf.int32, 0),
    "min_decoding_length": (tf.int32, 1),
    "max_decoding_length": (tf.int32, 256),
    "disable_unk": (tf.bool, False),
    "return_attention": (tf.bool, False),
    "replace_unknowns": (tf.bool, False),
}
TEXT_OPTIONS = {"target_prefix": "", "suppress_sequences": [""]}
INPUTS = [
    tf.TensorSpec([None], tf.string, name="text"),
    tf.TensorSpec([None], tf.string, name="target_prefix"),
    *(tf.TensorSpec([None], dtype, name=name) for name, (dtype, _) in OPTIONS.items()),
    tf.TensorSpec([None, None], tf.string, name="suppress_sequences"),
]


def defaults():
    """Option input -> its default, as a warm-up request sends it."""
    return {**{name: default for name, (_, default) in OPTIONS.items()}, **TEXT_OPTIONS}


def per_text(text, options, signature="translate_batch"):
    """`options` with one value per text: an option sent (or defaulted) as
    one value `[1]` (`[1, S]`) repeated for each text. Fails the request,
    naming the signature and the option, unless each has one value per
    text or one."""
    batch_size = tf.shape(text)[0]
    repeated = {}
    for name, value in options.items():
        rows = tf.shape(value)[0]
        check = tf.debugging.Assert(
            (rows == batch_size) | (rows == 1),
            [f"{signature}: `{name}` needs one value per text (or one for all); got", rows],
        )
        with tf.control_dependencies([check]):
            shape = tf.concat([[batch_size], tf.shape(value)[1:]], 0)
            repeated[name] = tf.broadcast_to(value, shape)
    return repeated


def check_options(text, options, signature="translate_batch", names=None):
    """Fails the request, naming the option, the row and the value, unless
    every option has one value per text within its range.

    Args:
        text: string `[B]`, the texts.
        options: input name -> its values `[B, ...]`.
        signature: the signature's name, which the messages start with.
        names: `DecodingOptions` field -> the name of its input, where
            they differ (a `generate_batch`'s `max_length` is
            `max_decoding_length`). The sampling options are checked
            where the signature has them.
    """
    names = names or {}

    def name(field):
        return names.get(field, field)

    def value(field):
        return options[name(field)]

    checks = []
    batch_size = tf.shape(text)[0]
    for option, values in options.items():
        checks.append(
            tf.debugging.assert_equal(
                tf.shape(values)[0],
                batch_size,
                message=f"{signature}: `{option}` needs one value per text",
            )
        )
    beam_size, maximum = value("beam_size"), value("max_decoding_length")
    most = decoding.most_hypotheses(beam_size, value("patience"))
    most_text = "from 1 to round(beam_size * patience) (beam_size with patience 0)"
    sampling = name("sampling_topk") in options
    if sampling:  # with a beam of 1, any number of draws
        most = tf.where((beam_size == 1) & (value("sampling_topk") != 1), MAX_DRAWS, most)
        most_text += f"; with beam_size 1 and sampling, from 1 to {MAX_DRAWS}"
    ranges = [
        (
            "beam_size",
            (beam_size >= 1) & (beam_size <= MAX_BEAM_SIZE),
            f"from 1 to {MAX_BEAM_SIZE}",
        ),
        ("patience", value("patience") >= 0, ">= 0"),
        (
            "num_hypotheses",
            (value("num_hypotheses") >= 1) & (value("num_hypotheses") <= most),
            most_text,
        ),
        ("repetition_penalty", value("repetition_penalty") > 0, "> 0"),
        ("no_repeat_ngram_size", value("no_repeat_ngram_size") >= 0, ">= 0"),
        (
            "min_decoding_length",
            (value("min_decoding_length") >= 0) & (value("min_decoding_length") <= maximum),
            f"from 0 to {name('max_decoding_length')}",
        ),
        (
            "max_decoding_length",
            (maximum >= 1) & (maximum <= MAX_DECODING_LENGTH),
            f"from 1 to {MAX_DECODING_LENGTH}",
        ),
    ]
    if sampling:
        topk, temperature = value("sampling_topk"), value("sampling_temperature")
        ranges += [
            (
                "sampling_topk",
                (topk >= 0) & ((beam_size == 1) | (topk == 1) | (temperature == 0)),
                ">= 0, and 1 with a beam_size above 1 (sampling draws with beam_size 1)",
            ),
            (
                "sampling_topp",
                (value("sampling_topp") > 0) & (value("sampling_topp") <= 1),
                "in (0, 1]",
            ),
            ("sampling_temperature", temperature >= 0, ">= 0"),
        ]
    with tf.control_dependencies(checks):
        for field, valid, requirement in ranges:
            checks.append(refuse_unless(valid, signature, name(field), value(field), requirement))
    return checks


def refuse_unless(valid, signature, name, values, requirement):
    """An op that fails the request unless every row is `valid` (bool
    `[B]`), naming the signature, the input, what it `must be`, and the
    first row out of range with its value."""
    # The first row out of range (row 0 of an empty batch, which passes).
    row = tf.argmin(tf.concat([tf.cast(valid, tf.int32), [1]], 0), output_type=tf.int32)
    shown = tf.gather(tf.concat([values, tf.zeros([1], values.dtype)], 0), row)
    return tf.debugging.Assert(
        tf.reduce_all(valid),
        [f"{signature}: `{name}` must be {requirement}; row", row, "has", shown],
    )


def answers_and_groups(options, batch_size, length):
    """Zeros for every row's n-best answers, ids `[B, N, length]` and
    scores `[B, N]` (N: the largest `num_hypotheses`), and each row's
    options that set shapes (beam size, n-best size, patience) `[B, 3]`:
    each group of rows sharing them is one search (`by_groups`)."""
    width = tf.maximum(tf.reduce_max(options["num_hypotheses"]), 1)
    outputs = {
        "ids": tf.zeros([batch_size, width, length], tf.int32),
        "scores": tf.zeros([batch_size, width], tf.float32),
    }
    keys = tf.stack(
        [
            options["beam_size"],
            options["num_hypotheses"],
            tf.bitcast(options["patience"], tf.int32),
        ],
        axis=1,
    )
    return outputs, keys


def by_groups(keys, outputs, decode):
    """Runs `decode(rows)` for each group of rows with the same `keys`
    `[B, G]` (int32), so that options which set shapes (the beam size, the
    n-best's size) are one value within a group, and writes what it
    returns into `outputs` (a dict of tensors `[B, ...]`, filled in with
    what `decode` returns for the rows: `[b, ...]` each)."""
    groups, group_of_row = tf.raw_ops.UniqueV2(x=keys, axis=[0])  # [G, K], [B]

    def body(group, outputs):
        rows = tf.where(group_of_row == group)[:, 0]  # [b]
        answers = decode(rows)
        return group + 1, {
            name: tf.tensor_scatter_nd_update(value, rows[:, None], answers[name])
            for name, value in outputs.items()
        }

    _, outputs = tf.while_loop(
        lambda group, _: group < tf.shape(groups)[0], body, (tf.constant(0), outputs)
    )
    return outputs


def translate_batch(model, source_tokenizer, target_tokenizer, max_input_length, jit_compile=False):
    """The signature's `tf.function`, for `tf.saved_model.save` (which
    records its inputs' defaults: `with_defaults`). With `jit_compile`,
    each group's search is compiled by XLA (see `compiled_search`)."""
    source_vocabulary = tf.constant(source_tokenizer.vocabulary)
    target_vocabulary = tf.constant(target_tokenizer.vocabulary)
    run_search = compiled_search(model, max_input_length) if jit_compile else search

    def target_ids(texts):
        """Strings `[n]` -> target ids `[n, P]`, 0-padded, no end id."""
        ids = token_ids(target_tokenizer, texts, MAX_DECODING_LENGTH)
        return tf.where(ids == END_ID, PAD_ID, ids)

    def source_tokens(texts, source_ids):
        """The source tokens `[B, S]` behind `source_ids` `[B, S]`, as the
        texts have them where the tokenizer can say, "" padded."""
        if not hasattr(source_tokenizer, "tokenize_as_strings"):
            return tf.where(source_ids == PAD_ID, "", tf.gather(source_vocabulary, source_ids))
        tokens = source_tokenizer.tokenize_as_strings(repair_utf8(texts))[:, :max_input_length]
        return tokens.to_tensor(default_value="", shape=tf.shape(source_ids))

    def text_of(ids, tokens, replaced):
        """Hypotheses' text `[n]` from their ids `[n, T]`, or from their
        tokens `[n, T]` where one was `replaced` (bool `[n]`): a source
        token need not be in the target vocabulary."""
        text = target_tokenizer.detokenize(ids)
        if not hasattr(target_tokenizer, "detokenize_strings"):
            return text
        return tf.where(replaced, target_tokenizer.detokenize_strings(tokens), text)

    @tf.function(input_signature=INPUTS)
    def signature(text, target_prefix, *values):
        *values, suppress_sequences = values
        options = per_text(
            text,
            {
                "target_prefix": target_prefix,
                **dict(zip(OPTIONS, values, strict=True)),
                "suppress_sequences": suppress_sequences,
            },
        )
        target_prefix, suppress_sequences = options["target_prefix"], options["suppress_sequences"]
        checks = check_options(text, options)
        batch_size = tf.shape(text)[0]
        length = tf.maximum(tf.reduce_max(options["max_decoding_length"]), 1)
        outputs, keys = answers_and_groups(options, batch_size, length)
        width = tf.shape(outputs["scores"])[1]  # N

        def decode(rows):
            def of_rows(x):
                return tf.gather(x, rows)

            beam_size, num_hypotheses = (
                of_rows(options["beam_size"])[0],
                of_rows(options["num_hypotheses"])[0],
            )
            sequences = of_rows(suppress_sequences)  # [b, S]
            count = tf.shape(sequences)[1]
            suppressed = target_ids(tf.reshape(sequences, [-1]))
            suppressed = tf.reshape(suppressed, [tf.shape(rows)[0], count, -1])
            search_options = decoding.DecodingOptions(
                beam_size=beam_size,
                patience=of_rows(options["patience"])[0],
                num_hypotheses=num_hypotheses,
                length_penalty=of_rows(options["length_penalty"]),
                repetition_penalty=of_rows(options["repetition_penalty"]),
                no_repeat_ngram_size=of_rows(options["no_repeat_ngram_size"]),
                min_decoding_length=of_rows(options["min_decoding_length"]),
                max_decoding_length=of_rows(options["max_decoding_length"]),
                disable_unk=of_rows(options["disable_unk"]),
                suppress_sequences=suppressed,
                target_prefix=target_ids(of_rows(target_prefix)),
            )
            source_ids = token_ids(source_tokenizer, of_rows(text), max_input_length)
            ids, scores = run_search(model, source_ids, search_options)  # [b, N, L], [b, N]
            # An empty text's translations are its target prefix, scored 0,
            # as CTranslate2 answers it (without running the model).
            empty = tf.reduce_all(source_ids == PAD_ID, axis=1)[:, None]  # [b, 1]
            prefix = search_options.target_prefix
            prefix = tf.where(
                tf.range(tf.shape(prefix)[1])[None, :]
                < search_options.max_decoding_length[:, None],
                prefix,
                PAD_ID,
            )
            width_of_ids = tf.shape(ids)[2]
            prefix = tf.pad(
                prefix, [[0, 0], [0, tf.maximum(width_of_ids - tf.shape(prefix)[1], 0)]]
            )
            ids = tf.where(empty[..., None], prefix[:, None, :width_of_ids], ids)
            scores = tf.where(empty, 0.0, scores)
            ids = ids[:, :, :length]
            padding = [[0, 0], [0, width - tf.shape(ids)[1]]]
            return {
                "ids": tf.pad(ids, [*padding, [0, length - tf.shape(ids)[2]]]),
                "scores": tf.pad(scores, padding),
            }

        with tf.control_dependencies(checks):
            outputs = by_groups(keys, outputs, decode)
        ids = outputs["ids"]  # [B, N, L]
        ended = tf.cumsum(tf.cast(ids == END_ID, tf.int32), axis=2) > 0
        ids = tf.where(ended, PAD_ID, ids)  # the end token is not part of an answer
        real = ids != PAD_ID
        longest = tf.reduce_max(tf.reduce_sum(tf.cast(real, tf.int32), axis=2))
        ids = ids[:, :, : tf.maximum(longest, 1)]  # [B, N, T]
        tokens = tf.where(ids == PAD_ID, "", tf.gather(target_vocabulary, ids))  # [B, N, T]

        # Alignments: one more pass of the model, only when a row asks.
        return_attention, replace = options["return_attention"], options["replace_unknowns"]
        source_ids = token_ids(source_tokenizer, text, max_input_length)  # [B, S]

        def not_asked():
            return tf.fill(tf.shape(ids), -1), tf.zeros(tf.concat([tf.shape(ids), [0]], 0))

        positions, attention = tf.cond(
            tf.reduce_any(return_attention | replace),
            lambda: alignments(model, source_ids, ids),  # [B, N, T], [B, N, T, S]
            not_asked,
        )
        unknown = (ids == UNKNOWN_ID) & (positions >= 0) & replace[:, None, None]  # [B, N, T]

        def replaced():
            # Each unknown token: the source token at its position.
            source = source_tokens(text, source_ids)  # [B, S]
            aligned = tf.gather(source, tf.maximum(positions, 0), batch_dims=1)  # [B, N, T]
            return tf.where(unknown, aligned, tokens)

        tokens = tf.cond(tf.reduce_any(unknown), replaced, lambda: tokens)  # [B, N, T]
        hypotheses = text_of(
            tf.reshape(ids, [-1, tf.shape(ids)[2]]),
            tf.reshape(tokens, [-1, tf.shape(ids)[2]]),
            tf.reshape(tf.reduce_any(unknown, axis=2), [-1]),
        )
        hypotheses = tf.reshape(hypotheses, [batch_size, width])
        return {
            "hypotheses": hypotheses,
            "scores": outputs["scores"],
            "tokens": tokens,
            "alignments": tf.where(return_attention[:, None, None], positions, -1),
            "attention": tf.where(return_attention[:, None, None, None], attention, 0.0),
        }

    return with_defaults(signature, defaults())


def with_defaults(signature, defaults):
    """`signature` (a `tf.function` with an input signature) as a
    `tf.function` whose option inputs have `defaults` (input name -> its
    value, sent as one value `[1]`, `[[""]]` for a list of texts).
    `tf.saved_model.save` records Python defaults that are tensors in the
    SignatureDef's `defaults`, which TF Serving feeds for the inputs a
    request leaves out (TF's Python loader does not); the graph repeats a
    `[1]` value for every text (`per_text`). The new function calls
    `signature`'s concrete function, traced once: the save traces this
    thin function again, not the search."""
    concrete = signature.get_concrete_function()
    inputs = signature.input_signature
    names = [spec.name for spec in inputs]
    given = {
        spec.name: tf.constant([defaults[spec.name]], spec.dtype)
        for spec in inputs
        if spec.name in defaults
    }
    Parameter = inspect.Parameter
    arguments = inspect.Signature(
        [
            Parameter(
                name, Parameter.POSITIONAL_OR_KEYWORD, default=given.get(name, Parameter.empty)
            )
            for name in names
        ]
    )

    def call(*args, **kwargs):
        bound = arguments.bind(*args, **kwargs)
        bound.apply_defaults()
        return concrete(*(bound.arguments[name] for name in names))

    # (tf.function reads the inputs' names and defaults from here.)
    call.__signature__ = arguments
    call.__name__ = signature.__name__
    return tf.function(call, input_signature=inputs, autograph=False)


# The search is written with `keras.ops` for every backend: AutoGraph has
# nothing to convert in it.
search = tf.autograph.experimental.do_not_convert(decoding.search)
alignments = tf.autograph.experimental.do_not_convert(decoding.alignments)


def compiled_search(model, max_input_length):
    """`search(model, source_ids, options)` compiled by XLA: one program
    per batch size, beam size, n-best size and patience (a request's
    group), and per length of its padded sources, target prefixes and
    answer buffers. Those lengths are rounded up to a few (powers of two,
    `length_buckets`), so that a service compiles a few programs, not one
    per request; every option given per row is an input of the program,
    not part of it. A graph runs one small operation after another, each
    with its own overhead, and a step of the search is hundreds of them:
    compiled, a one-sentence request ran 6 times as fast.

    Every step's work grows with the answer buffers' width (each step
    attends over it, and beam search reorders it), and the width must
    hold the largest `max_decoding_length` (256 by default), though most
    answers are a few dozen tokens. So the search first runs with room
    for answers of up to twice the longest source and 16 tokens more;
    only if that cut a row short (`search`'s `return_cut`) does it run
    again with the whole width (a program compiled when first needed).
    The answers are the same."""
    source_buckets = length_buckets(max_input_length)
    answer_buckets = length_buckets(MAX_DECODING_LENGTH, shortest=16)
    prefix_buckets = length_buckets(MAX_DECODING_LENGTH, shortest=1)

    @tf.function(jit_compile=True)
    def run(source_ids, room, beam_size, patience, num_hypotheses, per_row):
        options = decoding.DecodingOptions(
            beam_size=beam_size, patience=patience, num_hypotheses=num_hypotheses, **per_row
        )
        return search(model, source_ids, options, room=room, return_cut=True)

    def compiled(model_, source_ids, options):
        largest = tf.reduce_max(options.max_decoding_length)
        longest_source = tf.reduce_max(tf.reduce_sum(tf.cast(source_ids != PAD_ID, tf.int32), 1))
        room = bucket_of(largest, answer_buckets)
        first_room = bucket_of(tf.minimum(largest, 2 * longest_source + 16), answer_buckets)
        per_row = {
            field.name: getattr(options, field.name)
            for field in dataclasses.fields(options)
            if field.name not in ("beam_size", "patience", "num_hypotheses")
        }
        per_row["target_prefix"] = pad_to_bucket(per_row["target_prefix"], prefix_buckets)
        source_ids = pad_to_bucket(source_ids, source_buckets)
        group = (options.beam_size, options.patience, options.num_hypotheses)
        ids, scores, cut = run(source_ids, first_room, *group, per_row)
        return tf.cond(
            tf.reduce_any(cut),
            lambda: run(source_ids, room, *group, per_row)[:2],
            lambda: (ids, scores),
        )

    return compiled


def score_batch(model, source_tokenizer, target_tokenizer, max_input_length):
    """The `score_batch` signature's `tf.function`."""
    target_vocabulary = tf.constant(target_tokenizer.vocabulary)

    @tf.function(
        input_signature=[
            tf.TensorSpec([None], tf.string, name="source"),
            tf.TensorSpec([None], tf.string, name="target"),
        ]
    )
    def signature(source, target):
        tf.debugging.assert_equal(
            tf.shape(target)[0], tf.shape(source)[0], message="score_batch: one target per source"
        )
        source_ids = token_ids(source_tokenizer, source, max_input_length)
        target_ids = token_ids(target_tokenizer, target, MAX_DECODING_LENGTH - 1)
        target_ids = tf.where(target_ids == END_ID, PAD_ID, target_ids)
        labels, log_probs = score_targets(model, source_ids, target_ids)
        return {
            "tokens": tf.where(labels == PAD_ID, "", tf.gather(target_vocabulary, labels)),
            "log_probs": log_probs,
            "log_prob": tf.reduce_sum(log_probs, axis=1),
        }

    return signature


score_targets = tf.autograph.experimental.do_not_convert(decoding.score_targets)
