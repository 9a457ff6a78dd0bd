"""The serving functions of an export: text in, text out, all in one graph.

What every task's server shares (each task's own is a module beside this
one: `translation.py`, `language_model.py`, `classification.py`).

Each server is a `tf.Module` that holds a trained model and its tokenisers
and offers its signatures as `tf.function`s with plain tensor inputs and
outputs. Everything between the strings runs inside the graph (UTF-8 repair,
tokenisation, truncation, the model, the decoding loop with its KV cache,
detokenisation), so TF Serving runs the SavedModel with only TensorFlow's
and TF Text's ops: none of this package's Python is needed there.

Every input and output is batch-major, its first dimension the batch, so
TF Serving's server-side batching can concatenate requests. `serving_default`
takes only the texts and decodes with the beam size and length fixed at
export. Per-request options are `[B]` inputs of other signatures
(`translate_with_options`, `complete_with_options`, `complete_by_sampling`,
and CTranslate2's `translate_batch` and `generate_batch`).

One search path: every signature of a task decodes through one shared
`tf.function` (a translator's `row_search`, a language model's
`row_generate`), CTranslate2's search with per-row `DecodingOptions`; the
older signatures give it their own fixed options (beam search's stopping
rule and length penalty, no constraint). Rows that share the options that
set shapes (beam size, n-best size, patience) are decoded together, each
group on its own (`by_groups`), so a row's answer does not depend on the
other rows of a batch.

No text a client can send is an error inside the graph: bytes that are not
UTF-8 are repaired (U+FFFD), texts longer than the export's
`max_input_length` tokens are truncated (as CTranslate2 cuts them), and an
empty text or an empty batch gets a well-formed answer. Options out of
range fail the request with an InvalidArgument error that names the
option, its limit and the row: a `beam_size` outside 1 .. `MAX_BEAM_SIZE`,
a `max_decoding_length` outside 1 .. the export's (0 asks for the
export's own),
and in `translate_batch` and `generate_batch` every option
(`check_options`). Every sampling option has a meaning
for every value (see `LanguageModelServer`).
"""

import inspect
from types import SimpleNamespace

import tensorflow as tf

from keras_attention import decoding
from keras_attention.data.tokenizers import END_ID, PAD_ID, padded, repair_utf8, token_ids
from keras_attention.decoding import option_table

# (The export's bounds live with the options' table, whose ranges name them.)
MAX_BEAM_SIZE = option_table.MAX_BEAM_SIZE
MAX_DECODING_LENGTH = option_table.MAX_DECODING_LENGTH
MAX_DRAWS = option_table.MAX_DRAWS
TEXTS = tf.TensorSpec([None], tf.string)
PER_ROW_INT = tf.TensorSpec([None], tf.int32)
PER_ROW_FLOAT = tf.TensorSpec([None], tf.float32)


def token_strings(vocabulary, ids):
    """Ids (any shape) -> their tokens, "" for padding: what every signature
    that answers tokens answers (`tokens`, `source_tokens`, `target_tokens`)."""
    return tf.where(ids == PAD_ID, "", tf.gather(vocabulary, ids))


def ids_without_end(tokenizer, texts, limit=MAX_DECODING_LENGTH):
    """Strings `[n]` -> their ids `[n, M]` (at most `limit`), 0-padded,
    without the end id: target prefixes, suppressed sequences, targets to
    score."""
    ids = token_ids(tokenizer, texts, limit)
    return tf.where(ids == END_ID, PAD_ID, ids)


def suppressed_ids(tokenizer, sequences):
    """Each row's sequences never to produce, strings `[b, S]` ("" padded)
    -> ids `[b, S, M]` (`ids_without_end`)."""
    ids = ids_without_end(tokenizer, tf.reshape(sequences, [-1]))
    return tf.reshape(ids, [tf.shape(sequences)[0], tf.shape(sequences)[1], -1])


def group_answers(ids, scores, width, length):
    """A group's answers, ids `[b, n, L]` and scores `[b, n]`, as
    `by_groups` writes them into `answers_and_groups`' zeros: ids cut or
    padded to `[b, width, length]`, scores padded to `[b, width]`."""
    ids = ids[:, :, :length]
    padding = [[0, 0], [0, width - tf.shape(ids)[1]]]
    return {
        "ids": tf.pad(ids, [*padding, [0, length - tf.shape(ids)[2]]]),
        "scores": tf.pad(scores, padding),
    }


def score_outputs(vocabulary, labels, log_probs):
    """A `score_batch` signature's outputs: the tokens scored, "" padded,
    their log-probabilities `[B, T]` and their sum `[B]`."""
    return {
        "tokens": token_strings(vocabulary, labels),
        "log_probs": log_probs,
        "log_prob": tf.reduce_sum(log_probs, axis=1),
    }


def cut_at_end(ids):
    """Answers' ids `[B, N, L]` with their end token and what follows it
    as padding (the end token is not part of an answer), cut to the
    longest answer (at least one token wide): `[B, N, T]`."""
    ended = tf.cumsum(tf.cast(ids == END_ID, tf.int32), axis=2) > 0
    ids = tf.where(ended, PAD_ID, ids)
    longest = tf.reduce_max(tf.reduce_sum(tf.cast(ids != PAD_ID, tf.int32), axis=2))
    return ids[:, :, : tf.maximum(longest, 1)]


def within_limits(signature, beam_size, max_decoding_length, decoding_limit):
    """A `*_with_options` request's `beam_size` and `max_decoding_length`
    (`[B]`; None where the signature has no such input) with a
    `max_decoding_length` of 0 read as the export's own (`decoding_limit`),
    and the ops that fail the request, naming the limit, where a value is
    out of range."""
    length = tf.where(max_decoding_length == 0, decoding_limit, max_decoding_length)
    checks = [
        refuse_unless(
            (length >= 1) & (length <= decoding_limit),
            signature,
            "max_decoding_length",
            length,
            f"from 1 to {decoding_limit} (the max_decoding_length of the export; 0 asks for it)",
        )
    ]
    if beam_size is not None:
        checks.append(
            refuse_unless(
                (beam_size >= 1) & (beam_size <= MAX_BEAM_SIZE),
                signature,
                "beam_size",
                beam_size,
                f"from 1 to {MAX_BEAM_SIZE}",
            )
        )
    return length, checks


def older_options(rows, options, given, own):
    """The options an older signature gives the search, `[rows]` each:
    those `given` (input name -> `[rows]`, the signature's own inputs),
    and every other one of `options` (input name -> (dtype, default): the
    search's, as `option_table` has them) at its value in `own` (the
    signature's fixed rules), else at its default, the same for every
    row."""
    fixed = {
        name: tf.fill([rows], tf.constant(own.get(name, default), dtype))
        for name, (dtype, default) in options.items()
        if name not in given
    }
    return fixed | given


def check_per_row(texts, options):
    """The ops that fail the request unless each option has one value per
    text."""
    return [
        tf.debugging.assert_equal(
            tf.shape(option)[0],
            tf.shape(texts)[0],
            message="each per-request option needs one value per text",
        )
        for option in options
    ]


def tokenize_signature(tokenizer):
    """The `tokenize` signature: `text` `[B]` -> `tokens` `[B, S]` (each
    text's tokens, "" for padding; the model reads the first
    `max_input_length`) and their number, `length` `[B]`, what a `Translator` or `Generator`
    cuts batches of tokens by."""
    vocabulary = tf.constant(tokenizer.vocabulary)

    @tf.function(input_signature=[TEXTS])
    def tokenize(text):
        ids = padded(tokenizer.tokenize(repair_utf8(text)))  # all of them
        return {
            "tokens": token_strings(vocabulary, ids),
            "length": tf.reduce_sum(tf.cast(ids != PAD_ID, tf.int32), axis=1),
        }

    return tokenize


class Server(tf.Module):
    """What every server keeps: its signatures, the TensorFlow variables they
    read, and the tokenisers (whose lookup tables are resources to save).

    The variables are the `tf.Variable`s the traced signatures capture, kept
    as a list, not reached through the Keras model: only then does a model
    server's loader (TF1-style, by variable name) find them. Keras'
    `ExportArchive` does the same. The model itself is used only through
    closures, while the signatures are traced.

    Each signature is traced once, here, and kept as its concrete function.
    Kept as a `tf.function`, `tf.saved_model.save` would trace it all over
    again (it traces under a context of its own, a new cache key): a third
    of a tiny translator's export time.
    Signatures named in `with_defaults` are handed to the save as their
    `tf.function`, whose Python defaults (tensors) the save records in the
    SignatureDef's `defaults`: a thin function over a concrete one
    (`with_defaults`), cheap to trace again.
    """

    def __init__(self, tokenizers, signatures, name, with_defaults=()):
        super().__init__(name=name)
        self.tokenizers = list(tokenizers)
        self._signature_names = list(signatures)
        # (In a plain object, which the module does not track: the save
        # would otherwise keep these functions in the SavedModel too.)
        self._with_defaults = SimpleNamespace(**{name: signatures[name] for name in with_defaults})
        variables = {}
        for signature_name, function in signatures.items():
            concrete_function = function.get_concrete_function()
            setattr(self, signature_name, concrete_function)
            for variable in concrete_function.variables:
                variables[id(variable)] = variable
        self.model_variables = list(variables.values())

    def signatures(self):
        """Signature name -> its traced function (its `tf.function` where its
        inputs have defaults), for `tf.saved_model.save`."""
        return {
            name: getattr(self._with_defaults, name, None) or getattr(self, name)
            for name in self._signature_names
        }

    # Signature name -> {option input: the value a warm-up request sends}.
    option_inputs = {}
    # Signature name -> its text input, where not `text_input`.
    text_inputs = {}

    def warmup_inputs(self, texts):
        """Signature name -> inputs of one warm-up request."""
        requests = {}
        for name in self._signature_names:
            options = self.option_inputs.get(name, {})
            requests[name] = {
                self.text_inputs.get(name, self.text_input): texts,
                **{option: [value] * len(texts) for option, value in options.items()},
            }
        return requests


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


def check_options(text, options, signature="translate_batch", api=option_table.TRANSLATOR):
    """Fails the request, naming the option, the row and the value, unless
    every option has one value per text within its range.

    Each option's range is its row's in `option_table` (for every option
    of `api` the request has); the rules between options are here
    (`num_hypotheses` and the beam, the minimum length and the maximum,
    sampling and the beam).

    Args:
        text: string `[B]`, the texts.
        options: input name -> its values `[B, ...]`.
        signature: the signature's name, which the messages start with.
        api: `option_table.TRANSLATOR` or `GENERATOR`, whose names the
            inputs have (a `generate_batch`'s `max_length` is
            `max_decoding_length`). The sampling options are checked
            where the signature has them.
    """
    rows = {option.name: option for option in option_table.options_of(api)}

    def name(field):
        return option_table.input_name(rows[field], api) if field in rows else field

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
    sampling = name("sampling_topk") in options

    def num_hypotheses_rule():
        beam_size = value("beam_size")
        most = decoding.most_hypotheses(beam_size, value("patience"))
        most_text = "from 1 to round(beam_size * patience) (beam_size with patience 0)"
        if sampling:  # with a beam of 1, any number of draws
            most = tf.where((beam_size == 1) & (value("sampling_topk") != 1), MAX_DRAWS, most)
            most_text += f"; with beam_size 1 and sampling, from 1 to {MAX_DRAWS}"
        count = value("num_hypotheses")
        return (count >= 1) & (count <= most), most_text

    def min_decoding_length_rule():
        minimum = value("min_decoding_length")
        valid = (minimum >= 0) & (minimum <= value("max_decoding_length"))
        return valid, f"from 0 to {name('max_decoding_length')}"

    def sampling_topk_rule():
        topk = value("sampling_topk")
        beam_size, temperature = value("beam_size"), value("sampling_temperature")
        return (
            (topk >= 0) & ((beam_size == 1) | (topk == 1) | (temperature == 0)),
            ">= 0, and 1 with a beam_size above 1 (sampling draws with beam_size 1)",
        )

    # The rules between options, in place of those options' own ranges.
    joint_rules = {
        "num_hypotheses": num_hypotheses_rule,
        "min_decoding_length": min_decoding_length_rule,
        "sampling_topk": sampling_topk_rule,
    }
    ranges = []
    for option in option_table.OPTIONS:
        if option.range is None or option.name not in rows or name(option.name) not in options:
            continue
        if option.name in joint_rules:
            ranges.append((option.name, *joint_rules[option.name]()))
        else:
            valid = option.within(value(option.name), served=True)
            ranges.append((option.name, valid, option.served_requirement()))
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
