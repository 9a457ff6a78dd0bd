"""`keras_attention.Translator` (CTranslate2's API over an export) and
`python -m keras_attention.translate` (files from the shell)."""

import subprocess
import sys

import numpy as np
import pytest
from export_helpers import TEXTS, make_run

from keras_attention import Translator, translate
from keras_attention.translator import _batches, find_export


@pytest.fixture(scope="module")
def translator(exports):
    return Translator(exports.translator_v1)


def test_answers_equal_the_signature_s_in_a_fresh_process(translator, exports, served):
    """The same as TF Serving's stand-in answered: CTranslate2's defaults,
    then the n-best lists of 3 beams (the zoo's stopping rule)."""
    defaults = served[1][str(exports.translator_v1)]["answers"][-4]
    results = translator.translate_batch(TEXTS, return_scores=True)
    assert [r.hypotheses for r in results] == [[h.decode()] for h in defaults["hypotheses"][:, 0]]
    np.testing.assert_allclose([r.scores[0] for r in results], defaults["scores"][:, 0], rtol=1e-6)
    assert all(r.scores == [] for r in translator.translate_batch(TEXTS))  # not asked for


def test_n_best_lists_prefixes_and_batching_keep_each_text_s_answer(translator):
    texts = [*TEXTS, "", "271828", "12"]
    options = dict(beam_size=3, patience=0.0, num_hypotheses=3, return_scores=True)
    alone = [translator.translate_batch([text], **options)[0] for text in texts]
    together = translator.translate_batch(texts, **options)
    sorted_in_twos = translator.translate_batch(texts, max_batch_size=2, **options)
    for one, other, third in zip(alone, together, sorted_in_twos, strict=True):
        assert one.hypotheses == other.hypotheses == third.hypotheses
        np.testing.assert_allclose(one.scores, other.scores, rtol=1e-5)
        assert len(one.hypotheses) == 3 and one.scores == sorted(one.scores, reverse=True)
    assert together[4].hypotheses == ["", "", ""] and together[4].scores == [0.0] * 3
    prefixed = translator.translate_batch(["1234", ""], target_prefix=["9", "5"])
    assert prefixed[0].hypotheses[0].startswith("9")
    assert prefixed[1].hypotheses == ["5"]  # an empty text: its prefix, as CTranslate2


def test_batches_are_cut_as_ctranslate2_cuts_them():
    """Longest first; by tokens, a batch's texts times its longest text's
    tokens stay within the budget (a longer text alone), as CTranslate2's
    `rebatch_input` cuts them."""
    lengths = [5, 1, 3, 8, 2]
    assert _batches(lengths, 10, "tokens") == [[3], [0, 2], [4, 1]]
    assert _batches(lengths, 6, "tokens") == [[3], [0], [2, 4], [1]]
    assert _batches(lengths, 2, "examples") == [[3, 0], [2, 4], [1]]
    assert _batches(lengths, 0, "tokens") == [[0, 1, 2, 3, 4]]
    assert _batches([], 4, "tokens") == []


def test_batches_of_tokens_keep_each_text_s_answer_and_order(translator, tmp_path):
    texts = [*TEXTS, "", "271828", "12", *TEXTS]
    lengths = [len(t) for t in texts]  # the character tokenizer: a token per character
    assert translator._lengths(texts, 8, "tokens") == lengths
    alone = [translator.translate_batch([text])[0].hypotheses for text in texts]
    by_tokens = translator.translate_batch(texts, max_batch_size=8, batch_type="tokens")
    assert [r.hypotheses for r in by_tokens] == alone
    streamed = translator.translate_iterable(iter(texts), max_batch_size=8, batch_type="tokens")
    assert [r.hypotheses for r in streamed] == alone
    scored = translator.score_batch(texts, texts, max_batch_size=8, batch_type="tokens")
    for one, other in zip(scored, translator.score_batch(texts, texts), strict=True):
        np.testing.assert_allclose(one.log_probs, other.log_probs, rtol=1e-5)
    with pytest.raises(ValueError, match="different lengths"):
        list(translator.translate_iterable(iter(texts), target_prefix=iter(["1"])))


def test_translate_iterable_and_translate_file(translator, tmp_path):
    expected = [r.hypotheses[0] for r in translator.translate_batch(TEXTS)]
    streamed = translator.translate_iterable(iter(TEXTS), max_batch_size=3)
    assert [r.hypotheses[0] for r in streamed] == expected
    source = tmp_path / "source.txt"
    source.write_text("".join(t + "\n" for t in TEXTS), encoding="utf-8")
    stats = translator.translate_file(source, tmp_path / "out.txt", max_batch_size=3)
    assert (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines() == expected
    assert stats.num_examples == len(TEXTS) and stats.total_time_in_ms > 0
    source.write_bytes(b"12\n\xff\xfe\n")
    with pytest.raises(ValueError, match=r"source.txt, line 2, is not UTF-8"):
        translator.translate_file(source, tmp_path / "refused.txt")
    assert not (tmp_path / "refused.txt").exists()


@pytest.mark.parametrize(
    "call, error, message",
    [
        (dict(source=[["1", "2"]]), TypeError, "takes text, not tokens"),
        (dict(source="12"), TypeError, "not one text"),
        (dict(source=TEXTS, target_prefix=["1"]), ValueError, "one entry per text: 1 for 4"),
        (dict(source=TEXTS, beam_size=2.5), TypeError, "beam_size"),
        (dict(source=TEXTS, batch_type="lines"), ValueError, "batch_type"),
        (dict(source=TEXTS, coverage_penalty=0.2), TypeError, "coverage_penalty"),
        (dict(source=TEXTS, replace_unknowns="yes"), TypeError, "replace_unknowns='yes'"),
        (dict(source=TEXTS, return_attention=1), TypeError, "return_attention=1"),
    ],
)
def test_bad_arguments_are_refused_by_name(translator, call, error, message):
    with pytest.raises(error, match=message):
        translator.translate_batch(**call)


def test_options_out_of_range_are_refused_by_the_export(translator):
    with pytest.raises(Exception, match=r"num_hypotheses.*row\] \[0\] \[has\] \[5\]"):
        translator.translate_batch(["12"], beam_size=4, num_hypotheses=5)


def test_a_run_folder_finds_its_latest_export(exports, tmp_path):
    run = make_run(exports, tmp_path / "run")
    with pytest.raises(FileNotFoundError, match="export it with `python -m keras_attention.export"):
        find_export(run)
    serving = run / "serving" / "reverse"
    (serving / "3").mkdir(parents=True)
    (serving / "3" / "saved_model.pb").write_bytes(b"")
    assert find_export(run) == serving / "3"
    assert find_export(serving) == serving / "3"
    with pytest.raises(FileNotFoundError, match="not an export"):
        find_export(tmp_path)


def test_the_command_translates_a_file_with_n_best_lists(translator, exports, tmp_path):
    """n-best lists, target prefixes, batches of tokens, `--replace-unknowns`
    (the `<unk>` of the prefix "a" becomes a source token), and a warning
    naming the lines over the export's length."""
    source, prefixes = tmp_path / "in.txt", tmp_path / "prefixes.txt"
    source.write_text("1234\n\n98765\n123456789012\n", encoding="utf-8")
    prefixes.write_text("a\n\n5\n\n", encoding="utf-8")
    command = [sys.executable, "-m", "keras_attention.translate", str(exports.translator_v1)]
    result = subprocess.run(
        [
            *command,
            str(source),
            "-o",
            str(tmp_path / "out.txt"),
            "--beam-size",
            "3",
            "--num-hypotheses",
            "2",
            "--target-prefix-file",
            str(prefixes),
            "--replace-unknowns",
            *("--batch-type", "tokens", "--max-batch-size", "20"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines()
    assert [line.split(" ||| ")[0] for line in lines] == ["0", "0", "1", "1", "2", "2", "3", "3"]
    assert lines[2].split(" ||| ")[1] == "" and lines[4].split(" ||| ")[1].startswith("5")
    plain = translator.translate_batch(["1234"], ["a"], beam_size=3, num_hypotheses=2)[0]
    for line, other in zip(lines[:2], plain.hypotheses, strict=True):
        text = line.split(" ||| ")[1]
        assert text[0] in "1234" and text[1:] == other  # the <unk> became a source token
    # (The export reads MAX_LENGTH = 10 tokens, characters here.)
    assert "WARNING: 1 of 4 lines have more than 10 tokens (line 4)" in result.stderr


def test_the_command_refuses_a_line_that_is_not_utf_8(tmp_path):
    source = tmp_path / "in.txt"
    source.write_bytes(b"12\n\xff\n")
    with pytest.raises(SystemExit, match=r"in.txt, line 2, is not UTF-8"):
        translate.main([str(tmp_path), str(source)])


def test_score_batch_equals_the_signature_s_in_a_fresh_process(translator, exports, served):
    expected = served[1][str(exports.translator_v1)]["answers"][-5]
    results = translator.score_batch(TEXTS, [t[::-1] for t in TEXTS], max_batch_size=3)
    for result, tokens, log_probs in zip(
        results, expected["tokens"], expected["log_probs"], strict=True
    ):
        assert result.tokens == [t.decode() for t in tokens if t]
        np.testing.assert_allclose(result.log_probs, log_probs[: len(result.tokens)], rtol=1e-5)
    with pytest.raises(ValueError, match="one text per source text: 1 for 4"):
        translator.score_batch(TEXTS, ["1"])


def test_return_attention_and_replace_unknowns(translator):
    """CTranslate2's `return_attention`: per hypothesis, a vector per token
    over the text's source tokens, and its largest weight's position; with
    `replace_unknowns` the `<unk>` of the prefix "a" becomes the source
    token it is aligned to (without, it is left out of the text)."""
    options = dict(target_prefix=["a"] * len(TEXTS), beam_size=3, num_hypotheses=2)
    plain = translator.translate_batch(TEXTS, **options)
    results = translator.translate_batch(
        TEXTS, return_attention=True, replace_unknowns=True, **options
    )
    for text, result, unreplaced in zip(TEXTS, results, plain, strict=True):
        assert len(result.attention) == len(result.alignments) == 2
        for hypothesis, vectors, positions, other in zip(
            result.hypotheses,
            result.attention,
            result.alignments,
            unreplaced.hypotheses,
            strict=True,
        ):
            # (One character a token: the text is the tokens, the end's none.)
            assert len(vectors) == len(positions) == len(hypothesis) == len(other) + 1
            assert all(len(vector) == len(text) for vector in vectors)
            np.testing.assert_allclose(np.sum(vectors, axis=1), 1.0, rtol=1e-5)
            assert positions == np.argmax(vectors, axis=1).tolist()
            assert hypothesis == text[positions[0]] + other  # the <unk> replaced
    assert all(r.attention == [] for r in plain)  # not asked for
    empty = translator.translate_batch([""], ["a"], return_attention=True)[0]
    assert empty.attention == [[[]]] and empty.alignments == [[-1]]  # no source token
