"""What server-side batching needs: a request's answer is the same whether it
is sent alone or concatenated with other requests, of other lengths and
other options, in any order."""

import numpy as np
import pytest
import tensorflow as tf
from export_helpers import MAX_LENGTH
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# Digit strings like the translator's training data, from empty to longer
# than the export keeps (truncated), so batches mix very different lengths.
TEXT = st.text(alphabet="0123456789", max_size=MAX_LENGTH + 3)
# (beam size, length, temperature, top-k, top-p, seed): each signature takes
# the ones it has inputs for. Temperature 0 is greedy; top-k 0 and top-p 0 or
# 1 set no limit.
OPTIONS = st.tuples(
    st.integers(1, 4),
    st.integers(1, MAX_LENGTH),
    st.sampled_from([0.0, 0.5, 1.0, 3.0]),
    st.integers(0, 6),
    st.sampled_from([0.0, 0.3, 0.9, 1.0]),
    st.integers(-(2**31), 2**31 - 1),
)
OPTION_INPUTS = {
    "beam_size": tf.int32,
    "max_decoding_length": tf.int32,
    "temperature": tf.float32,
    "top_k": tf.int32,
    "top_p": tf.float32,
    "seed": tf.int32,
}
ROWS = st.lists(st.tuples(TEXT, OPTIONS), min_size=1, max_size=12)


@pytest.fixture(scope="module")
def signatures(exports):
    def load(path):
        return tf.saved_model.load(str(path)).signatures

    return {
        "translator": load(exports.translator_v1),
        "classifier": load(exports.classifier_path),
        "language_model": load(exports.language_model_path),
    }


def call(signature, rows, text_input="text"):
    """The signature's answer for `rows` of `(text, options)`, as a list of
    one dict of numpy values per row."""
    inputs = {text_input: tf.constant([text for text, _ in rows], tf.string)}
    takes = signature.structured_input_signature[1]
    for position, (name, dtype) in enumerate(OPTION_INPUTS.items()):
        if name in takes:
            inputs[name] = tf.constant([options[position] for _, options in rows], dtype)
    outputs = {name: value.numpy() for name, value in signature(**inputs).items()}
    return [{name: value[i] for name, value in outputs.items()} for i in range(len(rows))]


def assert_same(row_in_batch, row_alone):
    for name, alone in row_alone.items():
        alone, in_batch = np.asarray(alone), np.asarray(row_in_batch[name])
        if name == "attention":  # [H, T, S]: the batch pads T and S further, with zeros
            heads, targets, sources = alone.shape
            assert not in_batch[:, targets:].any() and not in_batch[:, :, sources:].any()
            in_batch = in_batch[:, :targets, :sources]
        elif name in ("source_tokens", "target_tokens"):  # padded with ""
            assert not in_batch[len(alone) :].any()
            in_batch = in_batch[: len(alone)]
        if alone.dtype.kind == "f":
            # Probabilities and attention weights: the matrix products of a
            # larger batch may sum in another order (oneDNN picks its blocking
            # by shape), so they agree to float32 rounding, not bit for bit.
            np.testing.assert_allclose(in_batch, alone, rtol=1e-5, atol=1e-7, err_msg=name)
        else:  # texts, tokens, label ids: the same
            np.testing.assert_array_equal(in_batch, alone, err_msg=name)


CASES = [
    ("translator", "serving_default", "text"),
    ("translator", "translate_with_attention", "text"),
    ("translator", "translate_with_options", "text"),
    ("classifier", "serving_default", "text"),
    ("language_model", "serving_default", "prompt"),
    ("language_model", "complete_with_options", "prompt"),
    ("language_model", "complete_by_sampling", "prompt"),
]


@pytest.mark.parametrize("model,signature_name,text_input", CASES)
@settings(
    max_examples=8,
    deadline=None,
    derandomize=True,  # the same batches every run: a failure is a fault, never chance
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(rows=ROWS, order=st.randoms(use_true_random=False))
def test_a_row_answers_alike_alone_and_in_any_batch(
    signatures, model, signature_name, text_input, rows, order
):
    signature = signatures[model][signature_name]
    shuffled = list(range(len(rows)))
    order.shuffle(shuffled)
    in_batch = call(signature, [rows[i] for i in shuffled], text_input)
    for position, index in enumerate(shuffled):
        assert_same(in_batch[position], call(signature, [rows[index]], text_input)[0])


@pytest.mark.parametrize("model,signature_name,text_input", CASES)
def test_a_batch_of_one_equals_its_row_in_a_batch_of_64(
    signatures, model, signature_name, text_input
):
    random = np.random.default_rng(7)
    rows = [
        (
            "".join(map(str, random.integers(0, 10, random.integers(0, MAX_LENGTH + 3)))),
            (
                int(random.integers(1, 5)),
                int(random.integers(1, MAX_LENGTH + 1)),
                float(random.choice([0.0, 0.5, 1.0, 3.0])),
                int(random.integers(0, 7)),
                float(random.choice([0.0, 0.3, 0.9, 1.0])),
                int(random.integers(-(2**31), 2**31)),
            ),
        )
        for _ in range(64)
    ]
    signature = signatures[model][signature_name]
    in_batch = call(signature, rows, text_input)
    for row, answer in zip(rows, in_batch, strict=True):
        assert_same(answer, call(signature, [row], text_input)[0])
