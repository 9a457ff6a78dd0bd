"""A language model's export (`TransformerLM`): its server with every
signature it serves, the older ones and CTranslate2's `Generator`'s
`generate_batch` and `score_batch`.

`generate_batch` is CTranslate2's `Generator.generate_batch` and
`score_batch` its `score_batch`, with text in and text out, every option a
`[B]` input.

`generate_batch` inputs (B prompts; every option one value per prompt, or
one value `[1]` for them all; a request may leave any option out, and TF
Serving then sends the SignatureDef's default, CTranslate2's, below):

| input | dtype, shape | CTranslate2's default |
|---|---|---|
| `prompt` | string `[B]` (text, not tokens) | |
| `beam_size` | int32 `[B]` | 1 |
| `patience` | float32 `[B]` (0: the zoo's stopping rule) | 1 |
| `num_hypotheses` | int32 `[B]` | 1 |
| `length_penalty` | float32 `[B]` | 1 |
| `repetition_penalty` | float32 `[B]` | 1 |
| `no_repeat_ngram_size` | int32 `[B]` | 0 |
| `disable_unk` | bool `[B]` | false |
| `max_length` | int32 `[B]` | 512 |
| `min_length` | int32 `[B]` | 0 |
| `sampling_topk` | int32 `[B]` | 1 |
| `sampling_topp` | float32 `[B]` | 1 |
| `sampling_temperature` | float32 `[B]` | 1 |
| `include_prompt_in_result` | bool `[B]` | true |
| `seed` | int32 `[B]` (each row's own draws) | |
| `suppress_sequences` | string `[B, S]`, "" padded | none |

Outputs: `sequences` string `[B, N]` (N: the batch's largest
`num_hypotheses`, with a beam of 1 and sampling that many draws; a row's
n-best list is its first `num_hypotheses`, best
first, the others ""), each the prompt and its continuation as text (the
continuation alone with `include_prompt_in_result` false); `scores`
float32 `[B, N]` (0 after a row's list); `tokens` string `[B, N, T]`,
each result's tokens ("" padded; a prompt's start token left out, as
CTranslate2 leaves out its BOS). The end token ends a result and is not
part of it.

What the options count and mean: `keras_attention.decoding.generate`
(with the prompt in the result, `max_length` and `min_length` count its
tokens after the start token, as CTranslate2's do). A prompt is tokenized
as the export's other signatures tokenize it (the start token first where
the model's prompts have one) and cut to the export's `max_input_length`
tokens.
A model with learned positions stops where they end. An empty prompt of a
model whose prompts have no start token (GPT-2's) has no token to start
from: its result is "", scored 0 (CTranslate2 refuses it). Out-of-range
options fail the request with an InvalidArgument error naming the option,
the row and its value (`check_options`).

`score_batch`: `text` string `[B]` -> `tokens` string `[B, T]` (each
text's tokens after the first: the start token is read, not scored, as
CTranslate2 reads its first token), `log_probs` float32 `[B, T]` (each
token's log-probability given those before it, 0 at padding) and
`log_prob` `[B]` (their sum). No end token is added, as CTranslate2 adds
none.
"""

import tensorflow as tf

from keras_attention import decoding
from keras_attention.data.pipeline import length_buckets, pad_to_bucket
from keras_attention.data.tokenizers import END_ID, PAD_ID, prompt_start, token_ids
from keras_attention.decoding import option_table
from keras_attention.decoding.beam import LENGTH_PENALTY
from keras_attention.export.servers.base import (
    PER_ROW_FLOAT,
    PER_ROW_INT,
    TEXTS,
    Server,
    answers_and_groups,
    by_groups,
    check_options,
    check_per_row,
    cut_at_end,
    group_answers,
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
    """Option input -> (dtype, CTranslate2's `generate_batch` default), in
    the inputs' order: `generate_batch`'s options in `option_table`, by
    its names."""
    return {
        name: (tf.as_dtype(dtype), default)
        for name, (dtype, default) in option_table.generator_options().items()
    }


def signature_inputs():
    """The `generate_batch` signature's inputs, in order: the prompts, the
    options of `option_table`, the suppressed sequences."""
    return [
        tf.TensorSpec([None], tf.string, name="prompt"),
        *(
            tf.TensorSpec([None], dtype, name=name)
            for name, (dtype, _) in signature_options().items()
        ),
        tf.TensorSpec([None, None], tf.string, name="suppress_sequences"),
    ]


def defaults():
    """Option input -> its default, as a warm-up request sends it."""
    return {
        **{name: default for name, (_, default) in signature_options().items()},
        "suppress_sequences": [""],
    }


def prompt_ids(tokenizer, texts, max_input_length):
    """Strings `[B]` -> prompt ids `[B, P]`, right-padded with 0: the start
    id first where the model's prompts have one, then at most `max_input_length`
    of the text's ids."""
    ids = token_ids(tokenizer, texts, max_input_length)
    start = prompt_start(tokenizer)
    if not start:
        return ids
    return tf.concat([tf.fill([tf.shape(ids)[0], 1], start[0]), ids], axis=1)  # <s> x1 .. xn


class LanguageModelServer(Server):
    """Signatures of a `TransformerLM`:

    - `serving_default`: `prompt` `[B]` -> `completion` `[B]`, the text
      generated after each prompt, with the export's beam size (1: greedy)
      and maximum length;
    - `complete_with_options`: `prompt`, `beam_size` and
      `max_decoding_length`, all `[B]` -> `completion` `[B]`, each row
      with its own options;
    - `complete_by_sampling`: `prompt`, `max_decoding_length`, `temperature`,
      `top_k`, `top_p` and `seed`, all `[B]` -> `completion` `[B]`: each
      row sampled with its own options from its own seed (the same seed,
      the same completion, whatever else is in the batch). `temperature`
      <= 0 decodes greedily; `top_k` 0 and `top_p` 0 or 1 set no limit;
    - `generate_batch` and `score_batch`: CTranslate2's `Generator`'s
      (below); `tokenize`, as a
      translator's (`tokenize_signature`), each prompt's text tokens.

    Every signature searches with `decoding.generate`, through
    `row_generate` (`generate_batch`'s search; the older signatures with
    their own options: beam search's stopping rule, the export's length
    penalty or beam search's own, no constraint, the continuation alone).
    With `jit_compile=True` the search with the export's options
    (`serving_default`'s, and a `complete_with_options` request whose
    every row asks for those) is `generate` compiled by XLA with those
    options as numbers, prompts padded to a few lengths (the rest runs as
    a plain graph). Only for a model whose positions do not end (rotary,
    ALiBi, sinusoidal): with learned positions each row's room differs,
    which XLA cannot compile as one program.
    """

    text_input = "prompt"
    server_name = "language_model_server"

    def __init__(self, model, tokenizers, settings):
        tokenizer = tokenizers["text"]
        max_input_length, decoding_limit = settings.max_input_length, settings.decoding_length
        beam_size = export_beam_size = settings.beam_size
        jit_compile = settings.jit_compile
        penalty = settings.length_penalty  # (None: beam search's own)
        # Learned positions end somewhere: <s>, the prompt and what is
        # generated must fit in the model's `max_position_embeddings`.
        positions = model.max_position_embeddings
        if jit_compile and positions is not None:
            raise ValueError(
                "`jit_compile=True` needs a language model whose positions do not end "
                f"(rotary, ALiBi, sinusoidal); this one learned {positions} positions"
            )
        prompt_limit = (
            max_input_length if positions is None else min(max_input_length, positions - 2)
        )
        buckets = length_buckets(prompt_limit + 1)  # <s> and the prompt
        self.option_inputs = {
            "complete_with_options": {
                "beam_size": beam_size,
                "max_decoding_length": decoding_limit,
            },
            "complete_by_sampling": {
                "max_decoding_length": decoding_limit,
                "temperature": 1.0,
                "top_k": 0,
                "top_p": 1.0,
                "seed": 0,
            },
            # CTranslate2's defaults, but the export's length: a short warm-up.
            "generate_batch": defaults() | {"max_length": decoding_limit},
            "score_batch": {},
            "tokenize": {},
        }
        self.text_inputs = {"score_batch": "text", "tokenize": "text"}

        generate_rows = row_generate(model, tokenizer, prompt_limit)
        # The older signatures' own rules: beam search's stopping rule and
        # length penalty (the export's, else beam search's own), the
        # continuation alone; the other options at generate_batch's
        # defaults (no minimum, no constraint, no sampling, its best).
        length_penalty = LENGTH_PENALTY if penalty is None else penalty
        own = {
            "patience": 0.0,
            "length_penalty": length_penalty,
            "include_prompt_in_result": False,
        }
        searched = signature_options()

        def complete(prompt, beam_size, max_decoding_length, **sampling):
            """Each prompt's best continuation as text `[B]`, by the search
            of `generate_batch` (`sampling`: its sampling options, `[B]`)."""
            rows = tf.shape(prompt)[0]
            given = {"beam_size": beam_size, "max_length": max_decoding_length, **sampling}
            options = older_options(rows, searched, given, own)
            ids = generate_rows(prompt, tf.fill([rows, 1], ""), options)["ids"][:, 0]
            return tokenizer.detokenize(ids)

        @tf.function(jit_compile=True)
        def compiled_search(prompt_ids):
            # The export's options, each a number XLA compiles into the
            # program (positions do not end: every row may take the
            # export's `max_decoding_length`).
            options = decoding.DecodingOptions.generation(
                beam_size=export_beam_size,
                patience=0.0,
                length_penalty=length_penalty,
                max_length=decoding_limit,
            )
            ids, _ = generate(model, prompt_ids, options, include_prompt_in_result=False)
            return ids[:, 0]

        def export_complete(prompt):
            """`complete` with the export's options: compiled by XLA if asked."""
            rows = tf.shape(prompt)[0]
            if not jit_compile:
                return complete(
                    prompt, tf.fill([rows], export_beam_size), tf.fill([rows], decoding_limit)
                )
            ids = prompt_ids(tokenizer, prompt, prompt_limit)
            return tokenizer.detokenize(compiled_search(pad_to_bucket(ids, buckets)))

        @tf.function(input_signature=[TEXTS])
        def serving_default(prompt):
            return {"completion": export_complete(prompt)}

        @tf.function(input_signature=[TEXTS, PER_ROW_INT, PER_ROW_INT])
        def complete_with_options(prompt, beam_size, max_decoding_length):
            length, checks = within_limits(
                "complete_with_options", beam_size, max_decoding_length, decoding_limit
            )
            checks += check_per_row(prompt, [beam_size, max_decoding_length])
            with tf.control_dependencies(checks):
                if not jit_compile:
                    return {"completion": complete(prompt, beam_size, length)}
                # Under XLA, a request whose every row asks the export's
                # options is the compiled search's.
                asks_the_export_s = (beam_size == export_beam_size) & (length == decoding_limit)
                completion = tf.cond(
                    tf.reduce_all(asks_the_export_s),
                    lambda: export_complete(prompt),
                    lambda: complete(prompt, beam_size, length),
                )
            return {"completion": completion}

        @tf.function(
            input_signature=[
                TEXTS,
                PER_ROW_INT,
                PER_ROW_FLOAT,
                PER_ROW_INT,
                PER_ROW_FLOAT,
                PER_ROW_INT,
            ]
        )
        def complete_by_sampling(prompt, max_decoding_length, temperature, top_k, top_p, seed):
            length, checks = within_limits(
                "complete_by_sampling", None, max_decoding_length, decoding_limit
            )
            checks += check_per_row(prompt, [max_decoding_length, temperature, top_k, top_p, seed])
            with tf.control_dependencies(checks):
                # Each row samples from its own seed with its own filters
                # (`sampling_choice`: a temperature <= 0 is greedy, a top_k
                # of 0 and a top_p of 0 or 1 set no limit).
                completion = complete(
                    prompt,
                    tf.ones_like(length),
                    length,
                    sampling_topk=top_k,
                    sampling_topp=top_p,
                    sampling_temperature=temperature,
                    seed=seed,
                )
            return {"completion": completion}

        super().__init__(
            [tokenizer],
            {
                "serving_default": serving_default,
                "complete_with_options": complete_with_options,
                "complete_by_sampling": complete_by_sampling,
                "generate_batch": generate_batch(tokenizer, generate_rows, prompt_limit),
                "score_batch": score_batch(model, tokenizer, prompt_limit),
                "tokenize": tokenize_signature(tokenizer),
            },
            name=self.server_name,
            with_defaults=["generate_batch"],
        )


def row_generate(model, tokenizer, prompt_limit):
    """The search every signature of a language model decodes with, a
    `tf.function` traced once and shared by them: `generate_rows(prompt
    [B], suppress_sequences [B, S], options)` (`options`: `signature_options`' names
    -> `[B]`, one value per prompt) -> `{"ids": [B, N, L], "scores": [B,
    N]}`, each row's n-best results, best first, with their end token (N:
    the largest `num_hypotheses`). The rows that share the options that
    set shapes (beam size, n-best size, patience) are searched together
    (`by_groups`), so a row's answer is the one it gets alone.
    `prompt_limit`: the most tokens of a prompt's text that are read."""
    positions = model.max_position_embeddings  # learned positions end; None: they do not

    specs = {name: tf.TensorSpec([None], dtype) for name, (dtype, _) in signature_options().items()}

    @tf.function(input_signature=[TEXTS, tf.TensorSpec([None, None], tf.string), specs])
    def generate_rows(prompt, suppress_sequences, options):
        batch_size = tf.shape(prompt)[0]
        length = tf.shape(prompt_ids(tokenizer, prompt, prompt_limit))[1]
        length += tf.maximum(tf.reduce_max(options["max_length"]), 1)
        outputs, keys = answers_and_groups(options, batch_size, length)
        width = tf.shape(outputs["scores"])[1]  # N

        def decode(rows):
            def of_rows(x):
                return tf.gather(x, rows)

            ids = prompt_ids(tokenizer, of_rows(prompt), prompt_limit)  # [b, P]
            prompt_length = tf.reduce_sum(tf.cast(ids != PAD_ID, tf.int32), axis=1)
            # An empty prompt without a start token: a token to run on,
            # whose result is replaced by "" below.
            empty = prompt_length == 0  # [b]
            first = tf.range(tf.shape(ids)[1])[None, :] == 0
            ids = tf.where(empty[:, None] & first, END_ID, ids)
            prompt_length = tf.maximum(prompt_length, 1)
            included = of_rows(options["include_prompt_in_result"])
            maximum = of_rows(options["max_length"])
            if positions is not None:
                # <s>, the prompt and the continuation within the positions.
                room = tf.where(included, positions - 1, positions - prompt_length)
                maximum = tf.minimum(maximum, room)
            suppressed = suppressed_ids(tokenizer, of_rows(suppress_sequences))
            search_options = decoding.DecodingOptions.generation(
                beam_size=of_rows(options["beam_size"])[0],
                patience=of_rows(options["patience"])[0],
                num_hypotheses=of_rows(options["num_hypotheses"])[0],
                length_penalty=of_rows(options["length_penalty"]),
                repetition_penalty=of_rows(options["repetition_penalty"]),
                no_repeat_ngram_size=of_rows(options["no_repeat_ngram_size"]),
                disable_unk=of_rows(options["disable_unk"]),
                max_length=maximum,
                min_length=tf.minimum(of_rows(options["min_length"]), maximum),
                sampling_topk=of_rows(options["sampling_topk"]),
                sampling_topp=of_rows(options["sampling_topp"]),
                sampling_temperature=of_rows(options["sampling_temperature"]),
                suppress_sequences=suppressed,
            )
            ids, scores = generate(
                model,
                ids,
                search_options,
                include_prompt_in_result=included,
                seed=of_rows(options["seed"]),
            )  # [b, N, L], [b, N]
            ids = tf.where(empty[:, None, None], PAD_ID, ids)
            scores = tf.where(empty[:, None], 0.0, scores)
            return group_answers(ids, scores, width, length)

        return by_groups(keys, outputs, decode)

    return generate_rows


def generate_batch(tokenizer, generate_rows, prompt_limit):
    """The signature's `tf.function`, for `tf.saved_model.save` (which
    records its inputs' defaults: `with_defaults`), over `generate_rows`
    (`row_generate`)."""
    vocabulary = tf.constant(tokenizer.vocabulary)

    names = list(signature_options())

    @tf.function(input_signature=signature_inputs())
    def signature(prompt, *values):
        *values, suppress_sequences = values
        options = per_text(
            prompt,
            {**dict(zip(names, values, strict=True)), "suppress_sequences": suppress_sequences},
            signature="generate_batch",
        )
        checks = check_options(
            prompt, options, signature="generate_batch", api=option_table.GENERATOR
        )
        suppress_sequences = options.pop("suppress_sequences")
        batch_size = tf.shape(prompt)[0]
        with tf.control_dependencies(checks):
            outputs = generate_rows(prompt, suppress_sequences, options)
        width = tf.shape(outputs["scores"])[1]  # N
        ids = cut_at_end(outputs["ids"])  # [B, N, T]
        flat = tf.reshape(ids, [-1, tf.shape(ids)[2]])
        sequences = tf.reshape(tokenizer.detokenize(flat), [batch_size, width])
        tokens = token_strings(vocabulary, ids)
        return {"sequences": sequences, "scores": outputs["scores"], "tokens": tokens}

    return with_defaults(signature, defaults())


def score_batch(model, tokenizer, prompt_limit):
    """The `score_batch` signature's `tf.function`."""
    vocabulary = tf.constant(tokenizer.vocabulary)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def signature(text):
        labels, log_probs = score_sequences(model, prompt_ids(tokenizer, text, prompt_limit))
        return score_outputs(vocabulary, labels, log_probs)

    return signature


# Written with `keras.ops` for every backend: AutoGraph has nothing to
# convert in them.
generate = tf.autograph.experimental.do_not_convert(decoding.generate)
score_sequences = tf.autograph.experimental.do_not_convert(decoding.score_sequences)
