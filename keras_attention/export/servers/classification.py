"""A classifier's export (`TransformerClassifier`): its server."""

import tensorflow as tf

from keras_attention.data.tokenizers import pair_token_ids, token_ids
from keras_attention.export.servers.base import TEXTS, Server, check_per_row


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

    def __init__(self, model, tokenizers, settings):
        if settings.jit_compile:
            raise ValueError(
                "`jit_compile=True` is for translation and language models (an XLA-compiled "
                f"search). Received a {type(model).__name__}"
            )
        label_names = settings.label_names
        if label_names is None or len(label_names) != model.num_classes:
            raise ValueError(
                f"A classifier with {model.num_classes} classes needs as many "
                f"`label_names`. Received: label_names={label_names!r}"
            )
        tokenizer, max_input_length = tokenizers["text"], settings.max_input_length
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
