"""A language model's `generate_batch` and `score_batch` signatures, loaded
the way TF Serving loads them (a fresh process that imports only
TensorFlow and TF Text), `keras_attention.Generator` over them, and
`python -m keras_attention.export RUN --format ctranslate2` for a language
model: on the committed tiny Llama, converted into a run folder."""

import subprocess
import sys

import ctranslate2
import numpy as np
import pytest
import tensorflow as tf
from convert_helpers import FIXTURES
from export_helpers import ask_a_fresh_process

from keras_attention import Generator, decoding
from keras_attention.convert import convert, from_huggingface
from keras_attention.export.servers import language_model
from keras_attention.export.servers.language_model import prompt_ids
from keras_attention.utils import END_ID, PAD_ID

pytestmark = pytest.mark.large  # converts and exports a model, starts processes

PROMPTS = [
    "My brother saw the big house and",
    "Where is the train? I have",
    "the red cat",
    "Room 417 is on floor 12, and it costs",
    "a",
    "",
]
OPTIONS = dict(beam_size=4, num_hypotheses=2, max_length=40, repetition_penalty=1.2)
DRAWS = dict(num_hypotheses=3, sampling_topk=5, sampling_temperature=1.2, max_length=30)
# One value per row of PROMPTS[:5]: beam sizes, n-best lists, sampling,
# the prompt in the result or not, rules and lengths, all mixed.
MIXED = dict(
    beam_size=[1, 4, 1, 2, 4],
    num_hypotheses=[1, 3, 1, 2, 1],
    sampling_topk=[1, 1, 5, 1, 1],
    sampling_temperature=[1.0, 1.0, 0.9, 1.0, 1.0],
    seed=[0, 0, 7, 0, 0],
    include_prompt_in_result=[True, False, False, True, True],
    no_repeat_ngram_size=[0, 0, 2, 1, 0],
    min_length=[0, 5, 0, 0, 30],
    max_length=[40, 12, 20, 40, 45],
    length_penalty=[1.0, 0.5, 1.0, 0.0, 1.0],
)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The converted tiny Llama: its run folder (with its export), the
    Keras model and its tokenizer."""
    folder = convert(FIXTURES / "llama", tmp_path_factory.mktemp("converted") / "llama")
    converted = from_huggingface(FIXTURES / "llama")
    return folder, converted.model, converted.tokenizers["text"]


@pytest.fixture(scope="module")
def generator(run):
    return Generator(run[0])


def expected(run, texts, included=True, seed=0, **options):
    """`decoding.generate` in this process, detokenized: the texts and
    scores each request should get."""
    _, model, tokenizer = run
    ids = prompt_ids(tokenizer, tf.constant(texts), 64)
    output, scores = decoding.generate(
        model,
        ids,
        decoding.DecodingOptions.generation(**options),
        include_prompt_in_result=included,
        seed=np.full([len(texts)], seed, "int32"),
    )
    output = np.asarray(output)
    ended = np.cumsum(output == END_ID, axis=2) > 0
    output = np.where(ended, PAD_ID, output)
    flat = output.reshape(-1, output.shape[2])
    sequences = [t.decode() for t in tokenizer.detokenize(flat).numpy()]
    width = output.shape[1]
    return [sequences[i * width : (i + 1) * width] for i in range(len(texts))], np.asarray(scores)


def request(texts, **options):
    """A `generate_batch` request: CTranslate2's defaults, then `options`
    (a value for every row, or a list of one per row)."""
    inputs = {
        "prompt": np.array([t.encode() for t in texts], dtype=object),
        "suppress_sequences": np.full((len(texts), 1), b"", dtype=object),
    }
    for name, (dtype, default) in language_model.signature_options().items():
        value = options.get(name, default)
        values = value if isinstance(value, list) else [value] * len(texts)
        inputs[name] = np.array(values, dtype.as_numpy_dtype)
    return inputs


def test_a_fresh_process_answers_as_decoding_does(run, tmp_path):
    """TF Serving's loader in a process without this package: the n-best
    lists and scores of `decoding.generate`, score_batch's log-probabilities
    of `decoding.score_sequences`, and options out of range refused by
    name, row and value."""
    folder, model, tokenizer = run
    (path,) = (folder / "serving" / "llama").iterdir()
    texts = PROMPTS[:5]
    spec = {
        str(path): [
            ("generate_batch", request(texts, **OPTIONS)),
            ("generate_batch", request(texts, include_prompt_in_result=False, max_length=8)),
            ("score_batch", {"text": np.array([t.encode() for t in texts], dtype=object)}),
            ("generate_batch", request(texts, beam_size=2, sampling_topk=5)),
            ("generate_batch", request(texts, min_length=[0, 0, 30, 0, 0], max_length=20)),
            ("generate_batch", request(texts, sampling_topp=0.0)),
            ("generate_batch", request(texts, **MIXED)),
            ("generate_batch", request(texts, seed=5, **DRAWS)),
            *(
                ("generate_batch", request([text], **{k: [v[i]] for k, v in MIXED.items()}))
                for i, text in enumerate(texts)
            ),
        ]
    }
    answers = ask_a_fresh_process(spec, tmp_path)[str(path)]["answers"]
    # Each row of a request with its own options answers as it does alone.
    mixed, alone = answers[6], answers[8:]
    # Three draws of each prompt, as `decoding.generate` draws them.
    sequences, scores = expected(run, texts, seed=5, **DRAWS)
    assert [[s.decode() for s in row] for row in answers[7]["sequences"]] == sequences
    np.testing.assert_allclose(answers[7]["scores"], scores, atol=1e-5)
    assert sum(len(set(row)) > 1 for row in sequences) >= 3
    for row, answer in enumerate(alone):
        width = answer["sequences"].shape[1]
        assert list(mixed["sequences"][row, :width]) == list(answer["sequences"][0])
        assert not any(mixed["sequences"][row, width:])
        np.testing.assert_allclose(mixed["scores"][row, :width], answer["scores"][0], atol=1e-5)
    assert len({tuple(row) for row in mixed["sequences"]}) == len(texts)
    sequences, scores = expected(run, texts, **OPTIONS)
    assert [[s.decode() for s in row] for row in answers[0]["sequences"]] == sequences
    np.testing.assert_allclose(answers[0]["scores"], scores, atol=1e-5)
    sequences, scores = expected(run, texts, included=False, max_length=8)
    assert [[s.decode() for s in row] for row in answers[1]["sequences"]] == sequences
    firsts = [row[0] for row in sequences]
    assert not any(s.startswith(t) for s, t in zip(firsts, texts, strict=True) if len(t) > 3)
    labels, log_probs = decoding.score_sequences(
        model, prompt_ids(tokenizer, tf.constant(texts), 64)
    )
    np.testing.assert_allclose(answers[2]["log_probs"], log_probs, atol=1e-5)
    np.testing.assert_allclose(answers[2]["log_prob"], np.sum(log_probs, axis=1), atol=1e-5)
    tokens = [[tokenizer.vocabulary[i] for i in row if i] for row in np.asarray(labels)]
    assert [[t.decode() for t in row if t] for row in answers[2]["tokens"]] == tokens
    refusals = [
        (3, "`sampling_topk` must be >= 0, and 1 with a beam_size above 1", 0, "5"),
        (4, "`min_length` must be from 0 to max_length", 2, "30"),
        (5, "`sampling_topp` must be in (0, 1]", 0, "0"),
    ]
    for index, message, row, value in refusals:
        error = answers[index]["error"]
        assert "generate_batch: " + message in error, error
        assert f"row] [{row}] [has] [{value}]" in error, error


def test_the_generator_answers_as_the_signature(generator, run):
    results = generator.generate_batch(PROMPTS[:5], return_scores=True, **OPTIONS)
    sequences, scores = expected(run, PROMPTS[:5], **OPTIONS)
    assert [r.sequences for r in results] == sequences
    np.testing.assert_allclose([r.scores for r in results], scores, atol=1e-5)
    assert all(r.scores == [] for r in generator.generate_batch(PROMPTS[:2], max_length=4))
    # In batches of two prompts, or of tokens, each keeps its answer.
    for batching in (dict(max_batch_size=2), dict(max_batch_size=12, batch_type="tokens")):
        batched = generator.generate_batch(PROMPTS[:5], return_scores=True, **batching, **OPTIONS)
        assert [r.sequences for r in batched] == sequences
        np.testing.assert_allclose([r.scores for r in batched], scores, atol=1e-5)
    iterated = generator.generate_iterable(iter(PROMPTS[:5]), max_batch_size=2, **OPTIONS)
    assert [r.sequences for r in iterated] == sequences
    scored = generator.score_batch(PROMPTS[:3])
    assert all(len(s.tokens) == len(s.log_probs) > 0 for s in scored)
    # The empty prompt of a Llama still has its start token to continue.
    (empty,) = generator.generate_batch([""], max_length=5)
    assert empty.sequences[0] != ""


def test_sampling_is_reproducible_and_row_independent(generator):
    options = dict(max_length=10, sampling_topk=0, sampling_temperature=1.5, seed=3)
    first = generator.generate_batch(PROMPTS[:4], **options)
    assert generator.generate_batch(PROMPTS[:4], **options) == first
    assert generator.generate_batch(PROMPTS[:4], max_batch_size=1, **options) == first
    other = generator.generate_batch(PROMPTS[:4], **{**options, "seed": 4})
    assert other != first
    greedy = generator.generate_batch(PROMPTS[:4], max_length=10)
    assert first != greedy


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda g: g.generate_batch([["▁the"]]), TypeError, "text, not tokens"),
        (lambda g: g.generate_batch("the"), TypeError, "not one text"),
        (lambda g: g.generate_batch(["a"], beam_size=2.5), TypeError, "beam_size"),
        (lambda g: g.generate_batch(["a"], end_token="x"), TypeError, "end_token"),
        (lambda g: g.generate_batch(["a"], batch_type="lines"), ValueError, "batch_type"),
        (lambda g: g.score_batch([["▁the"]]), TypeError, "text, not tokens"),
    ],
)
def test_bad_arguments_are_refused_by_name(generator, call, error, message):
    with pytest.raises(error, match=message):
        call(generator)


def test_options_out_of_range_are_refused_by_the_export(generator):
    with pytest.raises(tf.errors.InvalidArgumentError, match="num_hypotheses"):
        generator.generate_batch(["a"], num_hypotheses=3)


def test_a_folder_without_an_export_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="not an export"):
        Generator(tmp_path)


def test_the_export_command_writes_a_ctranslate2_generator(run, tmp_path):
    """`--format ctranslate2` for a language model: CTranslate2's
    generator answers as our signature does."""
    folder, _, tokenizer = run
    output = tmp_path / "ct2"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "keras_attention.export",
            str(folder),
            "--format",
            "ctranslate2",
            "--export-dir",
            str(output),
        ],
        check=True,
        timeout=600,
    )
    generator = ctranslate2.Generator(str(output), intra_threads=1)
    ids = np.asarray(prompt_ids(tokenizer, tf.constant(PROMPTS[:4]), 64))
    tokens = [[tokenizer.vocabulary[i] for i in row if i] for row in ids]
    theirs = [generator.generate_batch([t], max_length=12)[0].sequences[0] for t in tokens]
    ours = Generator(folder).generate_batch(PROMPTS[:4], max_length=12)
    for result, pieces in zip(ours, theirs, strict=True):
        ids = [tokenizer.vocabulary.index(p) for p in pieces]
        text = tokenizer.detokenize(tf.constant([ids])).numpy()[0].decode()
        assert result.sequences == [text]
