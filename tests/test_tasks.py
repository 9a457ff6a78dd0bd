"""The task registry (`keras_attention.tasks`): every model of the zoo has
one task, which names its tokenizers and decodes, explains and serves it."""

import numpy as np
import pytest
from keras import ops

from keras_attention.data.tokenizers import START_ID
from keras_attention.models import (
    build_seq2seq_attention,
    build_transformer,
    build_transformer_classifier,
    build_transformer_embedder,
    build_transformer_lm,
)
from keras_attention.tasks import TASKS, task_of
from keras_attention.tasks.translation import cross_attention

TINY = dict(num_layers=1, model_dim=16, num_heads=2, intermediate_dim=32)


@pytest.mark.parametrize(
    "build, name, sides",
    [
        (lambda: build_transformer(30, 40, **TINY), "translation", ("source", "target")),
        (lambda: build_seq2seq_attention(30, 40, units=8), "translation", ("source", "target")),
        (lambda: build_transformer_classifier(30, 3, **TINY), "classification", ("text",)),
        (lambda: build_transformer_lm(30, **TINY), "language_model", ("text",)),
        (lambda: build_transformer_embedder(30, **TINY), "embedding", ("text",)),
    ],
)
def test_every_model_has_its_task(build, name, sides):
    task = task_of(build())
    assert task is TASKS[name] and task.name == name and task.sides == sides
    assert task_of(name) is task


def test_a_model_without_a_task_is_refused_by_type():
    with pytest.raises(ValueError, match="Received: list"):
        task_of([])
    with pytest.raises(ValueError, match="'summarization'"):
        task_of("summarization")


@pytest.mark.parametrize("build", [build_transformer, build_seq2seq_attention])
def test_cross_attention_teacher_forces_the_answer(build):
    """Row t is what the decoder attended to while producing y_t: the
    weights of `<s> y1 .. y(t-1)` in, read from the model directly."""
    model = build(30, 40, **TINY) if build is build_transformer else build(30, 40, units=8)
    source = np.array([[5, 6, 7, 8, 2]], "int32")
    answer = np.array([[9, 10, 11, 2]], "int32")  # y1 y2 y3 </s>
    weights = ops.convert_to_numpy(cross_attention(model, source, answer))
    forced = np.array([[START_ID, 9, 10, 11]], "int32")
    scores = model.attention_scores({"source_ids": source, "target_ids": forced})
    expected = ops.convert_to_numpy(scores["decoder_cross_attention"][-1])
    assert weights.dtype == np.float32 and weights.shape == expected.shape
    np.testing.assert_allclose(weights, expected, atol=1e-6)
    # Each row is a distribution over the 5 source positions.
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)


def test_a_run_s_export_arguments_are_read_from_what_it_records(tmp_path):
    """`Task.export_arguments` is the one place that reads what a run's
    export takes from its config.json and files: a translation recipe's
    run (the beam size and length penalty it chose, no decoding length: its
    input length), a converted checkpoint's (`num_beams`, its lengths), a
    language-model recipe's (no beam size: greedy) and a classifier's
    class names."""
    from keras_attention.run_files import RunFiles

    files = RunFiles(tmp_path)
    recipe_run = {
        "max_input_length": 48,
        "beam_size": 4,
        "max_decoding_length": None,
        "length_penalty": 0.6,
    }
    assert TASKS["translation"].export_arguments(recipe_run, files) == {
        "beam_size": 4,
        "max_decoding_length": 48,
        "length_penalty": 0.6,
    }
    converted = {"max_input_length": 510, "max_decoding_length": 510, "beam_size": 6}
    assert TASKS["translation"].export_arguments(converted, files) == {
        "beam_size": 6,
        "max_decoding_length": 510,
        "length_penalty": None,
    }
    language_model_run = {"max_input_length": 32, "max_decoding_length": 20}
    assert TASKS["language_model"].export_arguments(language_model_run, files) == {
        "beam_size": 1,
        "max_decoding_length": 20,
        "length_penalty": None,
    }
    files.labels.write_text('["low", "high"]')
    assert TASKS["classification"].export_arguments({"max_input_length": 8}, files) == {
        "label_names": ["low", "high"]
    }
