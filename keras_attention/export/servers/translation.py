"""A translator's export (`Transformer`, `Seq2SeqAttention`): its server
with every signature it serves, the older ones and CTranslate2's
`translate_batch` and `score_batch`.

`translate_batch` is CTranslate2's `translate_batch`, with text in and
text out, every option a `[B]` input; `score_batch` is its `score_batch`.

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

import tensorflow as tf

from keras_attention import decoding
from keras_attention.data.pipeline import bucket_of, length_buckets, pad_to_bucket
from keras_attention.data.tokenizers import PAD_ID, UNKNOWN_ID, repair_utf8, token_ids
from keras_attention.decoding import cross_attention, option_table
from keras_attention.decoding.beam import LENGTH_PENALTY
from keras_attention.export.servers.base import (
    MAX_DECODING_LENGTH,
    PER_ROW_INT,
    TEXTS,
    Server,
    answers_and_groups,
    by_groups,
    check_options,
    check_per_row,
    cut_at_end,
    group_answers,
    ids_without_end,
    older_options,
    per_text,
    score_outputs,
    suppressed_ids,
    token_strings,
    tokenize_signature,
    with_defaults,
    within_limits,
)


def signature_options():
    """Option input -> (dtype, CTranslate2's default), in the inputs'
    order: `translate_batch`'s options in `option_table`."""
    return {
        name: (tf.as_dtype(dtype), default)
        for name, (dtype, default) in option_table.translator_options().items()
    }


def signature_inputs():
    """The `translate_batch` signature's inputs, in order: the texts, the
    target prefixes, the options of `option_table`, the suppressed
    sequences."""
    return [
        tf.TensorSpec([None], tf.string, name="text"),
        tf.TensorSpec([None], tf.string, name="target_prefix"),
        *(
            tf.TensorSpec([None], dtype, name=name)
            for name, (dtype, _) in signature_options().items()
        ),
        tf.TensorSpec([None, None], tf.string, name="suppress_sequences"),
    ]


def search_options():
    """The options a search of `translate_batch`'s takes, per row, with
    their dtypes: those of `signature_options` that choose the answers
    (`DecodingOptions` fields; `return_attention` and `replace_unknowns`
    only add to them)."""
    return {
        option.name: tf.as_dtype(option.dtype)
        for option in option_table.options_of(option_table.TRANSLATOR)
        if option.decoding
    }


def defaults():
    """Option input -> its default, as a warm-up request sends it."""
    return {
        **{name: default for name, (_, default) in signature_options().items()},
        "target_prefix": "",
        "suppress_sequences": [""],
    }


class TranslationServer(Server):
    """Signatures of an encoder-decoder (`Transformer`, `Seq2SeqAttention`).

    - `serving_default`: `text` `[B]` -> `translation` `[B]`, decoded with
      the export's beam size and maximum length.
    - `translate_with_attention`: the same, plus `source_tokens` `[B, S]`,
      `target_tokens` `[B, T]` ("" for padding) and `attention`
      `[B, H, T, S]`, the last decoder layer's cross-attention weights per
      head (H = 1 for the RNN): row t is what output token t attended to.
    - `translate_with_options`: `text`, `beam_size` and
      `max_decoding_length`, all `[B]` -> `translation` `[B]`, each row
      with its own options.
    - `translate_batch` and `score_batch`: CTranslate2's
      (below).
    - `tokenize`: `text` `[B]` -> `tokens` `[B, S]` (each text's source
      tokens, "" for padding; the model reads the first
      `max_input_length`) and their number, `length` `[B]` (what a
      `Translator` cuts batches of tokens by, and what `python -m
      keras_attention.translate` warns of when it is over
      `max_input_length`).

    Every signature searches with `row_search`, `translate_batch`'s
    search (the older ones with their own options: beam search's stopping
    rule, the export's length penalty or beam search's own, no
    constraint). With `jit_compile=True` each group's search is compiled
    by XLA (`compiled_search`: sources, prefixes and answer buffers padded
    to a few lengths). TF Serving runs it only with
    `--xla_cpu_compilation_enabled=true`.
    """

    text_input = "text"

    def __init__(self, model, tokenizers, settings):
        source_tokenizer, target_tokenizer = tokenizers["source"], tokenizers["target"]
        source_vocabulary = tf.constant(source_tokenizer.vocabulary)
        target_vocabulary = tf.constant(target_tokenizer.vocabulary)
        # (The options signature's inputs take the names `beam_size` and
        # `max_decoding_length`: the export's are these.)
        input_limit, decoding_limit = settings.max_input_length, settings.decoding_length
        beam_size = export_beam_size = settings.beam_size
        jit_compile = settings.jit_compile
        penalty = settings.length_penalty  # (None: beam search's own)
        self.option_inputs = {
            "translate_with_options": {
                "beam_size": beam_size,
                "max_decoding_length": decoding_limit,
            },
            "translate_batch": defaults(),
            "score_batch": {"target": ""},
        }
        self.text_inputs = {"score_batch": "source"}

        search_rows = row_search(
            model, source_tokenizer, target_tokenizer, input_limit, jit_compile
        )
        # The older signatures' own rules: beam search's stopping rule and
        # length penalty (the export's, else beam search's own), no
        # minimum; the other options at translate_batch's defaults (no
        # constraint, the best hypothesis alone).
        own = {
            "patience": 0.0,
            "length_penalty": LENGTH_PENALTY if penalty is None else penalty,
            "min_decoding_length": 0,
        }
        searched = {name: signature_options()[name] for name in search_options()}

        def best(text, beam_size, max_decoding_length):
            """Each text's best translation, ids `[B, L]` (its end token
            and padding after it), by the search of `translate_batch`."""
            rows = tf.shape(text)[0]
            given = {"beam_size": beam_size, "max_decoding_length": max_decoding_length}
            options = older_options(rows, searched, given, own)
            no_text = tf.fill([rows], "")
            return search_rows(text, no_text, no_text[:, None], options)["ids"][:, 0]

        def translate(text):
            rows = tf.shape(text)[0]
            output_ids = best(
                text, tf.fill([rows], export_beam_size), tf.fill([rows], decoding_limit)
            )
            return token_ids(source_tokenizer, text, input_limit), output_ids

        @tf.function(input_signature=[TEXTS])
        def serving_default(text):
            _, output_ids = translate(text)
            return {"translation": target_tokenizer.detokenize(output_ids)}

        @tf.function(input_signature=[TEXTS])
        def translate_with_attention(text):
            source_ids, output_ids = translate(text)
            attention = cross_attention(model, source_ids, output_ids)  # [B, H, T, S]
            real = tf.cast(output_ids != PAD_ID, tf.float32)[:, None, :, None]
            return {
                "translation": target_tokenizer.detokenize(output_ids),
                "source_tokens": token_strings(source_vocabulary, source_ids),
                "target_tokens": token_strings(target_vocabulary, output_ids),
                "attention": attention * real,  # rows after the end are 0
            }

        @tf.function(input_signature=[TEXTS, PER_ROW_INT, PER_ROW_INT])
        def translate_with_options(text, beam_size, max_decoding_length):
            length, checks = within_limits(
                "translate_with_options", beam_size, max_decoding_length, decoding_limit
            )
            checks += check_per_row(text, [beam_size, max_decoding_length])
            with tf.control_dependencies(checks):
                output_ids = best(text, beam_size, length)
            return {"translation": target_tokenizer.detokenize(output_ids)}

        super().__init__(
            [source_tokenizer, target_tokenizer],
            {
                "serving_default": serving_default,
                "translate_with_attention": translate_with_attention,
                "translate_with_options": translate_with_options,
                "translate_batch": translate_batch(
                    model, search_rows, source_tokenizer, target_tokenizer, input_limit
                ),
                "score_batch": score_batch(model, source_tokenizer, target_tokenizer, input_limit),
                "tokenize": tokenize_signature(source_tokenizer),
            },
            name="translation_server",
            with_defaults=["translate_batch"],
        )


def row_search(model, source_tokenizer, target_tokenizer, max_input_length, jit_compile=False):
    """The search every signature of a translator decodes with, a
    `tf.function` traced once and shared by them: `search_rows(text [B],
    target_prefix [B], suppress_sequences [B, S], options)` (`options`:
    `search_options()`' names -> `[B]`, one value per text) ->
    `{"ids": [B, N, L], "scores": [B, N]}`, each row's n-best answers, best
    first, with their end token (N: the largest `num_hypotheses`; L: the
    largest `max_decoding_length`). The rows that share the options that
    set shapes (beam size, n-best size, patience) are searched together
    (`by_groups`), so a row's answer is the one it gets alone. With
    `jit_compile`, each group's search is compiled by XLA
    (`compiled_search`)."""
    run_search = compiled_search(model, max_input_length) if jit_compile else search
    per_row = search_options()
    specs = {name: tf.TensorSpec([None], dtype) for name, dtype in per_row.items()}

    @tf.function(input_signature=[TEXTS, TEXTS, tf.TensorSpec([None, None], tf.string), specs])
    def search_rows(text, target_prefix, suppress_sequences, options):
        batch_size = tf.shape(text)[0]
        length = tf.maximum(tf.reduce_max(options["max_decoding_length"]), 1)
        outputs, keys = answers_and_groups(options, batch_size, length)
        width = tf.shape(outputs["scores"])[1]  # N

        def decode(rows):
            def of_rows(x):
                return tf.gather(x, rows)

            suppressed = suppressed_ids(target_tokenizer, of_rows(suppress_sequences))
            search_options = decoding.DecodingOptions(
                beam_size=of_rows(options["beam_size"])[0],
                patience=of_rows(options["patience"])[0],
                num_hypotheses=of_rows(options["num_hypotheses"])[0],
                **{
                    name: of_rows(options[name])
                    for name in per_row
                    if name not in ("beam_size", "patience", "num_hypotheses")
                },
                suppress_sequences=suppressed,
                target_prefix=ids_without_end(target_tokenizer, of_rows(target_prefix)),
            )
            source_ids = token_ids(source_tokenizer, of_rows(text), max_input_length)
            ids, scores = run_search(model, source_ids, search_options)  # [b, N, L], [b, N]
            return group_answers(ids, scores, width, length)

        return by_groups(keys, outputs, decode)

    return search_rows


def translate_batch(model, search_rows, source_tokenizer, target_tokenizer, max_input_length):
    """The signature's `tf.function`, for `tf.saved_model.save` (which
    records its inputs' defaults: `with_defaults`), over `search_rows`
    (`row_search`)."""
    source_vocabulary = tf.constant(source_tokenizer.vocabulary)
    target_vocabulary = tf.constant(target_tokenizer.vocabulary)

    def source_tokens(texts, source_ids):
        """The source tokens `[B, S]` behind `source_ids` `[B, S]`, as the
        texts have them where the tokenizer can say, "" padded."""
        if not hasattr(source_tokenizer, "tokenize_as_strings"):
            return token_strings(source_vocabulary, source_ids)
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

    names, per_row = list(signature_options()), search_options()

    @tf.function(input_signature=signature_inputs())
    def signature(text, target_prefix, *values):
        *values, suppress_sequences = values
        options = per_text(
            text,
            {
                "target_prefix": target_prefix,
                **dict(zip(names, values, strict=True)),
                "suppress_sequences": suppress_sequences,
            },
        )
        checks = check_options(text, options)
        batch_size = tf.shape(text)[0]
        with tf.control_dependencies(checks):
            outputs = search_rows(
                text,
                options["target_prefix"],
                options["suppress_sequences"],
                {name: options[name] for name in per_row},
            )
        width = tf.shape(outputs["scores"])[1]  # N
        # An empty text's translations are its target prefix (cut to its
        # max_decoding_length), scored 0, as CTranslate2 answers it
        # (without running the model).
        source_ids = token_ids(source_tokenizer, text, max_input_length)  # [B, S]
        empty = tf.reduce_all(source_ids == PAD_ID, axis=1)  # [B]
        ids = outputs["ids"]  # [B, N, L]
        prefix = ids_without_end(target_tokenizer, options["target_prefix"])  # [B, P]
        length = tf.shape(ids)[2]
        prefix = tf.pad(prefix, [[0, 0], [0, tf.maximum(length - tf.shape(prefix)[1], 0)]])
        prefix = prefix[:, :length]
        kept = tf.range(length)[None, :] < options["max_decoding_length"][:, None]
        prefix = tf.where(kept, prefix, PAD_ID)
        # (Each row's own n-best: the rest of its N stay empty.)
        listed = tf.range(width)[None, :] < options["num_hypotheses"][:, None]  # [B, N]
        empty = empty[:, None] & listed
        ids = tf.where(empty[..., None], prefix[:, None, :], ids)
        scores = tf.where(empty, 0.0, outputs["scores"])  # [B, N]
        ids = cut_at_end(ids)  # [B, N, T]
        tokens = token_strings(target_vocabulary, ids)  # [B, N, T]

        # Alignments: one more pass of the model, only when a row asks.
        return_attention, replace = options["return_attention"], options["replace_unknowns"]

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
            "scores": scores,
            "tokens": tokens,
            "alignments": tf.where(return_attention[:, None, None], positions, -1),
            "attention": tf.where(return_attention[:, None, None, None], attention, 0.0),
        }

    return with_defaults(signature, defaults())


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
        target_ids = ids_without_end(target_tokenizer, target, MAX_DECODING_LENGTH - 1)
        labels, log_probs = score_targets(model, source_ids, target_ids)
        return score_outputs(target_vocabulary, labels, log_probs)

    return signature


score_targets = tf.autograph.experimental.do_not_convert(decoding.score_targets)
