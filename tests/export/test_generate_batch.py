"""CTranslate2's `Generator` options (`decoding.generate`, the export's
`generate_batch`) held against CTranslate2 itself, on the committed tiny
Llama and GPT-2 checkpoints converted into `TransformerLM`s and exported
with `--format ctranslate2`: the same results, option by option, and the
same scores; `decoding.score_sequences` against its `score_batch`."""

import json
from types import SimpleNamespace

import ctranslate2
import numpy as np
import pytest
import tensorflow as tf
from convert_helpers import FIXTURES, WORDS
from export_helpers import assert_row_answers_as_alone

from keras_attention import decoding
from keras_attention.convert import from_huggingface
from keras_attention.export.ctranslate2_model import export_ctranslate2
from keras_attention.export.servers.language_model import prompt_ids
from keras_attention.utils import END_ID, PAD_ID, START_ID

# Large: two checkpoints converted and compared with CTranslate2 option by
# option (a minute); translators' options are held in the default run
# (tests/export/test_translate_batch.py).
pytestmark = pytest.mark.large

NAMES = ["llama", "gpt2"]
MAX_LENGTH = 32  # short: the checkpoints are random, their answers long
PROMPT_TOKENS = 16  # the longest prompt, so that every prompt leaves room to generate

# Option sets, each with its name (CTranslate2's `generate_batch` names).
CASES = {
    "greedy": dict(),
    "beam 4": dict(beam_size=4),
    "n-best 4, alpha 0": dict(beam_size=4, num_hypotheses=4, length_penalty=0.0),
    "n-best 4, alpha 1": dict(beam_size=4, num_hypotheses=4),
    "min_length 20": dict(beam_size=4, min_length=20),
    "repetition_penalty 1.5": dict(repetition_penalty=1.5),
    "repetition_penalty 1.5, beam": dict(beam_size=4, repetition_penalty=1.5),
    "no_repeat_ngram_size 2": dict(no_repeat_ngram_size=2),
    "no_repeat_ngram_size 2, beam": dict(beam_size=4, no_repeat_ngram_size=2),
    "no_repeat_ngram_size 1, greedy": dict(no_repeat_ngram_size=1),
    "suppress_sequences": dict(beam_size=4, suppress_sequences="frequent"),
    "prompt left out": dict(include_prompt_in_result=False),
    "prompt left out, beam": dict(beam_size=4, num_hypotheses=2, include_prompt_in_result=False),
    "prompt left out, min_length 6": dict(min_length=6, include_prompt_in_result=False),
    "prompt left out, no_repeat_ngram_size 1": dict(
        no_repeat_ngram_size=1, include_prompt_in_result=False
    ),
    "sampling_topk 1": dict(sampling_topk=1, sampling_temperature=0.7),
    # Draws at temperature 0: CTranslate2's are copies of the greedy result.
    "2 draws at temperature 0": dict(sampling_topk=5, sampling_temperature=0.0, num_hypotheses=2),
    "max_length 3": dict(beam_size=4, max_length=3, include_prompt_in_result=False),
}
# The options whose comparisons need teeth: each changes CTranslate2's
# own results against the same search without it.
TEETH = {
    "min_length 20": "beam 4",
    "repetition_penalty 1.5": "greedy",
    "no_repeat_ngram_size 2": "greedy",
    "no_repeat_ngram_size 1, greedy": "greedy",
    "suppress_sequences": "beam 4",
    "prompt left out, min_length 6": "prompt left out",
    "prompt left out, no_repeat_ngram_size 1": "prompt left out",
}


def texts(name):
    """Prompts: the fixture's texts without special tokens, then phrases."""
    reference = json.loads((FIXTURES / name / "reference.json").read_text("utf-8"))
    kept = [t for t in reference["texts"] if t.strip() and "<" not in t]
    random = np.random.default_rng(5)
    return kept + [" ".join(random.choice(WORDS, random.integers(1, 6))) for _ in range(30)]


@pytest.fixture(scope="module", params=NAMES)
def both(request, tmp_path_factory):
    """A converted checkpoint (`model`), CTranslate2's generator on its
    weights (`generator`), the prompts' ids and the vocabulary, and
    sequences to suppress (`suppress`): the token CTranslate2's beam search
    generates most often, alone, and the next two as a pair."""
    converted = from_huggingface(FIXTURES / request.param)
    model, tokenizer = converted.model, converted.tokenizers["text"]
    folder = tmp_path_factory.mktemp("ctranslate2") / request.param
    export_ctranslate2(model, folder, tokenizer)
    generator = ctranslate2.Generator(str(folder), intra_threads=1)
    ids = np.asarray(prompt_ids(tokenizer, tf.constant(texts(request.param)), 64))
    # 30 prompts that leave room to generate (a prompt that fills
    # `max_length` is its whole result).
    ids = ids[(ids != PAD_ID).sum(axis=1) <= PROMPT_TOKENS][:30]
    ids = ids[:, : (ids != PAD_ID).sum(axis=1).max()]
    both = SimpleNamespace(
        model=model, generator=generator, vocabulary=list(tokenizer.vocabulary), ids=ids
    )
    counts = {}
    for answer in results(theirs(both, dict(CASES["beam 4"], include_prompt_in_result=False))):
        for token in answer[0]:
            counts[token] = counts.get(token, 0) + 1
    frequent = sorted(counts, key=lambda token: -counts[token])[:3]
    both.suppress = [frequent[:1], frequent[1:]]
    return both


def pieces(vocabulary, row):
    return [vocabulary[i] for i in row if i != PAD_ID]


def ours(both, options):
    model, vocabulary, ids = both.model, both.vocabulary, both.ids
    options = dict(options)
    options.setdefault("max_length", MAX_LENGTH)
    included = options.pop("include_prompt_in_result", True)
    if options.get("suppress_sequences") == "frequent":
        sequences = both.suppress
        width = max(map(len, sequences))
        padded = [[vocabulary.index(t) for t in s] + [0] * (width - len(s)) for s in sequences]
        options["suppress_sequences"] = np.repeat(np.array(padded)[None], len(ids), axis=0)
    output, scores = decoding.generate(
        model,
        ids,
        decoding.DecodingOptions.generation(**options),
        include_prompt_in_result=included,
        seed=np.arange(len(ids), dtype="int32"),
    )
    answers = []
    for hypotheses, row_scores in zip(np.asarray(output), np.asarray(scores), strict=True):
        answer = []
        for hypothesis, score in zip(hypotheses.tolist(), row_scores.tolist(), strict=True):
            if END_ID in hypothesis:
                hypothesis = hypothesis[: hypothesis.index(END_ID)]
            answer.append((pieces(vocabulary, hypothesis), score))
        answers.append(answer)
    return answers


def theirs(both, options):
    """CTranslate2's results, each prompt alone (a batch of one), as each
    of our rows is decoded: with `include_prompt_in_result=False`
    CTranslate2 runs the shortest prompt of a batch at once and the rest
    of the others as a prefix, so its results depend on the batch."""
    generator, vocabulary, ids = both.generator, both.vocabulary, both.ids
    options = dict(options)
    options.setdefault("max_length", MAX_LENGTH)
    if options.get("suppress_sequences") == "frequent":
        options["suppress_sequences"] = both.suppress
    answers = []
    for row in ids:
        (result,) = generator.generate_batch(
            [pieces(vocabulary, row)], return_scores=True, **options
        )
        answers.append(list(zip(result.sequences, result.scores, strict=True)))
    return answers


def results(answers):
    return [[tokens for tokens, _ in answer] for answer in answers]


def test_the_prompts_are_many_and_the_checkpoints_answer(both):
    assert len(both.ids) == 30
    answers = results(theirs(both, dict(include_prompt_in_result=False)))
    assert len({tuple(answer[0]) for answer in answers}) > 10  # the continuations differ
    assert sum(len(answer[0]) > 0 for answer in answers) >= 20  # most generate


@pytest.mark.parametrize("case", CASES)
def test_results_and_scores_equal_ctranslate2s(both, case):
    expected, answers = theirs(both, CASES[case]), ours(both, CASES[case])
    same = [a == e for a, e in zip(results(answers), results(expected), strict=True)]
    assert sum(same) >= 0.99 * len(same), [i for i, s in enumerate(same) if not s]
    for answer, theirs_, equal in zip(answers, expected, same, strict=True):
        if equal:
            np.testing.assert_allclose(
                [s for _, s in answer], [s for _, s in theirs_], atol=1e-4, rtol=0
            )


def test_each_option_changes_ctranslate2s_results(both):
    """The comparisons above have teeth: each option changes CTranslate2's
    own results on many prompts."""
    for case, plain in TEETH.items():
        with_option, without = theirs(both, CASES[case]), theirs(both, CASES[plain])
        changed = sum(a != b for a, b in zip(results(with_option), results(without), strict=True))
        assert changed >= 5, (case, changed)


def test_scores_equal_ctranslate2s_score_batch(both):
    model, generator, vocabulary, ids = both.model, both.generator, both.vocabulary, both.ids
    labels, log_probs = decoding.score_sequences(model, ids)
    expected = generator.score_batch([pieces(vocabulary, row) for row in ids])
    for row, (result, label_row) in enumerate(zip(expected, np.asarray(labels), strict=True)):
        assert pieces(vocabulary, label_row) == result.tokens
        np.testing.assert_allclose(
            np.asarray(log_probs)[row][: len(result.tokens)], result.log_probs, atol=1e-4
        )
    assert len({round(float(x), 3) for x in np.asarray(log_probs).sum(1)}) > 20


def test_sampling_draws_within_the_top_k(both):
    """Sampling cannot draw CTranslate2's draws (its random generator is
    its own): each drawn token is among the k most likely after what came
    before, a seed gives the same draws again, and a row draws the same
    alone as in a batch."""
    model, ids = both.model, both.ids
    options = decoding.DecodingOptions.generation(
        max_length=MAX_LENGTH, sampling_topk=3, sampling_temperature=1.5
    )
    seeds = np.arange(len(ids), dtype="int32") + 11
    drawn, _ = decoding.generate(model, ids, options, include_prompt_in_result=False, seed=seeds)
    drawn = np.asarray(drawn)[:, 0]  # [B, L], after each prompt
    greedy = np.asarray(
        decoding.generate(
            model,
            ids,
            decoding.DecodingOptions.generation(max_length=MAX_LENGTH),
            include_prompt_in_result=False,
        )[0]
    )[:, 0]
    assert (drawn != greedy).any(axis=1).sum() >= 10  # it samples
    for row in range(4):
        prompt = ids[row][ids[row] != PAD_ID]
        continuation = drawn[row][drawn[row] != PAD_ID]
        sequence = np.concatenate([prompt, continuation])[None].astype("int32")
        logits = np.array(model(sequence))[0].copy()
        logits[:, PAD_ID] = -np.inf
        for step, token in enumerate(continuation):
            top = np.argsort(-logits[len(prompt) - 1 + step])[:3]
            assert token in top, (row, step)
    again, _ = decoding.generate(model, ids, options, include_prompt_in_result=False, seed=seeds)
    np.testing.assert_array_equal(np.asarray(again)[:, 0], drawn)
    for row in (0, 5):
        alone, _ = decoding.generate(
            model,
            ids[row : row + 1],
            options,
            include_prompt_in_result=False,
            seed=seeds[row : row + 1],
        )
        alone = np.asarray(alone)[0, 0]
        np.testing.assert_array_equal(alone, drawn[row][: len(alone)])
    other, _ = decoding.generate(
        model, ids, options, include_prompt_in_result=False, seed=seeds + 1
    )
    assert (np.asarray(other)[:, 0] != drawn).any(axis=1).sum() >= 5  # the seed decides


def test_a_row_generates_as_it_does_alone(both):
    """Options given per row (tensors `[B]`) decode each row as it would be
    decoded alone."""
    model, ids = both.model, both.ids
    rows = [0, 1, 2, 3]
    per_row = dict(
        min_length=np.array([0, 6, 0, 0], "int32"),
        no_repeat_ngram_size=np.array([0, 0, 2, 0], "int32"),
        repetition_penalty=np.array([1.0, 1.0, 1.0, 1.5], "float32"),
        length_penalty=np.array([1.0, 0.0, 0.5, 1.0], "float32"),
        max_length=np.array([MAX_LENGTH, MAX_LENGTH, 12, MAX_LENGTH], "int32"),
    )
    included = np.array([True, False, True, False])
    together = decoding.generate(
        model,
        ids[rows],
        decoding.DecodingOptions.generation(beam_size=3, num_hypotheses=2, **per_row),
        include_prompt_in_result=included,
    )
    for row in rows:
        alone = decoding.generate(
            model,
            ids[row : row + 1],
            decoding.DecodingOptions.generation(
                beam_size=3,
                num_hypotheses=2,
                **{name: value[row : row + 1] for name, value in per_row.items()},
            ),
            include_prompt_in_result=bool(included[row]),
        )
        assert_row_answers_as_alone(together, row, alone)


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(sampling_topk=-1), "sampling_topk"),
        (dict(sampling_topp=0.0), "sampling_topp"),
        (dict(sampling_topp=1.5), "sampling_topp"),
        (dict(sampling_temperature=-1.0), "sampling_temperature"),
        (dict(beam_size=2, sampling_topk=5), "sampling_topk` must be 1 with a beam size"),
        (dict(min_length=5, max_length=4), "`min_length` must be at most `max_length`"),
        (dict(max_length=0), "`max_length` must be an integer >= 1. Received: max_length=0"),
    ],
)
def test_bad_generation_options_are_refused_by_name(options, message):
    with pytest.raises(ValueError, match=message):
        decoding.DecodingOptions.generation(**options)


def test_generate_refuses_an_encoder_decoder_and_a_target_prefix(both):
    from keras_attention.models import build_transformer

    with pytest.raises(ValueError, match="encoder-decoder"):
        decoding.generate(build_transformer(20, 20), np.ones((1, 3), "int32"))
    model, ids = both.model, both.ids
    with pytest.raises(ValueError, match="target_prefix"):
        decoding.generate(model, ids, decoding.DecodingOptions(target_prefix=ids))


def test_the_start_token_is_left_out_of_a_result(both):
    """As CTranslate2 leaves its BOS out: a Llama prompt starts with <s>
    (left out), a GPT-2 prompt with its first word (kept)."""
    model, ids = both.model, both.ids
    output, _ = decoding.generate(
        model, ids[:3], decoding.DecodingOptions.generation(max_length=MAX_LENGTH)
    )
    for row, result in zip(ids[:3], np.asarray(output)[:, 0], strict=True):
        prompt = [i for i in row.tolist() if i != PAD_ID]
        given = prompt[1:] if prompt[0] == START_ID else prompt
        assert result.tolist()[: len(given)] == given


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(positions="alibi"), "positions='alibi'"),
        (dict(preset="modern_windowed"), "sliding_window=None; the model has sliding_window=16"),
        (dict(use_gate=True), "use_gate=False; the model has use_gate=True"),
        (dict(positions="rotary", rotary_scaling_factor=2.0), "rotary_scaling_factor"),
        (dict(suppressed_ids=[5]), "suppressed_ids=\\[5\\]"),
    ],
)
def test_what_ctranslate2_cannot_hold_is_refused_by_name(overrides, message, tmp_path):
    from keras_attention.data.tokenizers import CharacterTokenizer
    from keras_attention.models import build_transformer_lm

    tokenizer = CharacterTokenizer.train(["abc"])
    model = build_transformer_lm(tokenizer.vocabulary_size, **overrides)
    with pytest.raises(ValueError, match=message):
        export_ctranslate2(model, tmp_path / "ct2", tokenizer)
    assert not (tmp_path / "ct2").exists()


def test_a_model_of_our_own_equals_ctranslate2s(tmp_path):
    """Sinusoidal positions (our table), the modern preset (RMS norms,
    SwiGLU, rotary positions, grouped-query heads, tied embeddings) and
    post-norm blocks, random weights: greedy results and scores."""
    from keras_attention.data.tokenizers import CharacterTokenizer
    from keras_attention.models import build_transformer_lm

    tokenizer = CharacterTokenizer.train(["abcdefghij klmnopqrst"])
    prompts = ["abc", "hello", "t", "kl mn", "qrstabc", "jihgf"]
    ids = np.asarray(prompt_ids(tokenizer, tf.constant(prompts), 16))
    for overrides in (dict(), dict(preset="modern"), dict(norm_first=False, activation="gelu")):
        model = build_transformer_lm(tokenizer.vocabulary_size, dropout=0.0, **overrides)
        folder = tmp_path / str(len(list(tmp_path.iterdir())))
        export_ctranslate2(model, folder, tokenizer)
        both = SimpleNamespace(
            model=model,
            generator=ctranslate2.Generator(str(folder), intra_threads=1),
            vocabulary=list(tokenizer.vocabulary),
            ids=ids,
        )
        for options in (dict(max_length=20), dict(max_length=20, beam_size=3)):
            expected, answers = theirs(both, options), ours(both, options)
            assert results(answers) == results(expected), overrides
            np.testing.assert_allclose(
                [[s for _, s in a] for a in answers],
                [[s for _, s in e] for e in expected],
                atol=1e-4,
            )


# (Traces the whole signature: half a minute.)
def test_the_signature_answers_an_empty_gpt2_prompt_with_nothing():
    """A GPT-2 prompt has no start token: an empty one has no token to
    continue, and its result is "" scored 0 (CTranslate2 refuses it); the
    other rows answer as `decoding.generate` does, the continuation within
    the learned positions."""
    from keras_attention.export.servers import language_model

    converted = from_huggingface(FIXTURES / "gpt2")
    model, tokenizer = converted.model, converted.tokenizers["text"]
    generate_rows = language_model.row_generate(model, tokenizer, 64)
    signature = language_model.generate_batch(tokenizer, generate_rows, 64)
    signature = signature.get_concrete_function()
    texts = ["", "the red cat", "a small house"]
    inputs = {
        name: tf.constant([default] * len(texts), dtype)
        for name, (dtype, default) in language_model.signature_options().items()
    }
    inputs["max_length"] = tf.constant([MAX_LENGTH, MAX_LENGTH, 1000])  # past the positions
    # (In the order of the signature's inputs: the prompt, the options,
    # the suppressed sequences.)
    outputs = signature(tf.constant(texts), *inputs.values(), tf.constant([[""]] * 3))
    assert outputs["sequences"].numpy()[0, 0] == b"" and outputs["scores"].numpy()[0, 0] == 0
    ids = prompt_ids(tokenizer, tf.constant(texts[1:]), 64)
    limits = np.array([MAX_LENGTH, model.max_position_embeddings - 1], "int32")
    expected, scores = decoding.generate(
        model, ids, decoding.DecodingOptions.generation(max_length=limits)
    )
    expected = np.where(np.cumsum(np.asarray(expected) == END_ID, axis=2) > 0, 0, expected)
    texts = [t.decode() for t in tokenizer.detokenize(np.asarray(expected)[:, 0]).numpy()]
    assert [t.decode() for t in outputs["sequences"].numpy()[1:, 0]] == texts
    np.testing.assert_allclose(
        outputs["scores"].numpy()[1:, 0], np.asarray(scores)[:, 0], atol=1e-5
    )


def test_several_draws_of_a_prompt(both):
    """`num_hypotheses` N with a beam of 1 and sampling: N draws of each
    prompt, each a draw of its own (its tokens among the k most likely),
    best first; the first is the one draw of the same seed."""
    model, ids = both.model, both.ids[:8]
    options = dict(max_length=MAX_LENGTH, sampling_topk=5, sampling_temperature=1.5)
    seeds = np.arange(len(ids), dtype="int32") + 3
    drawn, scores = decoding.generate(
        model,
        ids,
        decoding.DecodingOptions.generation(num_hypotheses=3, **options),
        include_prompt_in_result=False,
        seed=seeds,
    )
    drawn, scores = np.asarray(drawn), np.asarray(scores)
    assert drawn.shape[:2] == scores.shape == (len(ids), 3)
    assert (np.diff(scores, axis=1) <= 0).all()  # best first
    assert sum(len({tuple(d) for d in row}) == 3 for row in drawn) >= 6  # they differ
    one, one_score = decoding.generate(
        model,
        ids,
        decoding.DecodingOptions.generation(**options),
        include_prompt_in_result=False,
        seed=seeds,
    )
    one = np.asarray(one)[:, 0]
    for row in range(len(ids)):
        # The single draw is one of the three, with its score.
        found = [j for j in range(3) if (drawn[row, j][: one.shape[1]] == one[row]).all()][0]
        np.testing.assert_allclose(scores[row, found], np.asarray(one_score)[row, 0], rtol=1e-5)
        prompt = ids[row][ids[row] != PAD_ID]
        for continuation in drawn[row]:
            continuation = continuation[continuation != PAD_ID]
            sequence = np.concatenate([prompt, continuation])[None].astype("int32")
            logits = np.array(model(sequence))[0].copy()
            logits[:, PAD_ID] = -np.inf
            for step, token in enumerate(continuation):
                assert token in np.argsort(-logits[len(prompt) - 1 + step])[:5], (row, step)
    with pytest.raises(ValueError, match="num_hypotheses` must be at most 1"):
        decoding.DecodingOptions.generation(num_hypotheses=3)  # greedy: one result
