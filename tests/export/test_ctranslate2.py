"""`python -m keras_attention.export RUN --format ctranslate2`: the same
weights in CTranslate2 translate as our model does, word for word, greedy
and beam, post-norm and pre-norm. Beam search is compared with no length
penalty: with one, CTranslate2 stops once beam_size hypotheses have
finished, while `decoding.beam_search` searches on until none can win."""

import subprocess
import sys

import ctranslate2
import keras
import numpy as np
import pytest
import tensorflow as tf
from export_helpers import MAX_LENGTH, make_run, reversal_pairs

from keras_attention import decoding
from keras_attention.data.tokenizers import CharacterTokenizer
from keras_attention.export.ctranslate2_model import export_ctranslate2
from keras_attention.models import (
    build_transformer,
    build_transformer_classifier,
    build_transformer_lm,
)
from keras_attention.utils import END_ID, PAD_ID


def ours(model, tokenizer, ids, max_length, beam_size):
    """Our answers as token strings, up to (without) `</s>` and padding."""
    tokens, _ = decoding.beam_search(model, ids, max_length, beam_size, length_penalty=0.0)
    answers = []
    for row in np.asarray(tokens).tolist():
        row = row[: row.index(END_ID)] if END_ID in row else row
        answers.append([tokenizer.vocabulary[i] for i in row if i != PAD_ID])
    return answers


def theirs(translator, tokenizer, ids, max_length, beam_size):
    pieces = [[tokenizer.vocabulary[i] for i in row if i] for row in np.asarray(ids)]
    results = translator.translate_batch(
        pieces,
        beam_size=beam_size,
        length_penalty=0.0,
        max_decoding_length=max_length,
        # Our search may end at once (an empty answer); CTranslate2's
        # default minimum of 1 token forbids it.
        min_decoding_length=0,
    )
    return [result.hypotheses[0] for result in results]


def test_the_trained_translator_translates_the_same_in_ctranslate2(exports, tmp_path):
    run = make_run(exports, tmp_path / "run")
    folders = {}
    for quantization in (None, "int8"):
        folder = tmp_path / f"ct2_{quantization}"
        flags = ["--format", "ctranslate2", "--export-dir", str(folder)]
        flags += ["--quantization", quantization] if quantization else []
        result = subprocess.run(
            [sys.executable, "-m", "keras_attention.export", str(run), *flags],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert f"to {folder}" in result.stdout
        # The run's vocabulary files travel with the model.
        assert (folder / "model.bin").is_file()
        assert (folder / "source_vocabulary.txt").is_file()
        folders[quantization] = folder

    tokenizer = exports.tokenizer
    sources = [source for source, _ in reversal_pairs(64, seed=3)]
    ids = tokenizer.tokenize(tf.constant(sources))[:, :MAX_LENGTH].to_tensor()
    translator = ctranslate2.Translator(str(folders[None]), intra_threads=1)
    for beam_size in (1, 4):
        expected = ours(exports.translator, tokenizer, ids, MAX_LENGTH, beam_size)
        assert theirs(translator, tokenizer, ids, MAX_LENGTH, beam_size) == expected
        assert sum(len(e) > 0 for e in expected) > 60  # it translates: the check has teeth
    # int8 weights are another model: close, not always equal (76.6% of these
    # answers equal float32's, measured on an AMD EPYC; int8 kernels differ
    # between CPUs). Wrong weights would agree with almost none.
    quantized = ctranslate2.Translator(str(folders["int8"]), intra_threads=1)
    answers = theirs(quantized, tokenizer, ids, MAX_LENGTH, 1)
    greedy = ours(exports.translator, tokenizer, ids, MAX_LENGTH, 1)
    agree = np.mean([a == g for a, g in zip(answers, greedy, strict=True)])
    print(f"int8 answers equal to float32's: {agree:.1%}")
    assert agree >= 0.5, agree


@pytest.mark.parametrize("norm_first", [False, True])
def test_random_weights_translate_the_same_post_norm_and_pre_norm(norm_first, tmp_path):
    # The pre-norm model also shares one embedding matrix between source,
    # target and output projection, as the paper's base and big do.
    """Untrained weights give long, varied greedy answers (30 tokens, no
    `</s>`): every weight must land in its place for them to agree. Beam
    search is compared on the trained model above, whose answers end with
    `</s>`: where every hypothesis is cut at `max_length`, the two searches
    can keep different cut hypotheses (seen with these weights; not
    examined further)."""
    keras.utils.set_random_seed(1)
    texts = ["attention", "is all", "you need", "q k v", "softmax"]
    tokenizer = CharacterTokenizer.train(texts)
    model = build_transformer(
        tokenizer.vocabulary_size,
        norm_first=norm_first,
        share_embeddings=norm_first,
        tie_output_embeddings=norm_first,
    )
    folder = export_ctranslate2(model, tmp_path / "ct2", tokenizer, tokenizer)
    translator = ctranslate2.Translator(str(folder), intra_threads=1)
    ids = tokenizer.tokenize(tf.constant(texts)).to_tensor()
    expected = ours(model, tokenizer, ids, 30, beam_size=1)
    assert theirs(translator, tokenizer, ids, 30, beam_size=1) == expected
    assert [len(answer) for answer in expected] == [30] * len(texts)


def test_what_ctranslate2_cannot_hold_is_refused_by_name(exports, tmp_path):
    with pytest.raises(ValueError, match="or a TransformerLM .*received TransformerClassifier"):
        export_ctranslate2(build_transformer_classifier(20, 3), tmp_path / "c", None, None)
    with pytest.raises(ValueError, match="A language model has one tokenizer"):
        export_ctranslate2(build_transformer_lm(20), tmp_path / "lm", *[exports.tokenizer] * 2)
    with pytest.raises(ValueError, match="quantization"):
        export_ctranslate2(
            exports.translator,
            tmp_path / "q",
            exports.tokenizer,
            exports.tokenizer,
            quantization="int3",
        )
    folder = export_ctranslate2(
        exports.translator, tmp_path / "kept", exports.tokenizer, exports.tokenizer
    )
    with pytest.raises(FileExistsError, match="already exists"):
        export_ctranslate2(exports.translator, folder, exports.tokenizer, exports.tokenizer)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept"]  # nothing half-written


@pytest.mark.parametrize(
    "option",
    [
        {"num_key_value_heads": 2},
        {"sliding_window": 8},
        {"use_gate": True},
        {"positions": "rotary"},
        {"positions": "alibi"},
        {"normalization": "rms_norm"},
        {"feed_forward": "swiglu"},
        {"use_bias": False},
    ],
)
def test_options_ctranslate2_cannot_hold_are_refused_by_name(option, tmp_path):
    ((name, value),) = option.items()
    model = build_transformer(20, num_layers=1, model_dim=16, intermediate_dim=16, **option)
    with pytest.raises(ValueError, match=f"; the model has {name}={value!r}"):
        export_ctranslate2(model, tmp_path / "out", None, None)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--quantization", "int4"], "a saved_model must be one of int8; got 'int4'"),
        (["--format", "ctranslate2", "--export-name", "x"], "--export-name is for --format saved_"),
        (
            ["--format", "ctranslate2", "--export-jit-compile"],
            "--export-jit-compile is for --format saved_model",
        ),
        (["--format", "ctranslate2", "--beam-size", "2"], "--beam-size is for --format saved_"),
        (["--format", "onnx"], "invalid choice: 'onnx'"),
    ],
)
def test_flags_of_the_other_format_are_refused(flags, message, tmp_path, capsys):
    from keras_attention.export.__main__ import main

    with pytest.raises(SystemExit) as stop:
        main([str(tmp_path), *flags])
    assert stop.value.code == 2
    assert message in capsys.readouterr().err
