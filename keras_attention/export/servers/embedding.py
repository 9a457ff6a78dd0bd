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
    """

    text_input = "text"
    server_name = "embedding_server"

    def __init__(self, model, tokenizers, settings):
        if settings.jit_compile:
            raise ValueError(
                "`jit_compile=True` is for translation and language models (an XLA-compiled "
                f"search). Received a {type(model).__name__}"
            )
        prompts, default_name = check_prompts(settings.prompts, settings.default_prompt_name)
        tokenizer, max_input_length = tokenizers["text"], settings.max_input_length
        default_prompt = tf.constant(prompts.get(default_name, "") if default_name else "")

        def embed_texts(text):
            vectors = model.embed(token_ids(tokenizer, text, max_input_length))
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
