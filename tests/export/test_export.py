"""Exports load and run the way TF Serving runs them, with none of our code."""

import json
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from export_helpers import (
    ALIGN_OPTIONS,
    BATCH_OPTIONS,
    BEAM_SIZE,
    LONG_OPTIONS,
    MAX_LENGTH,
    MIXED_OPTIONS,
    ODD_TEXTS,
    SAMPLING_OPTIONS,
    TEXTS,
    complete_in_process,
    decode_in_process,
    sample_in_process,
)

from keras_attention import decoding, export
from keras_attention.data.tokenizers import START_ID
from keras_attention.export.servers import language_model


def answers(served, path):
    return served[1][str(path)]["answers"]


def one_export_of_each_kind(exports):
    """A Transformer's and an RNN's translations, a classifier's and a
    language model's exports."""
    return (
        exports.translator_v1,
        exports.rnn_path,
        exports.classifier_path,
        exports.language_model_path,
    )


def test_the_fresh_process_never_imports_this_package(served):
    modules = served[1]["modules"]
    assert "tensorflow_text" in modules
    assert not [m for m in modules if m.startswith("keras_attention")]


def test_every_op_is_a_tensorflow_or_tf_text_op(exports, served):
    paths = (
        exports.translator_v1,
        exports.translator_v2,
        exports.rnn_path,
        exports.classifier_path,
    )
    for path in paths:
        result = served[1][str(path)]
        assert result["ops"], path  # the graph was read
        assert result["unregistered_ops"] == [], path
    # The tokenisers' lookups and the decoding loop are in the graph.
    ops = set(served[1][str(exports.translator_v1)]["ops"])
    assert {"UnicodeTranscode", "LookupTableFindV2", "While"} <= ops


def test_signatures_inputs_and_outputs(exports, served):
    signatures = served[1][str(exports.translator_v1)]["signatures"]
    assert set(signatures) == {
        "serving_default",
        "translate_with_attention",
        "translate_with_options",
        "translate_batch",
        "score_batch",
        "tokenize",
    }
    default = signatures["serving_default"]
    assert default["inputs"] == ["text"] and default["outputs"] == ["translation"]
    options = signatures["translate_with_options"]
    assert options["inputs"] == ["beam_size", "max_decoding_length", "text"]
    assert options["outputs"] == ["translation"]
    assert signatures["translate_batch"]["inputs"] == sorted(
        ["text", *BATCH_OPTIONS, "return_attention", "replace_unknowns"]
    )
    assert signatures["translate_batch"]["outputs"] == [
        "alignments",
        "attention",
        "hypotheses",
        "scores",
        "tokens",
    ]
    assert signatures["score_batch"]["inputs"] == ["source", "target"]
    assert signatures["score_batch"]["outputs"] == ["log_prob", "log_probs", "tokens"]
    assert signatures["tokenize"]["inputs"] == ["text"]
    assert signatures["tokenize"]["outputs"] == ["length", "tokens"]
    assert signatures["translate_with_attention"]["outputs"] == [
        "attention",
        "source_tokens",
        "target_tokens",
        "translation",
    ]
    classifier = served[1][str(exports.classifier_path)]["signatures"]["serving_default"]
    assert classifier["inputs"] == ["text"]
    assert classifier["outputs"] == ["label", "label_id", "probabilities"]
    lm = served[1][str(exports.language_model_path)]["signatures"]
    assert lm["serving_default"]["inputs"] == ["prompt"]
    assert lm["complete_with_options"]["inputs"] == ["beam_size", "max_decoding_length", "prompt"]
    assert lm["complete_by_sampling"]["inputs"] == [
        "max_decoding_length",
        "prompt",
        "seed",
        "temperature",
        "top_k",
        "top_p",
    ]
    assert lm["serving_default"]["outputs"] == lm["complete_with_options"]["outputs"]
    assert lm["serving_default"]["outputs"] == lm["complete_by_sampling"]["outputs"]
    assert lm["serving_default"]["outputs"] == ["completion"]
    assert lm["generate_batch"]["inputs"] == sorted(
        ["prompt", "suppress_sequences", *language_model.signature_options()]
    )
    assert lm["generate_batch"]["outputs"] == ["scores", "sequences", "tokens"]
    assert lm["score_batch"]["inputs"] == ["text"]
    assert lm["score_batch"]["outputs"] == ["log_prob", "log_probs", "tokens"]
    assert lm["tokenize"]["inputs"] == ["text"]
    assert lm["tokenize"]["outputs"] == ["length", "tokens"]


def test_every_signature_is_batch_major(exports, served):
    """TF Serving's batching concatenates every input along dimension 0: each
    input and output has rank >= 1 and an unknown first dimension."""
    for path in one_export_of_each_kind(exports):
        shapes = served[1][str(path)]["shapes"]
        assert shapes, path
        for (signature, kind, name), shape in shapes.items():
            assert len(shape) >= 1 and shape[0] == -1, (path, signature, kind, name, shape)


def test_requests_from_8_threads_at_once_get_the_answers_they_get_alone(exports, served):
    """TF Serving runs many requests at once on one loaded model (one TF1
    session): each answer equals the one computed alone, every signature."""
    for path in one_export_of_each_kind(exports):
        alone = served[1][str(path)]["answers"]
        concurrent = served[1][str(path)]["concurrent_answers"]
        assert len(concurrent) == len(alone)
        for one, other in zip(alone, concurrent, strict=True):
            assert one.keys() == other.keys()
            for name in one:
                np.testing.assert_array_equal(other[name], one[name])


def test_every_signature_is_callable_in_python_with_only_the_text(exports):
    """TF's Python signature wrappers apply no defaults: `serving_default`
    must need only the text."""
    for path, text_input in (
        (exports.translator_v1, "text"),
        (exports.classifier_path, "text"),
        (exports.language_model_path, "prompt"),
    ):
        served = tf.saved_model.load(str(path)).signatures["serving_default"]
        answer = served(**{text_input: tf.constant(TEXTS)})
        assert all(value.shape[0] == len(TEXTS) for value in answer.values())


def test_translations_equal_in_process_decoding(exports, served):
    model, tokenizer = exports.translator, exports.tokenizer
    with_defaults, beam_3_length_4 = answers(served, exports.translator_v1)[:2]
    expected = decode_in_process(model, tokenizer, TEXTS)
    assert list(with_defaults["translation"]) == expected
    # The trained model reverses most inputs: the export is not a trivial one.
    assert sum(t == s[::-1].encode() for t, s in zip(expected, TEXTS, strict=True)) >= 2
    expected = decode_in_process(model, tokenizer, TEXTS, beam_size=3, max_length=4)
    assert list(beam_3_length_4["translation"]) == expected


def test_the_xla_export_answers_as_the_plain_one(exports, served):
    """Version 2 was exported with `jit_compile=True`: its search with the
    export's options runs under XLA (sources padded to a bucket length),
    the others as a graph, and `translate_batch` runs each group of rows
    under XLA (sources, prefixes and answer buffers padded to a bucket
    length). Every request gets version 1's answer: the translations, and
    `translate_batch` with every option different in each row."""
    plain = answers(served, exports.translator_v1)
    compiled = answers(served, exports.translator_v2)
    compiled = compiled[:10]  # (then test_the_xla_export_searches_long_answers_again's)
    assert len(plain) > len(compiled)  # plain also ran the warm-up
    plain = plain[:9] + plain[-3:-2]  # its translations, then translate_batch's BATCH_OPTIONS
    for got, expected in zip(compiled, plain, strict=True):
        assert got.keys() == expected.keys()
        for key in got:
            if got[key].dtype.kind == "f":  # (XLA fuses operations: the last bits may differ)
                np.testing.assert_allclose(got[key], expected[key], rtol=1e-5, err_msg=key)
            else:
                np.testing.assert_array_equal(got[key], expected[key], err_msg=key)
    metadata = json.loads((exports.translator_v2 / export.METADATA_FILE).read_text())
    assert metadata["jit_compile"] is True


def test_the_xla_export_searches_long_answers_again(exports, served):
    """Answers of 40 to 60 tokens (`LONG_OPTIONS`): the compiled search's
    first room (a buffer of 32) cuts them short, so it searches them again
    with the whole room, and each is `decoding.search`'s."""
    answer = answers(served, exports.translator_v2)[10]
    for row, text in enumerate(TEXTS):
        options = {name: values[row] for name, values in LONG_OPTIONS.items()}
        texts, tokens, scores = search_in_process(
            exports, text, exports.translator, target_prefix="", suppress_sequences=[], **options
        )
        assert list(answer["hypotheses"][row]) == texts
        np.testing.assert_allclose(answer["scores"][row], scores, rtol=1e-5)
        assert len(tokens[0]) >= 40


def test_each_row_gets_its_own_options(exports, served):
    """Rows that ask for different beam sizes and lengths in one request get
    what each would get alone."""
    mixed, empty = answers(served, exports.translator_v1)[7:9]
    for text, (beam_size, max_length), translation in zip(
        TEXTS, MIXED_OPTIONS, mixed["translation"], strict=True
    ):
        alone = decode_in_process(
            exports.translator, exports.tokenizer, [text], beam_size, max_length
        )
        assert [translation] == alone
    assert empty["translation"].shape == (0,)
    completions = answers(served, exports.language_model_path)[3]["completion"]
    for text, (beam_size, max_length), completion in zip(
        TEXTS, MIXED_OPTIONS, completions, strict=True
    ):
        assert completion == complete_in_process(exports, text, beam_size, max_length)


def test_rnn_translations_equal_in_process_decoding(exports, served):
    result = answers(served, exports.rnn_path)[0]
    expected = decode_in_process(exports.rnn, exports.tokenizer, TEXTS, beam_size=1)
    assert list(result["translation"]) == expected
    attention = answers(served, exports.rnn_path)[2]["attention"]
    assert attention.shape[:2] == (len(TEXTS), 1)  # one "head"


def test_translate_with_attention(exports, served):
    result = answers(served, exports.translator_v1)[2]
    assert list(result["translation"]) == list(
        answers(served, exports.translator_v1)[0]["translation"]
    )
    batch, heads, target_length, source_length = result["attention"].shape
    assert (batch, heads) == (len(TEXTS), exports.translator.num_heads)
    assert result["source_tokens"].shape == (batch, source_length)
    assert result["target_tokens"].shape == (batch, target_length)
    for i, text in enumerate(TEXTS):
        source = [t.decode() for t in result["source_tokens"][i] if t]
        assert source == list(text)
        target = [t.decode() for t in result["target_tokens"][i] if t]
        assert "".join(target).removesuffix("</s>") == result["translation"][i].decode()
        # Each output token's weights over the real source tokens sum to 1.
        rows = result["attention"][i, :, : len(target), : len(source)]
        np.testing.assert_allclose(rows.sum(-1), 1.0, rtol=1e-5)
        assert not result["attention"][i, :, len(target) :].any()  # after the end: zeros

    # The same weights as the Keras model gives, teacher-forced on the output.
    ids = exports.tokenizer.tokenize(tf.constant(TEXTS)).to_tensor()
    output = np.array(
        [
            [exports.tokenizer.vocabulary.index(t.decode()) if t else 0 for t in row]
            for row in result["target_tokens"]
        ]
    )
    target_ids = np.concatenate([np.full((batch, 1), START_ID), output[:, :-1]], axis=1)
    scores = exports.translator.attention_scores({"source_ids": ids, "target_ids": target_ids})
    expected = np.asarray(scores["decoder_cross_attention"][-1]) * (output != 0)[:, None, :, None]
    np.testing.assert_allclose(result["attention"], expected, atol=1e-5)


def test_bad_input_gets_well_formed_answers(exports, served):
    odd, empty, attention_empty, own_length = answers(served, exports.translator_v1)[3:7]
    assert odd["translation"].shape == (len(ODD_TEXTS),)
    # Too long: truncated to max_length tokens. Not UTF-8: repaired to U+FFFD.
    expected = decode_in_process(
        exports.translator,
        exports.tokenizer,
        ["", "9" * MAX_LENGTH, "\ufffd\ufffd12", ODD_TEXTS[3]],
    )
    assert list(odd["translation"]) == expected
    assert empty["translation"].shape == (0,)
    assert attention_empty["attention"].shape[0] == 0
    # A length of 0: the export's own.
    expected = decode_in_process(exports.translator, exports.tokenizer, TEXTS)
    assert list(own_length["translation"]) == expected
    for path in (exports.classifier_path, exports.language_model_path):
        texts, odd, empty = answers(served, path)[:3]
        assert all(value.shape[0] == len(ODD_TEXTS) for value in odd.values())
        assert all(value.shape[0] == 0 for value in empty.values())


@pytest.mark.parametrize("positions", ["alibi", "rotary"])
def test_classifier_answers_equal_the_model(positions, exports, served):
    classifier, path = (
        (exports.classifier, exports.classifier_path)
        if positions == "alibi"
        else (exports.rotary_classifier, exports.rotary_classifier_path)
    )
    assert classifier.encoder.block_options["positions"] == positions
    result = answers(served, path)[0]
    ids = exports.tokenizer.tokenize(tf.constant(TEXTS)).to_tensor()
    probabilities = tf.nn.softmax(classifier(ids)).numpy()
    np.testing.assert_allclose(result["probabilities"], probabilities, atol=1e-5)
    labels = [exports.label_names[i].encode() for i in probabilities.argmax(-1)]
    assert list(result["label"]) == labels
    np.testing.assert_array_equal(result["label_id"], probabilities.argmax(-1))


def test_sampled_completions_equal_in_process_sampling_with_the_same_seed(exports, served):
    texts, odd, empty = answers(served, exports.language_model_path)[4:7]
    for text, options, completion in zip(TEXTS, SAMPLING_OPTIONS, texts["completion"], strict=True):
        assert completion == sample_in_process(exports, text, *options)
    # Temperature 0 is greedy search; another seed samples something else.
    greedy_row = SAMPLING_OPTIONS[1]
    assert texts["completion"][1] == complete_in_process(exports, TEXTS[1], 1, greedy_row[0])
    others = [sample_in_process(exports, TEXTS[0], 10, 1.0, 0, 1.0, seed) for seed in range(4)]
    assert any(other != texts["completion"][0] for other in others)
    assert odd["completion"].shape == (len(ODD_TEXTS),)
    assert empty["completion"].shape == (0,)


def test_language_model_completion_equals_in_process(exports, served):
    result = answers(served, exports.language_model_path)[0]
    for text, completion in zip(TEXTS, result["completion"], strict=True):
        assert completion == complete_in_process(exports, text)


def test_tokenize_gives_the_source_tokens_the_model_reads(exports, served):
    spec, got = served[0][str(exports.translator_v1)], answers(served, exports.translator_v1)
    (index,) = [i for i, (name, _) in enumerate(spec) if name == "tokenize"]  # the warm-up's
    texts = [t.decode() for t in spec[index][1]["text"]]
    ids = exports.tokenizer.tokenize(tf.constant(texts)).to_list()  # all, not only MAX_LENGTH
    expected = [[exports.tokenizer.vocabulary[i] for i in row] for row in ids]
    assert [[t.decode() for t in row if t] for row in got[index]["tokens"]] == expected
    assert list(got[index]["length"]) == [len(row) for row in expected]
    assert max(map(len, expected)) > MAX_LENGTH


def test_warmup_requests_parse_and_run(exports, served):
    warmup = export.read_warmup_requests(exports.translator_v1 / export.WARMUP_FILE)
    assert [r.model_spec.signature_name for r in warmup] == [
        "serving_default",
        "translate_with_attention",
        "translate_with_options",
        "translate_batch",
        "score_batch",
        "tokenize",
    ]
    assert all(r.model_spec.name == "reverse" for r in warmup)
    lm_warmup = export.read_warmup_requests(exports.language_model_path / export.WARMUP_FILE)
    assert [r.model_spec.signature_name for r in lm_warmup] == [
        "serving_default",
        "complete_with_options",
        "complete_by_sampling",
        "generate_batch",
        "score_batch",
        "tokenize",
    ]
    lm_replies = answers(served, exports.language_model_path)[7:]
    for request, reply in zip(lm_warmup, lm_replies, strict=True):
        (text,) = [t for t in ("prompt", "text") if t in request.inputs]
        (output,) = [o for o in ("completion", "sequences", "log_prob", "length") if o in reply]
        assert len(reply[output]) == len(request.inputs[text].string_val)
    replies = answers(served, exports.translator_v1)[9 : 9 + len(warmup)]
    assert len(replies) == len(warmup)
    for request, reply in zip(warmup, replies, strict=True):
        outputs = ("hypotheses", "log_prob", "translation", "length")
        output = next(o for o in outputs if o in reply)
        text_input = "source" if "source" in request.inputs else "text"  # score_batch's
        assert reply[output].shape[0] == len(request.inputs[text_input].string_val) > 0


def test_saved_model_cli_lists_the_signatures(exports):
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "tensorflow.python.tools.saved_model_cli",
            "show",
            "--all",
            "--dir",
            str(exports.translator_v1),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    for line in (
        "signature_def['serving_default']",
        "signature_def['translate_with_attention']",
        "inputs['text'] tensor_info",
        "outputs['translation'] tensor_info",
        "Method name is: tensorflow/serving/predict",
    ):
        assert line in shown


def test_a_second_export_is_version_2_and_leaves_version_1_alone(exports):
    assert exports.translator_v1.name == "1" and exports.translator_v2.name == "2"
    assert export.versions(exports.base / "reverse") == [1, 2]
    files = {
        p.relative_to(exports.translator_v1): p.read_bytes()
        for p in exports.translator_v1.rglob("*")
        if p.is_file()
    }
    assert files == exports.translator_v1_files
    leftovers = [p.name for p in (exports.base / "reverse").iterdir() if not p.name.isdigit()]
    assert leftovers == []  # no staging folder left behind


def test_the_base_folder_lists_every_model_for_the_server(exports):
    """Each export rewrites the base folder's `models.config` with every
    model in it, as TF Serving's `--model_config_file` reads them."""
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2

    config = text_format.Parse(
        (exports.base / "models.config").read_text(), model_server_config_pb2.ModelServerConfig()
    )
    listed = {entry.name: entry.base_path for entry in config.model_config_list.config}
    for name in ("reverse", "rnn", "classify", "classify_rotary", "lm"):
        assert listed[name] == f"/models/{name}"


def test_metadata_says_what_was_exported(exports):
    metadata = json.loads((exports.translator_v1 / export.METADATA_FILE).read_text())
    assert metadata["model"] == "Transformer"
    assert metadata["max_input_length"] == metadata["max_decoding_length"] == MAX_LENGTH
    assert metadata["beam_size"] == BEAM_SIZE
    assert metadata["signatures"] == [
        "score_batch",
        "serving_default",
        "tokenize",
        "translate_batch",
        "translate_with_attention",
        "translate_with_options",
    ]


def test_export_refuses_bad_arguments(exports, tmp_path):
    model, tokenizer = exports.translator, exports.tokenizer
    with pytest.raises(ValueError, match="target_tokenizer"):
        export.export_model(model, tmp_path, "m", tokenizer, max_input_length=4)
    with pytest.raises(ValueError, match="max_input_length"):
        export.export_model(model, tmp_path, "m", tokenizer, tokenizer, max_input_length=0)
    with pytest.raises(ValueError, match="max_decoding_length=0"):
        export.export_model(
            model, tmp_path, "m", tokenizer, tokenizer, max_input_length=4, max_decoding_length=0
        )
    with pytest.raises(ValueError, match="length_penalty"):
        export.export_model(
            model, tmp_path, "m", tokenizer, tokenizer, max_input_length=4, length_penalty="1"
        )
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_lenght'"):
        export.export_model(model, tmp_path, "m", tokenizer, tokenizer, max_lenght=4)
    with pytest.raises(ValueError, match="beam_size"):
        export.export_model(
            model, tmp_path, "m", tokenizer, tokenizer, max_input_length=4, beam_size=99
        )
    with pytest.raises(ValueError, match="name"):
        export.export_model(model, tmp_path, "a/b", tokenizer, tokenizer, max_input_length=4)
    with pytest.raises(ValueError, match="label_names"):
        export.export_model(exports.classifier, tmp_path, "c", tokenizer, max_input_length=4)
    with pytest.raises(ValueError, match="`jit_compile=True` is for translation and language"):
        export.export_model(
            exports.classifier,
            tmp_path,
            "c",
            tokenizer,
            max_input_length=4,
            label_names=exports.label_names,
            jit_compile=True,
        )
    # Learned positions: each prompt leaves its own room, not one XLA program.
    with pytest.raises(ValueError, match="whose positions do not end"):
        export.export_model(
            exports.language_model, tmp_path, "l", tokenizer, max_input_length=4, jit_compile=True
        )
    with pytest.raises(FileExistsError, match="overwrite"):
        export.export_model(
            model, exports.base, "reverse", tokenizer, tokenizer, max_input_length=4, version=1
        )
    assert not (tmp_path / "m").exists()


def test_the_length_s_name_before_still_exports(exports, tmp_path):
    """`export_model(max_length=)`, the name of `max_input_length` before,
    works for one release with a warning, and sets both lengths as it did."""
    with pytest.warns(FutureWarning, match="`max_length` is deprecated .* use `max_input_length`"):
        version = export.export_model(
            exports.classifier,
            tmp_path,
            "c",
            exports.tokenizer,
            max_length=4,
            label_names=exports.label_names,
        )
    metadata = json.loads((version / export.METADATA_FILE).read_text())
    assert (metadata["max_input_length"], metadata["max_decoding_length"]) == (4, 4)


def search_in_process(exports, text, model, **options):
    """The Python way for one text: `decoding.search` with one row's options
    (`BATCH_OPTIONS`); the hypotheses' texts and tokens, and their scores."""
    tokenizer = exports.tokenizer

    def ids(texts):
        return tokenizer.tokenize(tf.constant(texts)).to_tensor().numpy()

    prefix = options.pop("target_prefix")
    sequences = [s for s in options.pop("suppress_sequences") if s]
    found, scores = decoding.search(
        model,
        ids([text])[:, :MAX_LENGTH],
        decoding.DecodingOptions(
            **options,
            target_prefix=ids([prefix]) if prefix else None,
            suppress_sequences=ids(sequences)[None] if sequences else None,
        ),
    )
    found = np.asarray(found)[0]
    tokens = [[tokenizer.vocabulary[i] for i in row if i] for row in found.tolist()]
    tokens = [row[: row.index("</s>")] if "</s>" in row else row for row in tokens]
    return list(tokenizer.detokenize(found).numpy()), tokens, np.asarray(scores)[0]


def test_translate_batch_answers_each_row_as_decoding_search(exports, served):
    """Every option, a different value in each row, in one request: each row
    gets the n-best list `decoding.search` finds for it alone (which is
    CTranslate2's: test_translate_batch.py), hypotheses past the row's own
    list empty. The Transformer, and the RNN (its decoder too takes a
    target prefix)."""
    for path, model in (
        (exports.translator_v1, exports.translator),
        (exports.rnn_path, exports.rnn),
    ):
        answer = answers(served, path)[-1 if path == exports.rnn_path else -3]
        for row, text in enumerate(TEXTS):
            options = {name: values[row] for name, values in BATCH_OPTIONS.items()}
            texts, tokens, scores = search_in_process(exports, text, model, **options)
            n = options["num_hypotheses"]
            assert list(answer["hypotheses"][row]) == texts + [b""] * (3 - n)
            np.testing.assert_allclose(answer["scores"][row], [*scores, *[0] * (3 - n)], rtol=1e-5)
            got = [[t.decode() for t in hypothesis if t] for hypothesis in answer["tokens"][row]]
            assert got == tokens + [[]] * (3 - n)


def test_translate_batch_with_ctranslate2_s_defaults_and_an_empty_batch(exports, served):
    defaults, _, _, empty = answers(served, exports.translator_v1)[-4:]
    for row, text in enumerate(TEXTS):
        options = {"target_prefix": "", "suppress_sequences": []}
        texts, _, scores = search_in_process(exports, text, exports.translator, **options)
        assert list(defaults["hypotheses"][row]) == texts  # beam 2, one hypothesis
        np.testing.assert_allclose(defaults["scores"][row], scores, rtol=1e-5)
    assert (
        sum(h[0] == t[::-1].encode() for h, t in zip(defaults["hypotheses"], TEXTS, strict=True))
        >= 2
    )
    assert empty["hypotheses"].shape == (0, 1) and empty["scores"].shape == (0, 1)
    assert empty["tokens"].shape[:2] == (0, 1)


def test_translate_batch_refuses_options_out_of_range_naming_them(exports, served):
    """Row 2 asks for 3 hypotheses of a beam of 2 (CTranslate2's default)."""
    refused = answers(served, exports.translator_v1)[-2]
    assert "num_hypotheses" in refused["error"] and "row] [2] [has] [3]" in refused["error"]


def test_score_batch_scores_each_target_token_as_in_process(exports, served):
    answer = answers(served, exports.translator_v1)[-5]
    tokenizer = exports.tokenizer
    source = tokenizer.tokenize(tf.constant(TEXTS)).to_tensor()
    target = tokenizer.tokenize(tf.constant([t[::-1] for t in TEXTS])).to_tensor()
    labels, log_probs = decoding.score_targets(exports.translator, source, target)
    np.testing.assert_allclose(answer["log_probs"], log_probs, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(answer["log_prob"], np.sum(log_probs, axis=1), rtol=1e-5)
    assert [[t.decode() for t in row if t] for row in answer["tokens"]] == [
        [*t[::-1], "</s>"] for t in TEXTS
    ]


def width_of(array, width, fill):
    """`array` `[..., T]` cut or padded (with `fill`) to `width` on its last axis."""
    array = array[..., :width]
    padding = [(0, 0)] * (array.ndim - 1) + [(0, width - array.shape[-1])]
    return np.pad(array, padding, constant_values=fill)


def test_translate_batch_alignments_and_unknowns_replaced(exports, served):
    """`return_attention` and `replace_unknowns`, a different pair in each
    row: the rows that ask get `decoding.alignments` of their answers (the
    Transformer's heads averaged; the RNN's one head), the others -1 and
    0; the `<unk>` of the prefix "a" becomes the source token it is
    aligned to where asked, in the tokens and the text. The XLA export
    answers as the plain one."""
    tokenizer = exports.tokenizer
    reserved = {"<pad>", "<s>", "</s>", "<unk>"}
    for model, answer in (
        (exports.translator, answers(served, exports.translator_v1)[-9]),
        (exports.rnn, answers(served, exports.rnn_path)[-2]),
    ):
        assert answer["alignments"].shape == answer["tokens"].shape
        width = answer["tokens"].shape[2]
        replaced = 0
        for row, text in enumerate(TEXTS):
            options = {name: values[row] for name, values in ALIGN_OPTIONS.items()}
            asked, replace = options.pop("return_attention"), options.pop("replace_unknowns")
            _, tokens, _ = search_in_process(exports, text, model, suppress_sequences=[], **options)
            n = options["num_hypotheses"]
            source = tokenizer.tokenize(tf.constant([text])).to_tensor()
            found = [[tokenizer.vocabulary.index(t) for t in hypothesis] for hypothesis in tokens]
            found = width_of(np.array([[h + [0] * (width - len(h)) for h in found]]), width, 0)
            positions, weights = decoding.alignments(model, source, found)
            positions, weights = np.asarray(positions)[0], np.asarray(weights)[0]
            got = answer["alignments"][row, :n]
            np.testing.assert_array_equal(got, positions if asked else np.full_like(got, -1))
            got = answer["attention"][row, :n, :, : source.shape[1]]
            np.testing.assert_allclose(got, weights if asked else 0, atol=1e-5)
            assert not answer["attention"][row, :, :, source.shape[1] :].any()
            if replace:
                tokens = [
                    [text[p] if t == "<unk>" else t for t, p in zip(h, positions[i], strict=False)]
                    for i, h in enumerate(tokens)
                ]
                replaced += sum(h[0] != "<unk>" for h in tokens)
            got = [
                [t.decode() for t in hypothesis if t] for hypothesis in answer["tokens"][row, :n]
            ]
            assert got == tokens
            texts = ["".join(t for t in h if t not in reserved).encode() for h in tokens]
            assert list(answer["hypotheses"][row, :n]) == texts
        assert replaced == 3  # rows 0 and 1 (two hypotheses)
        assert (answer["alignments"][[0, 2]] >= 0).sum() >= 10
    compiled = answers(served, exports.translator_v2)[11]
    plain = answers(served, exports.translator_v1)[-9]
    for key in plain:
        if plain[key].dtype.kind == "f":
            np.testing.assert_allclose(compiled[key], plain[key], atol=1e-5, err_msg=key)
        else:
            np.testing.assert_array_equal(compiled[key], plain[key], err_msg=key)


def test_translate_batch_defaults_are_ctranslate2s_and_one_value_serves_every_text(exports, served):
    """The SignatureDef (saved_model.pb) records CTranslate2's defaults, one
    value `[1]` each, which TF Serving feeds for the inputs a request
    leaves out; the graph repeats an input `[1]` for every text. A request
    of texts alone gets the answer of every default sent per text, and
    options sent once the answer of the same values sent per text."""
    from tensorflow.core.protobuf import saved_model_pb2

    from keras_attention.export.servers import translation

    saved = saved_model_pb2.SavedModel.FromString(
        (exports.translator_v1 / "saved_model.pb").read_bytes()
    )
    recorded = saved.meta_graphs[0].signature_def["translate_batch"].defaults
    recorded = {name: tf.make_ndarray(value).tolist() for name, value in recorded.items()}
    expected = {name: [value] for name, (_, value) in translation.signature_options().items()}
    assert recorded == {**expected, "target_prefix": [b""], "suppress_sequences": [[b""]]}
    assert expected["beam_size"] == [2] and expected["max_decoding_length"] == [256]
    text_only, one_for_all, per_text = answers(served, exports.translator_v1)[-8:-5]
    every_default = answers(served, exports.translator_v1)[-4]
    for got, wanted in ((text_only, every_default), (one_for_all, per_text)):
        assert got.keys() == wanted.keys()
        for key in got:
            np.testing.assert_array_equal(got[key], wanted[key], err_msg=key)
    assert one_for_all["hypotheses"].shape == (len(TEXTS), 2)  # (not the defaults' answer)
    assert (one_for_all["alignments"] >= 0).any()
    assert all(h.startswith(b"9") for h in one_for_all["hypotheses"][:, 0])


def test_translate_batch_refuses_options_of_another_number_of_rows(exports):
    from export_helpers import batch_inputs

    signature = tf.saved_model.load(str(exports.translator_v1)).signatures["translate_batch"]
    inputs = batch_inputs(TEXTS)
    inputs["replace_unknowns"] = np.array([True, False])
    with pytest.raises(tf.errors.InvalidArgumentError, match="`replace_unknowns` needs one value"):
        signature(**{name: tf.constant(value) for name, value in inputs.items()})
