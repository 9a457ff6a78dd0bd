"""CTranslate2's decoding options (`decoding.search`, the export's
`translate_batch`) held against CTranslate2 itself, on the trained
translator of the export tests and its `--format ctranslate2` export: the
same n-best lists, option by option, and the same scores."""

import ctranslate2
import numpy as np
import pytest
import tensorflow as tf
from export_helpers import MAX_LENGTH, assert_row_answers_as_alone, reversal_pairs

from keras_attention import decoding
from keras_attention.export.ctranslate2_model import export_ctranslate2
from keras_attention.utils import END_ID, PAD_ID

SENTENCES = [source for source, _ in reversal_pairs(100, seed=3)]

# Option sets, each with its name. Beam 4 and 4 hypotheses at alpha 0 and
# 1; the others one option each (beam 4), then a patience of 2 (5
# hypotheses of 3 beams) and a limit shorter than most answers.
CASES = {
    "greedy": dict(beam_size=1),
    "n-best, alpha 0": dict(beam_size=4, num_hypotheses=4, length_penalty=0.0),
    "n-best, alpha 1": dict(beam_size=4, num_hypotheses=4, length_penalty=1.0),
    "defaults": dict(),
    "target prefix": dict(beam_size=4, num_hypotheses=2, target_prefix="prefixes"),
    "target prefix, greedy": dict(beam_size=1, target_prefix="prefixes"),
    "min_decoding_length 6": dict(beam_size=4, min_decoding_length=6),
    "no_repeat_ngram_size 2": dict(beam_size=4, no_repeat_ngram_size=2),
    "no_repeat_ngram_size 1, greedy": dict(beam_size=1, no_repeat_ngram_size=1),
    "repetition_penalty 1.5": dict(beam_size=4, repetition_penalty=1.5),
    "suppress_sequences": dict(
        beam_size=4, suppress_sequences=[["1"], ["2", "3"], ["4", "5", "6"]]
    ),
    "disable_unk": dict(beam_size=4, disable_unk=True),
    "patience 2": dict(beam_size=3, patience=2.0, num_hypotheses=5, length_penalty=0.5),
    "max_decoding_length 3": dict(beam_size=4, max_decoding_length=3),
}


def prefixes():
    """A target prefix per sentence: the first two tokens of the right
    answer, or a wrong first token, in turns."""
    return [list(s[::-1][:2]) if i % 2 else ["7"] for i, s in enumerate(SENTENCES)]


@pytest.fixture(scope="module")
def both(exports, tmp_path_factory):
    """Our model, CTranslate2's translator on its weights, and the inputs."""
    folder = tmp_path_factory.mktemp("ctranslate2") / "model"
    tokenizer = exports.tokenizer
    export_ctranslate2(exports.translator, folder, tokenizer, tokenizer)
    translator = ctranslate2.Translator(str(folder), intra_threads=1)
    ids = tokenizer.tokenize(tf.constant(SENTENCES))[:, :MAX_LENGTH].to_tensor()
    return exports.translator, translator, tokenizer.vocabulary, ids


@pytest.fixture(scope="module")
def translate_batch_signature(exports):
    """The export's `translate_batch`, loaded once for this module's tests."""
    return tf.saved_model.load(str(exports.translator_v1)).signatures["translate_batch"]


def token_ids(vocabulary, rows):
    """Token lists -> ids `[B, T]`, 0-padded."""
    width = max(1, *(len(row) for row in rows))
    return np.array([[vocabulary.index(t) for t in row] + [0] * (width - len(row)) for row in rows])


def ours(both, options):
    model, _, vocabulary, ids = both
    options = dict(options, max_decoding_length=options.get("max_decoding_length", MAX_LENGTH))
    if options.get("target_prefix") == "prefixes":
        options["target_prefix"] = token_ids(vocabulary, prefixes())
    if "suppress_sequences" in options:
        sequences = token_ids(vocabulary, options["suppress_sequences"])
        options["suppress_sequences"] = np.repeat(sequences[None], len(SENTENCES), axis=0)
    output, scores = decoding.search(model, ids, decoding.DecodingOptions(**options))
    answers = []
    for hypotheses, row_scores in zip(np.asarray(output), np.asarray(scores), strict=True):
        answer = []
        for hypothesis, score in zip(hypotheses.tolist(), row_scores.tolist(), strict=True):
            hypothesis = (
                hypothesis[: hypothesis.index(END_ID)] if END_ID in hypothesis else hypothesis
            )
            answer.append(([vocabulary[i] for i in hypothesis if i != PAD_ID], score))
        answers.append(answer)
    return answers


def theirs(both, options):
    _, translator, vocabulary, ids = both
    options = dict(options, max_decoding_length=options.get("max_decoding_length", MAX_LENGTH))
    if options.get("target_prefix") == "prefixes":
        options["target_prefix"] = prefixes()
    pieces = [[vocabulary[i] for i in row if i] for row in np.asarray(ids)]
    results = translator.translate_batch(pieces, return_scores=True, **options)
    return [list(zip(result.hypotheses, result.scores, strict=True)) for result in results]


def texts(answers):
    return [[hypothesis for hypothesis, _ in answer] for answer in answers]


@pytest.mark.parametrize("case", CASES)
def test_n_best_lists_and_scores_equal_ctranslate2s(both, case):
    expected, answers = theirs(both, CASES[case]), ours(both, CASES[case])
    assert texts(answers) == texts(expected)  # every sentence, where 99% are asked for
    scores = np.array([[s for _, s in answer] for answer in answers])
    np.testing.assert_allclose(scores, [[s for _, s in e] for e in expected], atol=1e-4)
    assert sum(len(answer[0][0]) > 0 for answer in answers) > 90  # it translates


def test_each_option_changes_answers(both):
    """The comparisons above have teeth: each option changes CTranslate2's
    answers on many sentences (its answers being the ones we must equal)."""
    plain = texts(theirs(both, dict(beam_size=4)))
    for case in ("min_decoding_length 6", "repetition_penalty 1.5", "suppress_sequences"):
        changed = sum(a != b for a, b in zip(texts(theirs(both, CASES[case])), plain, strict=True))
        assert changed >= 10, (case, changed)
    changed = sum(
        a != b for a, b in zip(texts(theirs(both, CASES["target prefix"])), plain, strict=True)
    )
    assert changed >= 50


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_our_stopping_rule_never_misses_what_ctranslate2_finds(both, alpha):
    """With patience 0 (the zoo's rule: search on until no live hypothesis
    can still win), CTranslate2's best never scores higher than ours."""
    options = dict(beam_size=4, length_penalty=alpha)
    answers, expected = ours(both, {**options, "patience": 0}), theirs(both, options)
    for answer, theirs_ in zip(answers, expected, strict=True):
        assert answer[0][1] >= theirs_[0][1] - 1e-4, (answer, theirs_)


def test_a_row_answers_as_it_does_alone(both):
    """Options given per row (tensors `[B]`) decode each row as it would be
    decoded alone."""
    model, _, vocabulary, ids = both
    rows = [0, 1, 2, 3]
    per_row = dict(
        min_decoding_length=np.array([1, 6, 1, 1], "int32"),
        no_repeat_ngram_size=np.array([0, 0, 2, 0], "int32"),
        repetition_penalty=np.array([1.0, 1.0, 1.0, 1.5], "float32"),
        length_penalty=np.array([1.0, 0.0, 0.5, 1.0], "float32"),
        max_decoding_length=np.array([MAX_LENGTH, MAX_LENGTH, 3, MAX_LENGTH], "int32"),
        disable_unk=np.array([False, True, False, False]),
    )
    prefix = token_ids(vocabulary, [[], ["7"], [], ["1", "2"]])
    together = decoding.search(
        model,
        np.asarray(ids)[rows],
        decoding.DecodingOptions(beam_size=3, num_hypotheses=2, target_prefix=prefix, **per_row),
    )
    for row in rows:
        alone = decoding.search(
            model,
            np.asarray(ids)[row : row + 1],
            decoding.DecodingOptions(
                beam_size=3,
                num_hypotheses=2,
                target_prefix=prefix[row : row + 1],
                **{name: value[row : row + 1] for name, value in per_row.items()},
            ),
        )
        assert_row_answers_as_alone(together, row, alone)


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(beam_size=0), "beam_size"),
        (dict(beam_size=2, num_hypotheses=3), "num_hypotheses` must be at most 2"),
        (dict(beam_size=2, patience=0, num_hypotheses=3), "at most 2"),
        (dict(min_decoding_length=5, max_decoding_length=4), "min_decoding_length"),
        (dict(repetition_penalty=0.0), "repetition_penalty"),
        (dict(no_repeat_ngram_size=-1), "no_repeat_ngram_size"),
        (dict(patience=-1.0), "patience"),
        (dict(disable_unk="yes"), "disable_unk"),
    ],
)
def test_bad_options_are_refused_by_name(options, message):
    with pytest.raises(ValueError, match=message):
        decoding.DecodingOptions(**options)


def test_the_n_best_lists_are_distinct_and_sorted(both):
    for answer in ours(both, CASES["n-best, alpha 1"]):
        hypotheses, scores = texts([answer])[0], [s for _, s in answer]
        assert len(set(map(tuple, hypotheses))) == len(hypotheses)
        assert scores == sorted(scores, reverse=True)


def test_target_scores_equal_ctranslate2s_score_batch(both):
    """`decoding.score_targets` (the export's `score_batch`): each token's
    log-probability, the end token's too, as CTranslate2 scores them; on
    the right answers and on wrong ones (the source unreversed)."""
    model, translator, vocabulary, ids = both
    targets = [s[::-1] if i % 2 else s + "1" for i, s in enumerate(SENTENCES)]
    target_ids = token_ids(vocabulary, [list(t) for t in targets])
    labels, log_probs = decoding.score_targets(model, ids, target_ids)
    pieces = [[vocabulary[i] for i in row if i] for row in np.asarray(ids)]
    expected = translator.score_batch(pieces, [list(t) for t in targets])
    for row, (result, label_row) in enumerate(zip(expected, np.asarray(labels), strict=True)):
        assert [vocabulary[i] for i in label_row if i] == result.tokens
        np.testing.assert_allclose(
            np.asarray(log_probs)[row][: len(result.tokens)], result.log_probs, atol=1e-4
        )
    right, wrong = np.asarray(log_probs)[1::2].sum(1), np.asarray(log_probs)[0::2].sum(1)
    assert right.mean() > wrong.mean() + 1.0  # the model prefers the right answers


# Option sets whose attention is held against CTranslate2's: greedy, the
# n-best lists of 4 beams, and target prefixes (their tokens' attention too).
ATTENTION_CASES = ("greedy", "n-best, alpha 1", "target prefix")


def one_at_a_time(translator, pieces, target_prefix=None, **options):
    """CTranslate2's `translate_batch`, one source at a time. (Its beam
    search with several sources in a batch returns a wrong attention vector
    for the first token of each source but the first, ctranslate2 4.8.5:
    rows that do not sum to 1; alone, every vector is right.)"""
    prefixes_ = [None] * len(pieces) if target_prefix is None else target_prefix
    return [
        translator.translate_batch([p], target_prefix=None if q is None else [q], **options)[0]
        for p, q in zip(pieces, prefixes_, strict=True)
    ]


def their_attention(both, options):
    """CTranslate2's hypotheses (tokens) and attention vectors (one per
    token, over the source tokens), from a model whose `alignment_heads` is
    0: the last layer's cross-attention averaged over its heads."""
    _, translator, vocabulary, ids = both
    options = dict(options, max_decoding_length=options.get("max_decoding_length", MAX_LENGTH))
    if options.get("target_prefix") == "prefixes":
        options["target_prefix"] = prefixes()
    pieces = [[vocabulary[i] for i in row if i] for row in np.asarray(ids)]
    results = one_at_a_time(translator, pieces, return_attention=True, **options)
    return [list(zip(r.hypotheses, r.attention, strict=True)) for r in results]


def our_attention(both, options):
    """`decoding.alignments` of `decoding.search`'s answers: positions
    `[B, N, T]` and weights `[B, N, T, S]`."""
    model, _, vocabulary, ids = both
    options = dict(options, max_decoding_length=options.get("max_decoding_length", MAX_LENGTH))
    if options.get("target_prefix") == "prefixes":
        options["target_prefix"] = token_ids(vocabulary, prefixes())
    output, _ = decoding.search(model, ids, decoding.DecodingOptions(**options))
    positions, weights = decoding.alignments(model, ids, output)
    return np.asarray(output), np.asarray(positions), np.asarray(weights)


@pytest.mark.parametrize("case", ATTENTION_CASES)
def test_alignments_equal_ctranslate2s_return_attention(both, case):
    """For each token of each hypothesis (a target prefix's too, the end
    token's not, as CTranslate2), the source position the attention weighs
    most is CTranslate2's on at least 99% of the tokens, and the weights
    are its weights."""
    _, _, vocabulary, ids = both
    source_lengths = (np.asarray(ids) != PAD_ID).sum(axis=1)
    output, positions, weights = our_attention(both, CASES[case])
    same = total = 0
    for row, hypotheses in enumerate(their_attention(both, CASES[case])):
        for n, (tokens, vectors) in enumerate(hypotheses):
            assert len(vectors) == len(tokens) > 0
            ours_ = output[row, n].tolist()
            assert [vocabulary[i] for i in ours_[: len(tokens)]] == tokens
            assert ours_[len(tokens)] in (END_ID, PAD_ID)  # no more tokens of ours
            assert (positions[row, n, len(tokens) :] == -1).all()  # none for the end token
            vectors = np.array(vectors)  # [T, S], S = the source's tokens
            assert vectors.shape[1] == source_lengths[row]
            np.testing.assert_allclose(
                weights[row, n, : len(tokens), : source_lengths[row]], vectors, atol=1e-4
            )
            same += (positions[row, n, : len(tokens)] == vectors.argmax(axis=1)).sum()
            total += len(tokens)
    assert total > 300
    assert same >= 0.99 * total, (same, total)


def test_alignments_read_the_rnn_s_one_head_and_mark_what_is_not_a_token(exports):
    """The RNN (`Seq2SeqAttention`, one head): its alignments are the
    argmax of its teacher-forced attention; -1 at the end token, padding,
    hypotheses left empty, and sources that are empty."""
    tokenizer = exports.tokenizer
    ids = tokenizer.tokenize(tf.constant(["1234", "98765", ""])).to_tensor()
    answers = np.array(
        [
            [[4, 5, 6, END_ID, 0], [7, END_ID, 0, 0, 0]],
            [[8, 9, 10, 11, 12], [0, 0, 0, 0, 0]],
            [[4, 5, END_ID, 0, 0], [6, END_ID, 0, 0, 0]],
        ]
    )
    positions, weights = decoding.alignments(exports.rnn, ids, answers)
    positions, weights = np.asarray(positions), np.asarray(weights)
    assert positions.shape == (3, 2, 5) and weights.shape == (3, 2, 5, ids.shape[1])
    teacher_forced = np.asarray(
        decoding.cross_attention(exports.rnn, np.repeat(ids, 2, axis=0), answers.reshape(6, 5))
    )  # [6, 1, T, S]
    expected = teacher_forced[:, 0].argmax(axis=2).reshape(3, 2, 5)
    real = np.array(
        [
            [[1, 1, 1, 0, 0], [1, 0, 0, 0, 0]],
            [[1, 1, 1, 1, 1], [0, 0, 0, 0, 0]],
            [[0, 0, 0, 0, 0], [0, 0, 0, 0, 0]],  # an empty source
        ],
        bool,
    )
    np.testing.assert_array_equal(positions, np.where(real, expected, -1))
    assert not weights[~real].any()
    np.testing.assert_allclose(weights[real].sum(axis=-1), 1.0, rtol=1e-5)


# Requests whose answers hold `<unk>`, with the fewest unknowns each must
# replace: a target prefix of a character the vocabulary lacks ("a", read
# as `<unk>`), beams of 2, one in every answer; and answers of two tokens
# with every digit suppressed, greedy (left `<s>` and `<unk>`: 20 of the
# 200 tokens were `<unk>`).
UNKNOWN_CASES = {
    "a prefix": (dict(target_prefix="a"), dict(target_prefix=[["<unk>"]]), 100),
    "no digit": (
        dict(
            beam_size=1,
            min_decoding_length=2,
            max_decoding_length=2,
            suppress_sequences=list("0123456789"),
        ),
        dict(
            beam_size=1,
            min_decoding_length=2,
            max_decoding_length=2,
            suppress_sequences=[[d] for d in "0123456789"],
        ),
        10,
    ),
}


@pytest.mark.parametrize("case", UNKNOWN_CASES)
def test_replace_unknowns_equals_ctranslate2s(both, translate_batch_signature, case):
    """The export's `translate_batch` with `replace_unknowns`: each `<unk>`
    of an answer becomes the source token it is aligned to, in `tokens` and
    in the text, as CTranslate2's `replace_unknowns` makes it; and many
    were replaced."""
    from export_helpers import batch_inputs

    _, translator, vocabulary, ids = both
    ours_options, their_options, least = UNKNOWN_CASES[case]
    size = len(SENTENCES)
    their_options = {k: v * size if k == "target_prefix" else v for k, v in their_options.items()}
    pieces = [[vocabulary[i] for i in row if i] for row in np.asarray(ids)]
    their_options = {"max_decoding_length": MAX_LENGTH, **their_options}
    expected = one_at_a_time(translator, pieces, replace_unknowns=True, **their_options)
    unreplaced = one_at_a_time(translator, pieces, **their_options)
    request = {name: [value] * size for name, value in ours_options.items()}
    request.setdefault("max_decoding_length", [MAX_LENGTH] * size)
    inputs = batch_inputs(SENTENCES, replace_unknowns=[True] * size, **request)
    answer = translate_batch_signature(
        **{name: tf.constant(value) for name, value in inputs.items()}
    )
    tokens = [[t.decode() for t in row[0] if t] for row in answer["tokens"].numpy()]
    assert tokens == [result.hypotheses[0] for result in expected]
    reserved = {"<pad>", "<s>", "</s>", "<unk>"}
    texts = ["".join(t for t in result.hypotheses[0] if t not in reserved) for result in expected]
    assert [h.decode() for h in answer["hypotheses"].numpy()[:, 0]] == texts
    replaced = sum(
        a != b
        for result, plain in zip(expected, unreplaced, strict=True)
        for a, b in zip(result.hypotheses[0], plain.hypotheses[0], strict=True)
    )
    assert replaced >= least, replaced  # unknowns were there, and replaced
    assert "<unk>" not in {t for row in tokens for t in row}
