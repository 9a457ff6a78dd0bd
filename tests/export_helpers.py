"""What the export tests share: the task, the inputs, the requests sent to
the stand-in for TF Serving, and decoding the Python way."""

import json
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

from keras_attention import decoding, export
from keras_attention.data.tokenizers import START_ID
from keras_attention.run_files import RunFiles

STAND_IN = Path(__file__).parent / "export" / "tf_serving_stand_in.py"


def ask_a_fresh_process(spec, folder):
    """The stand-in for TF Serving's answers to `spec` ({export path:
    [(signature, inputs), ...]}), from a fresh process that imports only
    TensorFlow and TF Text; its files are written in `folder`."""
    (folder / "spec.pkl").write_bytes(pickle.dumps(spec))
    subprocess.run(
        [sys.executable, str(STAND_IN), "check", "spec.pkl", "result.pkl"],
        cwd=folder,
        check=True,
        timeout=600,
    )
    return pickle.loads((folder / "result.pkl").read_bytes())


MAX_LENGTH = 10
BEAM_SIZE = 2  # the translator's default beam size
TEXTS = ["1234", "98765", "5", "314159"]
# Empty, far too long, not UTF-8, and characters the vocabulary lacks.
ODD_TEXTS = ["", "9" * 5000, b"\xff\xfe12", "\u0661\u0662 \U0001f600"]
EMPTY = np.array([], dtype=object)


def reversal_pairs(count, seed=0):
    """Digit strings and the same reversed: a task a tiny model learns fast."""
    random = np.random.default_rng(seed)
    sources = [
        "".join(map(str, random.integers(0, 10, random.integers(1, 8)))) for _ in range(count)
    ]
    return [(s, s[::-1]) for s in sources]


def as_bytes(texts):
    return np.array([t.encode("utf-8") if isinstance(t, str) else t for t in texts], dtype=object)


def decode_in_process(model, tokenizer, texts, beam_size=BEAM_SIZE, max_length=MAX_LENGTH):
    """The Python way: tokenise, truncate, beam search, detokenise."""
    ids = tokenizer.tokenize(tf.constant(texts))[:, :MAX_LENGTH].to_tensor()
    output, _ = decoding.beam_search(model, ids, max_length, beam_size=beam_size)
    return list(tokenizer.detokenize(output).numpy())


def complete_in_process(exports, text, beam_size=1, max_length=MAX_LENGTH):
    """The Python way for one prompt: the language model's completion."""
    tokenizer = exports.tokenizer
    prompt = np.array([[START_ID, *tokenizer.tokenize(tf.constant([text]))[0].numpy()]])
    # The model has 2 * MAX_LENGTH positions: the completion fills the rest.
    max_length = min(max_length, 2 * MAX_LENGTH - prompt.shape[1])
    ids, _ = decoding.beam_search(exports.language_model, prompt, max_length, beam_size=beam_size)
    return tokenizer.detokenize(np.asarray(ids)[:, prompt.shape[1] :]).numpy()[0]


def sample_in_process(exports, text, max_length, temperature, top_k, top_p, seed):
    """The Python way for one prompt: a sampled completion, its options as
    one-row tensors (as the export passes them)."""
    tokenizer = exports.tokenizer
    prompt = np.array([[START_ID, *tokenizer.tokenize(tf.constant([text]))[0].numpy()]])
    max_length = min(max_length, 2 * MAX_LENGTH - prompt.shape[1])
    ids = decoding.sample(
        exports.language_model,
        prompt,
        max_length,
        temperature=tf.constant([temperature], tf.float32),
        top_k=tf.constant([top_k]),
        top_p=tf.constant([top_p], tf.float32),
        seed=tf.constant([seed]),
    )
    return tokenizer.detokenize(np.asarray(ids)[:, prompt.shape[1] :]).numpy()[0]


def per_row(*values):
    return np.array(values, dtype=np.int32)


def assert_row_answers_as_alone(together, row, alone):
    """Row `row` of a batch's `(sequences [B, N, T], scores [B, N])` is the
    one-row answer `alone`: its sequences, zeros past their width, and its
    scores."""
    width = np.asarray(alone[0]).shape[2]
    np.testing.assert_array_equal(np.asarray(together[0])[row, :, :width], alone[0][0])
    assert not np.asarray(together[0])[row, :, width:].any()
    np.testing.assert_allclose(np.asarray(together[1])[row], alone[1][0], rtol=1e-5)


# Per-request options, row by row: (beam size, maximum length) of each of TEXTS.
MIXED_OPTIONS = [(1, 4), (3, 10), (2, 2), (3, 4)]

# `translate_batch` options, one value for each of TEXTS: every option, some
# rows with the zoo's stopping rule (patience 0), some with CTranslate2's.
BATCH_OPTIONS = {
    "beam_size": [1, 4, 3, 2],
    "patience": [1.0, 1.0, 0.0, 1.0],
    "num_hypotheses": [1, 3, 2, 1],
    "length_penalty": [1.0, 0.0, 0.5, 1.0],
    "repetition_penalty": [1.0, 1.0, 1.5, 1.0],
    "no_repeat_ngram_size": [0, 2, 0, 0],
    "min_decoding_length": [1, 1, 4, 1],
    "max_decoding_length": [10, 10, 10, 3],
    "disable_unk": [False, True, False, False],
    "target_prefix": ["", "5", "", "9"],
    "suppress_sequences": [["", ""], ["3", ""], ["", ""], ["51", "4"]],
}


# `translate_batch` with alignments, one value for each of TEXTS: rows that
# ask for the attention, for unknowns replaced, for both and for neither;
# target prefixes of a character the vocabulary lacks ("a": `<unk>`), so
# that there is an unknown to replace.
ALIGN_OPTIONS = {
    "beam_size": [1, 2, 3, 2],
    "num_hypotheses": [1, 2, 2, 1],
    "target_prefix": ["a", "a", "9a", "a"],
    "return_attention": [True, False, True, False],
    "replace_unknowns": [True, True, False, False],
}

# Options sent once for all texts (`[1]`, `[1, S]`), which the graph repeats
# for each text: the same answers as the same values sent per text.
ONE_FOR_ALL = {
    "beam_size": [3],
    "num_hypotheses": [2],
    "length_penalty": [0.5],
    "target_prefix": ["9"],
    "return_attention": [True],
    "suppress_sequences": [["1", "23"]],
}


# Answers of 40 to 60 tokens, longer than the compiled search's first room
# (twice the longest source and 16 more: 28 tokens, a buffer of 32), so the
# XLA export searches them again with the whole room.
LONG_OPTIONS = {"min_decoding_length": [40] * len(TEXTS), "max_decoding_length": [60] * len(TEXTS)}


def batch_inputs(texts, rows=None, **options):
    """`translate_batch`'s inputs for `texts`: CTranslate2's defaults, or
    per row the values given (one list per option). `rows`: how many
    values each option has (default: one per text)."""
    from keras_attention.export.servers import translation

    n = len(texts) if rows is None else rows
    inputs = {"text": as_bytes(texts)}
    for name, default in translation.defaults().items():
        values = options.get(name, [default] * n)
        if name in translation.signature_options():
            dtype = translation.signature_options()[name][0].as_numpy_dtype
            inputs[name] = np.array(values, dtype=dtype).reshape([n])
        elif name == "suppress_sequences":  # [B, S]
            inputs[name] = np.array(values, dtype=object).reshape([n, -1] if n else [0, 1])
        else:
            inputs[name] = np.array(values, dtype=object).reshape([n])
    return inputs


def requests(exports):
    """What the fresh process asks each export: (signature, inputs) pairs."""
    texts, odd = as_bytes(TEXTS), as_bytes(ODD_TEXTS)
    n = len(TEXTS)
    beam_sizes, max_lengths = zip(*MIXED_OPTIONS, strict=True)
    translation = [
        ("serving_default", {"text": texts}),  # the export's beam size and length
        (
            "translate_with_options",
            {
                "text": texts,
                "beam_size": per_row(*[3] * n),
                "max_decoding_length": per_row(*[4] * n),
            },
        ),
        ("translate_with_attention", {"text": texts}),
        ("serving_default", {"text": odd}),
        ("serving_default", {"text": EMPTY}),
        ("translate_with_attention", {"text": EMPTY}),
        (
            "translate_with_options",
            # The export's beam size, and 0: the export's own length (under
            # XLA, its compiled search).
            {
                "text": texts,
                "beam_size": per_row(*[BEAM_SIZE] * n),
                "max_decoding_length": per_row(*[0] * n),
            },
        ),
        (
            "translate_with_options",
            {
                "text": texts,
                "beam_size": per_row(*beam_sizes),
                "max_decoding_length": per_row(*max_lengths),
            },
        ),
        (
            "translate_with_options",
            {"text": EMPTY, "beam_size": per_row(), "max_decoding_length": per_row()},
        ),
    ]
    warmup = [
        (r.model_spec.signature_name, {k: tf.make_ndarray(v) for k, v in r.inputs.items()})
        for r in export.read_warmup_requests(exports.translator_v1 / export.WARMUP_FILE)
    ]
    lm_warmup = [
        (r.model_spec.signature_name, {k: tf.make_ndarray(v) for k, v in r.inputs.items()})
        for r in export.read_warmup_requests(exports.language_model_path / export.WARMUP_FILE)
    ]
    batch = [
        ("translate_batch", batch_inputs(TEXTS)),  # CTranslate2's defaults
        ("translate_batch", batch_inputs(TEXTS, **BATCH_OPTIONS)),
        ("translate_batch", batch_inputs(TEXTS, num_hypotheses=[1, 1, 3, 1])),  # beam 2: refused
        ("translate_batch", batch_inputs([])),
    ]
    long_answers = [("translate_batch", batch_inputs(TEXTS, **LONG_OPTIONS))]
    scored = [("score_batch", {"source": texts, "target": as_bytes([t[::-1] for t in TEXTS])})]
    aligned = [("translate_batch", batch_inputs(TEXTS, **ALIGN_OPTIONS))]
    defaults = [
        ("translate_batch", {"text": texts}),  # every option from the SignatureDef's defaults
        ("translate_batch", batch_inputs(TEXTS, rows=1, **ONE_FOR_ALL)),
        (
            "translate_batch",
            batch_inputs(TEXTS, **{k: v * n for k, v in ONE_FOR_ALL.items()}),
        ),
    ]
    return {
        # (The requests added last go before `scored`: tests read the
        # others by their place from the end.)
        str(exports.translator_v1): translation + warmup + aligned + defaults + scored + batch,
        # (XLA compiles a program per group of rows: every option in a row
        # of its own, and not CTranslate2's defaults again.)
        str(exports.translator_v2): translation + batch[1:2] + long_answers + aligned,
        str(exports.rnn_path): translation[:3] + aligned + batch[1:2],
        str(exports.classifier_path): [
            ("serving_default", {"text": texts}),
            ("serving_default", {"text": odd}),
            ("serving_default", {"text": EMPTY}),
        ],
        str(exports.rotary_classifier_path): [("serving_default", {"text": texts})],
        str(exports.language_model_path): [
            ("serving_default", {"prompt": texts}),
            ("serving_default", {"prompt": odd}),
            ("serving_default", {"prompt": EMPTY}),
            (
                "complete_with_options",
                {
                    "prompt": texts,
                    "beam_size": per_row(*beam_sizes),
                    "max_decoding_length": per_row(*max_lengths),
                },
            ),
            ("complete_by_sampling", sampling_inputs(texts, SAMPLING_OPTIONS)),
            ("complete_by_sampling", sampling_inputs(odd, SAMPLING_OPTIONS)),
            ("complete_by_sampling", sampling_inputs(EMPTY, [])),
        ]
        + lm_warmup,
    }


# Sampling options, row by row for each of TEXTS: (max_length, temperature,
# top_k, top_p, seed). Row 1 is greedy (temperature 0); the last seed is
# negative (any int32 is a seed).
SAMPLING_OPTIONS = [
    (10, 1.0, 0, 1.0, 7),
    (4, 0.0, 0, 1.0, 8),
    (6, 0.7, 3, 0.0, 9),
    (10, 2.0, 0, 0.8, -7),
]


def sampling_inputs(texts, options):
    """The inputs of `complete_by_sampling`, from one options tuple per text."""
    columns = list(zip(*options, strict=True)) or [[]] * 5
    max_length, temperature, top_k, top_p, seed = columns
    return {
        "prompt": texts,
        "max_decoding_length": per_row(*max_length),
        "temperature": np.array(temperature, np.float32),
        "top_k": per_row(*top_k),
        "top_p": np.array(top_p, np.float32),
        "seed": per_row(*seed),
    }


def make_run(exports, folder):
    """A run folder as the translate recipe leaves it, from the trained
    translator of the export tests."""
    folder.mkdir()
    files = RunFiles(folder)
    exports.translator.save(files.model)
    exports.tokenizer.save(files.vocabulary("source", "character"))
    exports.tokenizer.save(files.vocabulary("target", "character"))
    config = {
        "max_length": MAX_LENGTH,  # as runs wrote it before `max_input_length`
        "beam_size": BEAM_SIZE,
        "export_name": "reverse",
        "tokenizer": "character",
    }
    files.config.write_text(json.dumps(config))
    return folder
