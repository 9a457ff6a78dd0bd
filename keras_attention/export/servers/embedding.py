"""An embedder's export (`TransformerEmbedder`): its server."""

import tensorflow as tf

from keras_attention.data.tokenizers import token_ids
from keras_attention.export.servers.base import TEXTS, Server, check_per_row


class EmbeddingServer(Server):
    """Signatures of a `TransformerEmbedder`:

    - `serving_default` and `embed` (the same function): `text` `[B]` ->
      `embeddings` float32 `[B, D]`, each text with the export's default
      prompt before it (none unless the run names one);
    - `embed_with_prompt`, where the run has prompts (sentence-transformers'
      `prompts`, such as E5's `{"query": "query: ", "passage": "passage: "}`):
      `text` and `prompt_name`, both `[B]`; each text gets the prompt its
      row names ("" for none) put before it, in the graph. A name the
      export does not have fails the request, naming it.

    With `jit_compile=True` the model runs as XLA programs of a few shapes
    only (`compiled_shapes`): the ids are padded to the next length of
    `LENGTHS` (and `max_input_length`), the rows to the next of
    `BATCH_SIZES`, and a batch of more rows than the largest goes through
    in pieces of that many. XLA keeps every program it compiles for the
    life of the process, so a served export must not meet a new shape with
    every request: here it meets at most `len(BATCH_SIZES)` times the
    lengths.
    """

    text_input = "text"
    server_name = "embedding_server"

    def __init__(self, model, tokenizers, settings):
        prompts, default_name = check_prompts(settings.prompts, settings.default_prompt_name)
        tokenizer, max_input_length = tokenizers["text"], settings.max_input_length
        default_prompt = tf.constant(prompts.get(default_name, "") if default_name else "")

        embed_ids = model.embed
        if settings.jit_compile:
            width = model.outputs[0].shape[-1]
            embed_ids = in_compiled_shapes(model.embed, width, max_input_length)
            self.compiled_shapes = compiled_shapes(max_input_length)

        def embed_texts(text):
            vectors = embed_ids(token_ids(tokenizer, text, max_input_length))
            return {"embeddings": tf.cast(vectors, tf.float32)}

        @tf.function(input_signature=[TEXTS])
        def embed(text):
            return embed_texts(tf.strings.join([default_prompt, text]))

        signatures = {"serving_default": embed, "embed": embed}
        if prompts:
            names = tf.constant(["", *prompts])
            texts = tf.constant(["", *prompts.values()])
            known = ", ".join(repr(name) for name in prompts)

            @tf.function(input_signature=[TEXTS, TEXTS])
            def embed_with_prompt(text, prompt_name):
                checks = check_per_row(text, [prompt_name])
                matches = tf.equal(prompt_name[:, None], names[None, :])  # [B, P + 1]
                found = tf.reduce_any(matches, axis=1)
                checks.append(
                    tf.debugging.Assert(
                        tf.reduce_all(found),
                        [
                            f"embed_with_prompt: `prompt_name` must be one of {known} or '' "
                            "(none). Received:",
                            tf.boolean_mask(prompt_name, ~found)[:1],
                        ],
                    )
                )
                with tf.control_dependencies(checks):
                    prompt = tf.gather(texts, tf.argmax(tf.cast(matches, tf.int32), axis=1))
                    return embed_texts(tf.strings.join([prompt, text]))

            signatures["embed_with_prompt"] = embed_with_prompt
            self.option_inputs = {"embed_with_prompt": {"prompt_name": next(iter(prompts))}}
        super().__init__([tokenizer], signatures, name=self.server_name)


# The shapes an XLA export compiles: rows and ids a row.
BATCH_SIZES = (1, 4, 16, 64)
LENGTHS = (16, 32, 64, 128, 256, 512)


def compiled_shapes(max_input_length):
    """`{"batch_sizes", "lengths"}`: every shape an XLA export compiles."""
    lengths = sorted({*(n for n in LENGTHS if n < max_input_length), max_input_length})
    return {"batch_sizes": list(BATCH_SIZES), "lengths": lengths}


def in_compiled_shapes(embed, width, max_input_length):
    """`embed` (ids `[B, T]` -> `[B, width]`) compiled by XLA, called on ids
    padded to `compiled_shapes`: the next length, the next batch size (a
    larger batch in pieces of the largest). Padding rows and columns
    change no real row's vector (every pooling masks padding)."""
    shapes = compiled_shapes(max_input_length)
    lengths = tf.constant(shapes["lengths"])
    sizes = tf.constant(shapes["batch_sizes"])
    compiled = tf.function(embed, jit_compile=True)

    def next_of(values, at_least):
        return tf.gather(values, tf.argmax(tf.cast(values >= at_least, tf.int32)))

    def call(ids):
        rows, columns = tf.shape(ids)[0], tf.shape(ids)[1]
        length = next_of(lengths, columns)
        largest = sizes[-1]
        piece = tf.where(rows > largest, largest, next_of(sizes, tf.maximum(rows, 1)))
        pieces = tf.maximum((rows + piece - 1) // piece, 1)  # (an empty batch: one piece)
        padded = tf.pad(ids, [[0, pieces * piece - rows], [0, length - columns]])
        padded = tf.reshape(padded, [pieces, piece, length])
        vectors = tf.map_fn(
            compiled,
            padded,
            fn_output_signature=tf.TensorSpec([None, None], tf.float32),
            parallel_iterations=1,
        )  # [pieces, piece, D]
        return tf.reshape(vectors, [pieces * piece, width])[:rows]

    return call


def check_prompts(prompts, default_prompt_name):
    """`(prompts, default_prompt_name)` checked: a dict of names to texts
    (None: no prompts), and None or one of its names."""
    prompts = {} if prompts is None else prompts
    if not isinstance(prompts, dict) or not all(
        isinstance(name, str) and name and isinstance(text, str) for name, text in prompts.items()
    ):
        raise ValueError(
            "`prompts` must be a dict of names to the texts put before a text. "
            f"Received: prompts={prompts!r}"
        )
    if default_prompt_name is not None and default_prompt_name not in prompts:
        raise ValueError(
            f"`default_prompt_name` must be one of the prompts' names {sorted(prompts)} or None. "
            f"Received: default_prompt_name={default_prompt_name!r}"
        )
    return prompts, default_prompt_name
