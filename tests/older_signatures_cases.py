"""The requests whose answers tests/export/test_older_signatures.py holds
the older signatures to (their answers were written by
tests/export/fixtures/older_signatures/make_answers.py): small random
models, their servers plain and under XLA, and what each case asks."""

import re

import numpy as np

FIXTURES = "export/fixtures/older_signatures"
TEXTS = [b"abc", b"hello", b"", b"jihgfedcba abc", b"\xff\xfeab", b"aaaaaaaaaaaaaaaaaaaa"]
ALPHABET = "abcdefghij klmnop"


def tokenizer():
    from keras_attention.data.tokenizers import CharacterTokenizer

    return CharacterTokenizer.train([ALPHABET])


def build_models():
    """The models, built (their weights made), by name."""
    import keras

    from keras_attention.models import (
        build_seq2seq_attention,
        build_transformer,
        build_transformer_lm,
    )

    size = tokenizer().vocabulary_size
    small = dict(num_layers=1, model_dim=32, num_heads=2, intermediate_dim=64, dropout=0.0)
    models = {
        "transformer": build_transformer(size, **small),
        "rnn": build_seq2seq_attention(size, attention="bahdanau", embedding_dim=16, units=32),
        "lm_learned": build_transformer_lm(
            size, positions="learned", max_position_embeddings=24, **small
        ),
        "lm_rotary": build_transformer_lm(size, positions="rotary", **small),
    }
    ids = keras.ops.ones((1, 3), "int32")
    for model in models.values():
        model(ids if model.is_decoder_only else {"source_ids": ids, "target_ids": ids})
    return models


def load_weights(models, path):
    with np.load(path) as saved:
        for name, model in models.items():
            for index, variable in enumerate(model.weights):
                variable.assign(saved[f"{name}/{index}"])
    return models


# Server name -> (model, ExportSettings' arguments).
SERVERS = {
    "transformer": ("transformer", dict(max_input_length=12, max_decoding_length=10, beam_size=3)),
    "transformer_xla": (
        "transformer",
        dict(max_input_length=12, max_decoding_length=10, beam_size=3, jit_compile=True),
    ),
    "rnn": (
        "rnn",
        dict(max_input_length=12, max_decoding_length=10, beam_size=2, length_penalty=0.0),
    ),
    "lm_learned": ("lm_learned", dict(max_input_length=12, max_decoding_length=8, beam_size=2)),
    "lm_rotary_xla": (
        "lm_rotary",
        dict(max_input_length=12, max_decoding_length=8, beam_size=2, jit_compile=True),
    ),
}


def servers(models):
    from keras_attention.export.servers import make_server
    from keras_attention.tasks import ExportSettings

    made = {}
    for name, (model_name, settings) in SERVERS.items():
        model = models[model_name]
        target = None if model.is_decoder_only else tokenizer()
        made[name] = make_server(model, tokenizer(), target, ExportSettings(**settings))
    return made


def _rows(*values):
    return list(values)


def _translator_cases(server):
    n = len(TEXTS)
    return {
        f"{server}/serving_default": (server, "serving_default", {"text": TEXTS}),
        f"{server}/translate_with_attention": (
            server,
            "translate_with_attention",
            {"text": TEXTS[:4]},
        ),
        f"{server}/translate_with_options": (
            server,
            "translate_with_options",
            {
                "text": TEXTS,
                "beam_size": _rows(1, 2, 3, 4, 1, 3),
                "max_decoding_length": _rows(0, 3, 10, 1, 5, 0),
            },
        ),
        f"{server}/translate_with_options_export_s_own": (
            server,
            "translate_with_options",
            {"text": TEXTS, "beam_size": [3] * n, "max_decoding_length": [0] * n},
        ),
        f"{server}/beam_size_0": (
            server,
            "translate_with_options",
            {"text": TEXTS[:2], "beam_size": [1, 0], "max_decoding_length": [0, 0]},
        ),
        f"{server}/beam_size_17": (
            server,
            "translate_with_options",
            {"text": TEXTS[:2], "beam_size": [17, 1], "max_decoding_length": [0, 0]},
        ),
        f"{server}/max_decoding_length_above": (
            server,
            "translate_with_options",
            {"text": TEXTS[:2], "beam_size": [1, 1], "max_decoding_length": [4, 11]},
        ),
        f"{server}/max_decoding_length_negative": (
            server,
            "translate_with_options",
            {"text": TEXTS[:2], "beam_size": [1, 1], "max_decoding_length": [-1, 2]},
        ),
        f"{server}/options_not_per_row": (
            server,
            "translate_with_options",
            {"text": TEXTS[:2], "beam_size": [1], "max_decoding_length": [0, 0]},
        ),
        f"{server}/empty_batch": (
            server,
            "translate_with_options",
            {"text": [], "beam_size": [], "max_decoding_length": []},
        ),
    }


def _language_model_cases(server, sampling=True):
    n = len(TEXTS)
    cases = {
        f"{server}/serving_default": (server, "serving_default", {"prompt": TEXTS}),
        f"{server}/complete_with_options": (
            server,
            "complete_with_options",
            {
                "prompt": TEXTS,
                "beam_size": _rows(1, 2, 3, 1, 2, 4),
                "max_decoding_length": _rows(0, 3, 8, 1, 5, 0),
            },
        ),
        f"{server}/complete_with_options_export_s_own": (
            server,
            "complete_with_options",
            {"prompt": TEXTS, "beam_size": [2] * n, "max_decoding_length": [0] * n},
        ),
        f"{server}/beam_size_0": (
            server,
            "complete_with_options",
            {"prompt": TEXTS[:2], "beam_size": [0, 1], "max_decoding_length": [0, 0]},
        ),
        f"{server}/max_decoding_length_above": (
            server,
            "complete_with_options",
            {"prompt": TEXTS[:2], "beam_size": [1, 1], "max_decoding_length": [9, 1]},
        ),
    }
    if sampling:
        cases |= {
            f"{server}/complete_by_sampling": (
                server,
                "complete_by_sampling",
                {
                    "prompt": TEXTS,
                    "max_decoding_length": _rows(0, 3, 8, 1, 5, 0),
                    "temperature": _rows(1.0, 0.0, 0.7, 1.5, -1.0, 1.0),
                    "top_k": _rows(0, 3, 0, 1, 5, 2),
                    "top_p": _rows(1.0, 0.0, 0.9, 0.5, 1.0, 0.3),
                    "seed": _rows(0, 1, 2, 3, 4, 5),
                },
            ),
            f"{server}/complete_by_sampling_same_seed": (
                server,
                "complete_by_sampling",
                {
                    "prompt": [TEXTS[0]] * 3,
                    "max_decoding_length": [8] * 3,
                    "temperature": [1.0] * 3,
                    "top_k": [0] * 3,
                    "top_p": [1.0] * 3,
                    "seed": _rows(7, 7, 8),
                },
            ),
            f"{server}/sampling_max_decoding_length_above": (
                server,
                "complete_by_sampling",
                {
                    "prompt": TEXTS[:1],
                    "max_decoding_length": [9],
                    "temperature": [1.0],
                    "top_k": [0],
                    "top_p": [1.0],
                    "seed": [0],
                },
            ),
        }
    return cases


CASES = {
    **_translator_cases("transformer"),
    **_translator_cases("transformer_xla"),
    **_translator_cases("rnn"),
    **_language_model_cases("lm_learned"),
    **_language_model_cases("lm_rotary_xla"),
}


def answer(made, case):
    """The case's outputs as JSON values (texts as strings, attention
    rounded to 5 decimals), or `{"error": what the failed check says}`."""
    import tensorflow as tf

    server, signature, inputs = case
    function = getattr(made[server], signature)
    tensors = {}
    for name, values in inputs.items():
        if name in ("text", "prompt"):
            tensors[name] = tf.constant(values, tf.string, shape=[len(values)])
        elif name in ("temperature", "top_p"):
            tensors[name] = tf.constant(values, tf.float32, shape=[len(values)])
        else:
            tensors[name] = tf.constant(values, tf.int32, shape=[len(values)])
    try:
        outputs = function(**tensors)
    except tf.errors.InvalidArgumentError as error:
        # The failed check's own lines, not TensorFlow's trace around them.
        lines = [
            line.split("\t [[")[0].strip()
            for line in error.message.splitlines()
            if line.startswith("assertion failed") or "one value per text" in line
        ]
        # (Less the names of the graph's tensors, which say nothing to a client.)
        return {"error": re.sub(r" \(\w+:\d+\)", "", " | ".join(lines) or error.message)}
    answers = {}
    for name, value in sorted(outputs.items()):
        value = value.numpy()
        if value.dtype == object:
            answers[name] = np.vectorize(lambda b: b.decode("utf-8"), otypes=[object])(
                value
            ).tolist()
        else:
            answers[name] = np.round(value.astype("float64"), 5).tolist()
    return answers
