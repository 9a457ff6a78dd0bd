"""The serving functions of an export: text in, text out, all in one graph.

Each server is a `tf.Module` that holds a trained model and its tokenisers
and offers its signatures as `tf.function`s with plain tensor inputs and
outputs. Everything between the strings runs inside the graph (UTF-8 repair,
tokenisation, truncation, the model, the decoding loop with its KV cache,
detokenisation), so TF Serving runs the SavedModel with only TensorFlow's
and TF Text's ops: none of this package's Python is needed there.

Every input and output is batch-major, its first dimension the batch, so
TF Serving's server-side batching can concatenate requests. `serving_default`
takes only the texts and decodes with the beam size and length fixed at
export (a graph specialised to them). Per-request options (`beam_size`,
`max_decoding_length`) are `[B]` inputs of a second signature,
`translate_with_options` or `complete_with_options`: the rows that ask for
the same options are decoded together, each group on its own, so a row's
answer does not depend on the other rows of a batch.

No text a client can send is an error inside the graph: bytes that are not
UTF-8 are repaired (U+FFFD), texts longer than the export's
`max_input_length` tokens are truncated (as CTranslate2 cuts them), and an
empty text or an empty batch gets a well-formed answer. Options out of
range fail the request with an InvalidArgument error that names the
option, its limit and the row: a `beam_size` outside 1 .. `MAX_BEAM_SIZE`,
a `max_decoding_length` outside 1 .. the export's (0 asks for the
export's own),
and in `translate_batch` and `generate_batch` every option
(`translate_batch.check_options`). Every sampling option has a meaning
for every value (see `LanguageModelServer`).
"""

from types import SimpleNamespace

import tensorflow as tf

from keras_attention import decoding
from keras_attention.data.pipeline import length_buckets, pad_to_bucket
from keras_attention.data.tokenizers import (
    PAD_ID,
    padded,
    pair_token_ids,
    repair_utf8,
    token_ids,
)
from keras_attention.export import generate_batch, translate_batch
from keras_attention.tasks import task_of
from keras_attention.tasks.translation import cross_attention

MAX_BEAM_SIZE = translate_batch.MAX_BEAM_SIZE  # the most beams a request may ask for
TEXTS = tf.TensorSpec([None], tf.string)
PER_ROW_INT = tf.TensorSpec([None], tf.int32)
PER_ROW_FLOAT = tf.TensorSpec([None], tf.float32)

# The decoding loops are written with `keras.ops` for every backend (JAX
# traces them as they are), so AutoGraph has nothing to convert in them;
# converting them anyway is seconds of every export's tracing.
beam_search = tf.autograph.experimental.do_not_convert(decoding.beam_search)
sample = tf.autograph.experimental.do_not_convert(decoding.sample)


def token_strings(vocabulary, ids):
    """Ids -> their tokens, "" for padding: labels for attention pictures."""
    return tf.where(ids == PAD_ID, "", tf.gather(vocabulary, ids))


def within_limits(signature, beam_size, max_decoding_length, decoding_limit):
    """A `*_with_options` request's `beam_size` and `max_decoding_length`
    (`[B]`; None where the signature has no such input) with a
    `max_decoding_length` of 0 read as the export's own (`decoding_limit`),
    and the ops that fail the request, naming the limit, where a value is
    out of range."""
    length = tf.where(max_decoding_length == 0, decoding_limit, max_decoding_length)
    checks = [
        translate_batch.refuse_unless(
            (length >= 1) & (length <= decoding_limit),
            signature,
            "max_decoding_length",
            length,
            f"from 1 to {decoding_limit} (the max_decoding_length of the export; 0 asks for it)",
        )
    ]
    if beam_size is not None:
        checks.append(
            translate_batch.refuse_unless(
                (beam_size >= 1) & (beam_size <= MAX_BEAM_SIZE),
                signature,
                "beam_size",
                beam_size,
                f"from 1 to {MAX_BEAM_SIZE}",
            )
        )
    return length, checks


def check_per_row(texts, options):
    """Fails the request unless each option has one value per text."""
    for option in options:
        tf.debugging.assert_equal(
            tf.shape(option)[0],
            tf.shape(texts)[0],
            message="each per-request option needs one value per text",
        )


def decode_by_options(texts, options, decode):
    """Strings `[B]`: `decode(texts of a group, its options [N])` for each
    group of rows that share their options, so a row's answer is the one it
    would get alone.

    Args:
        texts: string `[B]`.
        options: a list of N int32 `[B]` tensors, one value per row each.
        decode: function of `(texts [b], options [N])` -> strings `[b]`.
    """
    check_per_row(texts, options)
    options = tf.stack(options, axis=1)  # [B, N]
    groups, group_of_row = tf.raw_ops.UniqueV2(x=options, axis=[0])  # [G, N], [B]
    answers = tf.fill(tf.shape(texts), "")
    for group in tf.range(tf.shape(groups)[0]):
        rows = tf.where(group_of_row == group)[:, 0]  # [b]
        group_answers = decode(tf.gather(texts, rows), groups[group])
        answers = tf.tensor_scatter_nd_update(answers, rows[:, None], group_answers)
    return answers


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
    (`translate_batch.with_defaults`), cheap to trace again.
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
      (`keras_attention.export.translate_batch`).
    - `tokenize`: `text` `[B]` -> `tokens` `[B, S]` (each text's source
      tokens, "" for padding; the model reads the first
      `max_input_length`) and their number, `length` `[B]` (what a
      `Translator` cuts batches of tokens by, and what `python -m
      keras_attention.translate` warns of when it is over
      `max_input_length`).

    With `jit_compile=True` the search with the export's beam size and
    maximum length (every signature's, and `translate_with_options`' rows
    that ask for those) is compiled by XLA, its sources padded to a few
    lengths (`length_buckets`) so that each batch size compiles a few
    times. Other options run as a plain graph (a beam size is a shape to
    XLA). TF Serving runs it only with `--xla_cpu_compilation_enabled=true`.
    """

    text_input = "text"

    def __init__(self, model, source_tokenizer, target_tokenizer, settings):
        source_vocabulary = tf.constant(source_tokenizer.vocabulary)
        target_vocabulary = tf.constant(target_tokenizer.vocabulary)
        # (The options signature's inputs take the names `beam_size` and
        # `max_decoding_length`: the export's are these.)
        input_limit, decoding_limit = settings.max_input_length, settings.decoding_length
        beam_size = export_beam_size = settings.beam_size
        jit_compile = settings.jit_compile
        penalty = settings.length_penalty  # (None: beam search's own)
        buckets = length_buckets(input_limit)
        self.option_inputs = {
            "translate_with_options": {
                "beam_size": beam_size,
                "max_decoding_length": decoding_limit,
            },
            "translate_batch": translate_batch.defaults(),
            "score_batch": {"target": ""},
        }
        self.text_inputs = {"score_batch": "source"}

        def search(source_ids, beams, length):
            ids, _ = beam_search(model, source_ids, length, beam_size=beams, length_penalty=penalty)
            return ids

        @tf.function(jit_compile=True)
        def compiled_search(source_ids):
            return search(source_ids, export_beam_size, decoding_limit)

        @tf.function  # traced once, shared by the signatures that use it
        def export_search(source_ids):
            """The search with the export's options: under XLA if asked."""
            if jit_compile:
                return compiled_search(pad_to_bucket(source_ids, buckets))
            return search(source_ids, export_beam_size, decoding_limit)

        def translate(text):
            source_ids = token_ids(source_tokenizer, text, input_limit)
            return source_ids, export_search(source_ids)

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
            def translate_group(text, options):
                beams, length = options[0], options[1]
                source_ids = token_ids(source_tokenizer, text, input_limit)
                if not jit_compile:
                    return target_tokenizer.detokenize(search(source_ids, beams, length))
                output_ids = tf.cond(
                    (beams == export_beam_size) & (length == decoding_limit),
                    lambda: export_search(source_ids),
                    lambda: search(source_ids, beams, length),
                )
                return target_tokenizer.detokenize(output_ids)

            length, checks = within_limits(
                "translate_with_options", beam_size, max_decoding_length, decoding_limit
            )
            with tf.control_dependencies(checks):
                translation = decode_by_options(text, [beam_size, length], translate_group)
            return {"translation": translation}

        super().__init__(
            [source_tokenizer, target_tokenizer],
            {
                "serving_default": serving_default,
                "translate_with_attention": translate_with_attention,
                "translate_with_options": translate_with_options,
                "translate_batch": translate_batch.translate_batch(
                    model, source_tokenizer, target_tokenizer, input_limit, jit_compile
                ),
                "score_batch": translate_batch.score_batch(
                    model, source_tokenizer, target_tokenizer, input_limit
                ),
                "tokenize": tokenize_signature(source_tokenizer),
            },
            name="translation_server",
            with_defaults=["translate_batch"],
        )


class ClassificationServer(Server):
    """Signatures of a `TransformerClassifier`:

    - `serving_default`: `text` `[B]` -> `label` `[B]` (the class name),
      `label_id` `[B]` and `probabilities` `[B, C]`;
    - `classify_pairs`, where the tokenizer reads sentence pairs (a
      converted BERT's): `text` and `text_pair`, both `[B]`, with the same
      outputs, each pair framed `[CLS] text [SEP] text_pair [SEP]`.
    """

    text_input = "text"
    server_name = "classification_server"

    def __init__(self, model, tokenizer, max_input_length, label_names):
        names = tf.constant([str(name) for name in label_names])

        def classify(ids):
            probabilities = tf.nn.softmax(tf.cast(model.logits(ids), tf.float32), axis=-1)
            label_id = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
            return {
                "label": tf.gather(names, label_id),
                "label_id": label_id,
                "probabilities": probabilities,
            }

        @tf.function(input_signature=[TEXTS])
        def serving_default(text):
            return classify(token_ids(tokenizer, text, max_input_length))

        signatures = {"serving_default": serving_default}
        if hasattr(tokenizer, "tokenize_pairs"):

            @tf.function(input_signature=[TEXTS, TEXTS])
            def classify_pairs(text, text_pair):
                check_per_row(text, [text_pair])
                return classify(pair_token_ids(tokenizer, text, text_pair))

            signatures["classify_pairs"] = classify_pairs
            self.option_inputs = {"classify_pairs": {"text_pair": "a second text"}}
        super().__init__([tokenizer], signatures, name=self.server_name)


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
      (`keras_attention.export.generate_batch`); `tokenize`, as a
      translator's (`tokenize_signature`), each prompt's text tokens.

    With `jit_compile=True` the search with the export's beam size and
    maximum length (`serving_default`'s, and `complete_with_options`' rows
    that ask for those) is compiled by XLA, prompts padded to a few
    lengths, as a translator's is (`generate_batch` runs as a plain
    graph). Only for a model whose positions do not end (rotary, ALiBi,
    sinusoidal): with learned positions each row's room differs, which XLA
    cannot compile as one program.
    """

    text_input = "prompt"
    server_name = "language_model_server"

    def __init__(self, model, tokenizer, settings):
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
            "generate_batch": generate_batch.defaults() | {"max_length": decoding_limit},
            "score_batch": {},
            "tokenize": {},
        }
        self.text_inputs = {"score_batch": "text", "tokenize": "text"}

        def complete(prompt, length, decode):
            """`decode(prompt ids [B, P], new tokens per row [B])` -> ids."""
            prompt_ids = generate_batch.prompt_ids(tokenizer, prompt, prompt_limit)
            prompt_length = tf.reduce_sum(tf.cast(prompt_ids != PAD_ID, tf.int32), axis=1)
            new_tokens = length + tf.zeros_like(prompt_length)  # [B]
            if positions is not None:
                # Each row's own room, so the answer does not depend on the
                # longest prompt of the batch.
                new_tokens = tf.minimum(new_tokens, positions - prompt_length)
            ids = decode(prompt_ids, new_tokens)
            # Each row is its prompt then its completion: keep what follows the prompt.
            generated = tf.range(tf.shape(ids)[1])[None, :] >= prompt_length[:, None]
            completion = tf.ragged.boolean_mask(ids, generated).to_tensor()
            return tokenizer.detokenize(completion)

        def search(beam_size):
            def decode(prompt_ids, new_tokens):
                return beam_search(
                    model, prompt_ids, new_tokens, beam_size=beam_size, length_penalty=penalty
                )[0]

            return decode

        @tf.function(jit_compile=True)
        def compiled_search(prompt_ids):
            # Every row may take the export's `max_decoding_length`
            # (positions do not end), a number XLA compiles into the program.
            return beam_search(
                model,
                prompt_ids,
                decoding_limit,
                beam_size=export_beam_size,
                length_penalty=penalty,
            )[0]

        @tf.function  # traced once, shared by the signatures that use it
        def export_search(prompt_ids, new_tokens):
            """The search with the export's options: under XLA if asked."""
            if jit_compile:
                return compiled_search(pad_to_bucket(prompt_ids, buckets))
            return search(beam_size)(prompt_ids, new_tokens)

        @tf.function(input_signature=[TEXTS])
        def serving_default(prompt):
            return {"completion": complete(prompt, decoding_limit, export_search)}

        @tf.function(input_signature=[TEXTS, PER_ROW_INT, PER_ROW_INT])
        def complete_with_options(prompt, beam_size, max_decoding_length):
            def complete_group(prompt, options):
                beams, length = options[0], options[1]
                if not jit_compile:
                    return complete(prompt, length, search(beams))

                def decode(prompt_ids, new_tokens):
                    return tf.cond(
                        (beams == export_beam_size) & (length == decoding_limit),
                        lambda: export_search(prompt_ids, new_tokens),
                        lambda: search(beams)(prompt_ids, new_tokens),
                    )

                return complete(prompt, length, decode)

            length, checks = within_limits(
                "complete_with_options", beam_size, max_decoding_length, decoding_limit
            )
            with tf.control_dependencies(checks):
                completion = decode_by_options(prompt, [beam_size, length], complete_group)
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
            options = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "seed": seed}
            check_per_row(prompt, [max_decoding_length, *options.values()])

            def sample_rows(prompt_ids, new_tokens):
                # One value per row each: no grouping needed, every row
                # samples from its own seed with its own filters.
                return sample(model, prompt_ids, new_tokens, **options)

            length, checks = within_limits(
                "complete_by_sampling", None, max_decoding_length, decoding_limit
            )
            with tf.control_dependencies(checks):
                completion = complete(prompt, length, sample_rows)
            return {"completion": completion}

        super().__init__(
            [tokenizer],
            {
                "serving_default": serving_default,
                "complete_with_options": complete_with_options,
                "complete_by_sampling": complete_by_sampling,
                "generate_batch": generate_batch.generate_batch(model, tokenizer, prompt_limit),
                "score_batch": generate_batch.score_batch(model, tokenizer, prompt_limit),
                "tokenize": tokenize_signature(tokenizer),
            },
            name=self.server_name,
            with_defaults=["generate_batch"],
        )


def make_server(model, tokenizer, target_tokenizer, settings):
    """The server for the model's task (`keras_attention.tasks`)."""
    task = task_of(model)
    if "target" in task.sides and target_tokenizer is None:
        raise ValueError("A translation model needs `target_tokenizer`. Received: None")
    tokenizers = dict(
        zip(task.sides, (tokenizer, target_tokenizer)[: len(task.sides)], strict=True)
    )
    return task.server(model, tokenizers, settings)
