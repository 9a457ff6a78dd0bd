"""The client against a stand-in for TF Serving's REST and gRPC predict APIs
(see tf_serving_stand_in.py), serving the exports in a separate process."""

import socket
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from export_helpers import (
    BEAM_SIZE,
    MAX_LENGTH,
    MIXED_OPTIONS,
    SAMPLING_OPTIONS,
    STAND_IN,
    TEXTS,
    decode_in_process,
    sample_in_process,
    sampling_inputs,
)

from keras_attention.export import client


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(exports):
    rest, grpc = free_port(), free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            str(STAND_IN),
            "serve",
            str(exports.base),
            "reverse,lm",
            str(rest),
            str(grpc),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout.readline().strip() == "serving"
        yield f"127.0.0.1:{rest}", f"127.0.0.1:{grpc}"
    finally:
        process.kill()
        process.wait()


def test_rest_and_grpc_answer_like_the_model(exports, server):
    rest, grpc = server
    expected = decode_in_process(exports.translator, exports.tokenizer, TEXTS)
    by_rest = client.predict_rest({"text": TEXTS}, "reverse", rest)
    by_grpc = client.predict_grpc({"text": TEXTS}, "reverse", grpc)
    assert list(by_rest["translation"]) == expected
    assert list(by_grpc["translation"]) == expected


def test_inputs_signatures_and_versions(exports, server):
    rest, grpc = server
    expected = decode_in_process(exports.translator, exports.tokenizer, TEXTS)
    for predict, target in ((client.predict_rest, rest), (client.predict_grpc, grpc)):
        outputs = predict({"text": TEXTS}, "reverse", target, "translate_with_attention", 1)
        assert list(outputs["translation"]) == expected
        assert outputs["attention"].shape[:2] == (len(TEXTS), exports.translator.num_heads)
        assert np.issubdtype(outputs["attention"].dtype, np.floating)  # JSON: float64


def test_per_request_options_in_the_column_and_row_formats(exports, server):
    """What the README shows: options as [B] inputs, in TF Serving's
    columnar ("inputs") and row ("instances") REST formats and over gRPC."""
    rest, grpc = server
    beam_sizes, max_lengths = zip(*MIXED_OPTIONS, strict=True)
    inputs = {
        "text": TEXTS,
        "beam_size": list(beam_sizes),
        "max_decoding_length": list(max_lengths),
    }
    expected = [
        decode_in_process(exports.translator, exports.tokenizer, [text], beam_size, max_length)[0]
        for text, (beam_size, max_length) in zip(TEXTS, MIXED_OPTIONS, strict=True)
    ]
    signature = "translate_with_options"
    answers = [
        client.predict_rest(inputs, "reverse", rest, signature),
        client.predict_rest(inputs, "reverse", rest, signature, rows=True),
        client.predict_grpc(inputs, "reverse", grpc, signature),
    ]
    for answer in answers:
        assert list(answer["translation"]) == expected
    by_rows = client.predict_rest(
        {"text": TEXTS}, "reverse", rest, "translate_with_attention", rows=True
    )
    assert by_rows["attention"].shape[:2] == (len(TEXTS), exports.translator.num_heads)


def test_sampling_options_over_rest_rows_and_grpc(exports, server):
    """A language model's `complete_by_sampling`, its options as plain
    Python lists: the same seeds, the same completions, by either API."""
    rest, grpc = server
    columns = sampling_inputs(TEXTS, SAMPLING_OPTIONS).items()
    inputs = {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in columns}
    signature = "complete_by_sampling"
    by_rows = client.predict_rest(inputs, "lm", rest, signature, rows=True)
    by_grpc = client.predict_grpc(inputs, "lm", grpc, signature)
    assert by_rows["completion"].shape == (len(TEXTS),)
    expected = [
        sample_in_process(exports, text, *options)
        for text, options in zip(TEXTS, SAMPLING_OPTIONS, strict=True)
    ]
    assert list(by_rows["completion"]) == expected
    assert list(by_grpc["completion"]) == expected


def test_generate_batch_over_rest_rows_and_grpc(exports, server):
    """A language model's `generate_batch` as docs/serving.md asks it: every
    option, one object a prompt (beam search's n-best list, and a sample
    without the prompt); the answers of `Generator` on the same export."""
    from keras_attention import Generator
    from keras_attention.export.servers import language_model

    rest, grpc = server
    defaults = language_model.defaults()
    rows = [
        {**defaults, "prompt": "1234", "beam_size": 2, "num_hypotheses": 2, "max_length": 6},
        {
            **defaults,
            "prompt": "98",
            "max_length": 6,
            "sampling_topk": 3,
            "sampling_temperature": 0.8,
            "seed": 7,
            "include_prompt_in_result": False,
        },
    ]
    inputs = {name: [row[name] for row in rows] for name in rows[0]}
    by_rows = client.predict_rest(inputs, "lm", rest, "generate_batch", rows=True)
    by_grpc = client.predict_grpc(inputs, "lm", grpc, "generate_batch")
    assert by_rows["sequences"].shape == (2, 2) and by_rows["scores"].shape == (2, 2)
    generator = Generator(exports.language_model_path)
    for row, answer, other in zip(rows, by_rows["sequences"], by_grpc["sequences"], strict=True):
        options = {k: v for k, v in row.items() if k not in ("prompt", "suppress_sequences")}
        (result,) = generator.generate_batch([row["prompt"]], **options)
        expected = [s.encode() for s in result.sequences]
        assert list(answer[: len(expected)]) == list(other[: len(expected)]) == expected
    assert by_rows["sequences"][1, 1] == b""  # one hypothesis asked for


def test_generate_batch_defaults_are_ctranslate2s_and_one_value_serves_every_prompt(
    exports, server
):
    """The SignatureDef (saved_model.pb) records CTranslate2's defaults, one
    value `[1]` each, which the model server feeds for the inputs a request
    leaves out; the graph repeats an input `[1]` for every prompt. Prompts
    alone get the answer of every default sent per prompt, and options sent
    once the answer of the same values sent per prompt."""
    from tensorflow.core.protobuf import saved_model_pb2

    from keras_attention.export.servers import language_model

    saved = saved_model_pb2.SavedModel.FromString(
        (exports.language_model_path / "saved_model.pb").read_bytes()
    )
    recorded = saved.meta_graphs[0].signature_def["generate_batch"].defaults
    recorded = {name: tf.make_ndarray(value).tolist() for name, value in recorded.items()}
    expected = {name: [value] for name, (_, value) in language_model.signature_options().items()}
    assert recorded == {**expected, "suppress_sequences": [[b""]]}
    assert expected["beam_size"] == [1] and expected["max_length"] == [512]
    rest, grpc = server
    prompts = ["1234", "98", ""]
    every_default = {
        name: [value] * len(prompts) for name, value in language_model.defaults().items()
    }
    pairs = [
        ({"prompt": prompts}, {"prompt": prompts, **every_default}),
        (
            {"prompt": prompts, "beam_size": [2], "num_hypotheses": [2], "max_length": [6]},
            {
                "prompt": prompts,
                "beam_size": [2] * 3,
                "num_hypotheses": [2] * 3,
                "max_length": [6] * 3,
            },
        ),
    ]
    for one, per_prompt in pairs:
        by_rest = client.predict_rest(one, "lm", rest, "generate_batch")
        by_grpc = client.predict_grpc(per_prompt, "lm", grpc, "generate_batch")
        assert by_rest.keys() == by_grpc.keys()
        for key in by_rest:
            if by_rest[key].dtype.kind == "f":  # (REST's JSON: float64)
                np.testing.assert_allclose(by_rest[key], by_grpc[key], rtol=1e-6, err_msg=key)
            else:
                np.testing.assert_array_equal(by_rest[key], by_grpc[key], err_msg=key)
    assert by_rest["sequences"].shape == (3, 2)  # (not the defaults' answer)
    with pytest.raises(RuntimeError, match="`seed` needs one value per text"):
        client.predict_grpc({"prompt": prompts, "seed": [1, 2]}, "lm", grpc, "generate_batch")


def test_errors_name_the_server_and_the_problem(server):
    rest, grpc = server
    with pytest.raises(RuntimeError, match=f"{rest} answered 404.*Servable not found"):
        client.predict_rest({"text": ["1"]}, "missing", rest)
    with pytest.raises(RuntimeError, match=f"{grpc} answered NOT_FOUND"):
        client.predict_grpc({"text": ["1"]}, "reverse", grpc, version=7)
    with pytest.raises(RuntimeError, match="answered 400"):
        client.predict_rest({"text": ["1"], "beams": 3}, "reverse", rest)


def test_command_line(exports, server, capsys):
    rest, grpc = server
    expected = [t.decode() for t in decode_in_process(exports.translator, exports.tokenizer, TEXTS)]
    client.main(["--model", "reverse", "--rest", rest, *TEXTS])
    assert capsys.readouterr().out == f"translation: {expected}\n"
    client.main(["--model", "reverse", "--grpc", grpc, "--beam-size", str(BEAM_SIZE), *TEXTS])
    assert capsys.readouterr().out == f"translation: {expected}\n"
    (short,) = decode_in_process(exports.translator, exports.tokenizer, ["1234"], 1, 2)
    length = ["--max-decoding-length", "2"]
    client.main(["--model", "reverse", "--rest", rest, "--beam-size", "1", *length, "1234"])
    assert capsys.readouterr().out == f"translation: {[short.decode()]}\n"
    # Its name before still works, with a warning.
    with pytest.warns(FutureWarning, match="--max-length is now --max-decoding-length"):
        client.main(
            ["--model", "reverse", "--rest", rest, "--beam-size", "1", "--max-length=2", "1234"]
        )
    assert capsys.readouterr().out == f"translation: {[short.decode()]}\n"
    with pytest.raises(SystemExit, match="error: TF Serving at .* answered 404"):
        client.main(["--model", "nothing", "--rest", rest, "1"])
    sampled = sample_in_process(exports, "1234", MAX_LENGTH, 0.8, 0, 0.9, 7).decode()
    sampling = ["--temperature", "0.8", "--top-p", "0.9", "--seed", "7"]
    client.main(["--model", "lm", "--input", "prompt", "--grpc", grpc, *sampling, "1234"])
    assert capsys.readouterr().out == f"completion: {[sampled]}\n"
    # The text input's name read from the model's metadata, by either API.
    for api in (["--rest", rest], ["--grpc", grpc]):
        client.main(["--model", "lm", *api, *sampling, "1234"])
        assert capsys.readouterr().out == f"completion: {[sampled]}\n"
    for api in ({"rest": rest}, {"grpc": grpc}):
        names = client.input_names("reverse", "translate_with_options", **api)
        assert sorted(names) == ["beam_size", "max_decoding_length", "text"]
        with pytest.raises(RuntimeError, match="no signature 'translate_nothing'"):
            client.input_names("reverse", "translate_nothing", **api)


def test_options_over_the_export_s_limits_are_refused_by_name(server):
    """A beam size or a length over the export's limit fails the request
    with a message that names the input, its limit and the row (0 asks for
    the export's own length: tests/export/test_export.py)."""
    rest, grpc = server
    over = [
        (
            "reverse",
            "translate_with_options",
            {"text": TEXTS[:2], "beam_size": [2, 2], "max_decoding_length": [3, MAX_LENGTH + 1]},
            rf"`max_decoding_length` must be from 1 to {MAX_LENGTH} \(the max_decoding_length "
            r"of the export; 0 asks for it\); row\] \[1\] \[has\] \[11\]",
        ),
        (
            "reverse",
            "translate_with_options",
            {"text": TEXTS[:1], "beam_size": [17], "max_decoding_length": [3]},
            r"`beam_size` must be from 1 to 16; row\] \[0\] \[has\] \[17\]",
        ),
        (
            "lm",
            "complete_with_options",
            {"prompt": TEXTS[:1], "beam_size": [0], "max_decoding_length": [3]},
            r"`beam_size` must be from 1 to 16; row\] \[0\] \[has\] \[0\]",
        ),
        (
            "lm",
            "complete_by_sampling",
            {
                name: np.asarray(values).tolist()  # (JSON for REST)
                for name, values in sampling_inputs(TEXTS[:1], [(-1, 0.8, 0, 0.9, 7)]).items()
            },
            r"`max_decoding_length` must be from 1 to 10 .*; row\] \[0\] \[has\] \[-1\]",
        ),
    ]
    for model, signature, inputs, message in over:
        with pytest.raises(RuntimeError, match=f"{signature}: {message}"):
            client.predict_rest(inputs, model, rest, signature)
        with pytest.raises(RuntimeError, match=f"{signature}: {message}"):
            client.predict_grpc(inputs, model, grpc, signature)


def test_the_command_line_refuses_a_length_without_a_beam_size(capsys):
    """`--max-decoding-length` alone would leave the beam size to the client
    to guess (the export's own is not in TF Serving's metadata): refused,
    before any request."""
    with pytest.raises(SystemExit):
        client.main(
            ["--model", "reverse", "--rest", "localhost:1", "--max-decoding-length", "4", "1"]
        )
    assert "--max-decoding-length needs --beam-size" in capsys.readouterr().err


def test_the_client_sends_the_length_by_the_name_the_export_gives_it(monkeypatch, capsys):
    """An export made before the rename calls the options signatures'
    length `max_length`: the client reads the signature's inputs and sends
    the length by the name it has there."""
    sent = []

    def predict(inputs, model, host, signature, version):
        sent.append((signature, inputs))
        return {"translation": np.array([b"x"], object)}

    for names in (
        ["beam_size", "max_decoding_length", "text"],
        ["beam_size", "max_length", "text"],
    ):
        monkeypatch.setattr(
            client,
            "served_signatures",
            lambda *args, names=names: {"translate_with_options": names},
        )
        monkeypatch.setattr(client, "predict_rest", predict)
        arguments = ["--model", "m", "--input", "text", "--beam-size", "2"]
        client.main([*arguments, "--max-decoding-length", "5", "1234"])
        signature, inputs = sent.pop()
        length_name = names[1]
        assert signature == "translate_with_options"
        assert inputs == {"text": ["1234"], "beam_size": [2], length_name: [5]}
    assert capsys.readouterr().out == "translation: ['x']\n" * 2
