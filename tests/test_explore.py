"""The explorer's answers, its server and its command line, without a
browser (tests/recipes/test_explore_page.py drives the page in Chromium)."""

import json
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import numpy as np
import pytest
from explore_helpers import LABELS, make_run

from keras_attention import decoding
from keras_attention.data.tokenizers import START_ID
from keras_attention.explore import Explorer, ExplorerError, readable
from keras_attention.explore.__main__ import is_loopback, main, make_server, render_page


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("explore")
    kinds = ("transformer", "seq2seq_attention", "classifier", "language_model")
    return {kind: make_run(folder / kind, kind) for kind in kinds}


@pytest.fixture(scope="module")
def explorers(runs):
    return {kind: Explorer(folder) for kind, folder in runs.items()}


def model_attention(explorer, inputs):
    """The model's own weights for `inputs`, read directly."""
    scores = explorer.model.attention_scores(inputs)
    return {kind: [np.asarray(w)[0] for w in layers] for kind, layers in scores.items()}


@pytest.mark.parametrize("kind", ["transformer", "seq2seq_attention"])
def test_a_translation_answer_is_the_models_search_and_its_weights(explorers, kind):
    explorer = explorers[kind]
    answer = explorer.answer("hello world 42", beam_size=3)
    source_ids = np.array(
        [[explorer.tokenizers["source"].vocabulary.index(c) for c in "hello world 42"]]
    )
    assert answer["source_tokens"] == [readable(c, False) for c in "hello world 42"]

    # The output is the best of the beam search, and the hypotheses its K
    # finished ones, best first.
    ids, score = decoding.beam_search(
        explorer.model, source_ids, explorer.max_decoding_length, beam_size=3
    )
    output = [int(i) for i in np.asarray(ids)[0] if i != 0]
    output = output[: output.index(2)] if 2 in output else output
    target = explorer.tokenizers["target"]
    assert answer["target_tokens"] == [readable(target.vocabulary[i], False) for i in output] + [
        "</s>"
    ]
    assert answer["hypotheses"][0]["score"] == pytest.approx(float(np.asarray(score)[0]), abs=1e-4)
    scores = [h["score"] for h in answer["hypotheses"]]
    assert scores == sorted(scores, reverse=True) and 1 <= len(scores) <= 3

    # Every weight is the model's, with its output teacher-forced.
    target_ids = np.array([[START_ID, *output]])
    expected = model_attention(explorer, {"source_ids": source_ids, "target_ids": target_ids})
    assert set(answer["attention"]) == set(expected)
    for kind_name, layers in expected.items():
        for got, want in zip(answer["attention"][kind_name], layers, strict=True):
            np.testing.assert_allclose(np.array(got), want, atol=1e-4)
    cross = np.array(answer["attention"]["decoder_cross_attention"][-1])  # [H, T, S]
    assert cross.shape[1:] == (len(answer["target_tokens"]), len(answer["source_tokens"]))
    np.testing.assert_allclose(cross.sum(-1), 1.0, atol=1e-3)
    assert answer["steps"] == "decoder_cross_attention"
    assert answer["axes"]["decoder_cross_attention"] == ("target", "source")
    if kind == "seq2seq_attention":
        assert list(answer["attention"]) == ["decoder_cross_attention"] and cross.shape[0] == 1


def test_greedy_is_a_beam_of_one(explorers):
    explorer = explorers["transformer"]
    answer = explorer.answer("abc", beam_size=1)
    source_ids = np.array([[explorer.tokenizers["source"].vocabulary.index(c) for c in "abc"]])
    greedy = np.asarray(
        decoding.greedy_search(explorer.model, source_ids, explorer.max_decoding_length)
    )[0]
    greedy = [int(i) for i in greedy]
    greedy = greedy[: greedy.index(2)] if 2 in greedy else [i for i in greedy if i]
    assert len(answer["hypotheses"]) == 1
    assert len(answer["target_tokens"]) == len(greedy) + 1


def test_a_long_text_is_truncated_and_the_answer_says_so(explorers):
    explorer = explorers["transformer"]
    answer = explorer.answer("a" * 500)
    assert len(answer["source_tokens"]) == explorer.max_input_length
    assert "500 tokens" in answer["notice"] and "truncated" in answer["notice"]
    assert explorer.answer("short")["notice"] is None


@pytest.mark.parametrize(
    "text, beam_size, message",
    [
        ("", None, "empty"),
        ("   ", None, "empty"),
        ("caf\udcc3", None, "UTF-8"),  # a byte that was not UTF-8, as Python reads argv
        (42, None, "must be a string"),
        ("abc", 0, "beam_size must be from 1 to 8; got 0"),
        ("abc", 99, "got 99"),
    ],
)
def test_bad_input_gets_a_message(explorers, text, beam_size, message):
    with pytest.raises(ExplorerError, match=re.escape(message)):
        explorers["transformer"].answer(text, beam_size)


def test_a_classifier_answers_its_label_and_probabilities(explorers):
    explorer = explorers["classifier"]
    answer = explorer.answer("bonjour")
    probabilities = answer["probabilities"]
    assert list(probabilities) == LABELS
    assert sum(probabilities.values()) == pytest.approx(1.0, abs=1e-3)
    assert answer["label"] == max(probabilities, key=probabilities.get)
    ids = np.array([[explorer.tokenizers["text"].vocabulary.index(c) for c in "bonjour"]])
    logits = np.asarray(explorer.model(ids))[0]
    assert answer["label"] == LABELS[int(logits.argmax())]
    expected = model_attention(explorer, ids)["self_attention"]
    np.testing.assert_allclose(
        np.array(answer["attention"]["self_attention"][-1]), expected[-1], atol=1e-4
    )
    assert answer["steps"] is None


def test_a_language_model_completes_and_attends_only_backwards(explorers):
    explorer = explorers["language_model"]
    answer = explorer.answer("abc")
    vocabulary = explorer.tokenizers["text"].vocabulary
    prompt = np.array([[START_ID, *[vocabulary.index(c) for c in "abc"]]])
    new_tokens = explorer.max_input_length - prompt.shape[1]
    expected = [
        int(i) for i in np.asarray(decoding.greedy_search(explorer.model, prompt, new_tokens))[0]
    ]
    completion = expected[4:]
    completion = completion[: completion.index(2)] if 2 in completion else completion
    assert answer["prompt_length"] == 4
    assert len(answer["source_tokens"]) == 4 + len(completion)
    weights = np.array(answer["attention"]["self_attention"][-1])  # [H, T, T]
    assert np.all(np.triu(weights, k=1) == 0)  # no future leak
    assert answer["steps"] == "self_attention"


def test_a_folder_that_is_not_a_run_gets_a_message(tmp_path, runs, capsys):
    with pytest.raises(ExplorerError, match="is not a training run"):
        Explorer(tmp_path)
    with pytest.raises(ExplorerError, match="does not exist"):
        Explorer(tmp_path / "nowhere")
    with pytest.raises(SystemExit, match=r"error: .* is not a training run"):
        main([str(tmp_path)])
    # The model file of a run is as good as its folder.
    assert Explorer(runs["transformer"] / "model.keras").task == "translation"


def test_the_page_holds_everything_it_needs(explorers):
    page = render_page(explorers["transformer"].info())
    assert "/*SCRIPT*/" not in page and "/*STYLES*/" not in page
    # Offline: nothing is fetched from anywhere but the server itself.
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    assert "cdn" not in page.lower()
    # A text that holds `</script>` cannot end the data script early.
    answer = explorers["transformer"].answer("abc")
    answer["text"] = "</script><b>x"
    page = render_page(explorers["transformer"].info(), answer)
    assert page.count("</script>") == 2


@pytest.fixture(scope="module")
def server(explorers):
    server = make_server(explorers["transformer"], "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def post(url, body):
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_the_server_answers_and_refuses_bad_requests(server):
    with urllib.request.urlopen(server + "/", timeout=60) as response:
        assert response.headers["Content-Type"].startswith("text/html")
        assert b"Attention explorer" in response.read()
    with urllib.request.urlopen(server + "/api/info", timeout=60) as response:
        assert json.loads(response.read())["task"] == "translation"
    status, answer = post(
        server + "/api/answer", json.dumps({"text": "abc", "beam_size": 2}).encode()
    )
    assert status == 200 and answer["beam_size"] == 2 and answer["translation"] is not None
    cases = [
        (json.dumps({"text": ""}).encode(), "empty"),
        (b'{"text": "caf\xc3"}', "not valid UTF-8"),
        (b"{not json", "not JSON"),
        (json.dumps({"text": "abc", "beam": 2}).encode(), "Unknown request fields: beam"),
        (json.dumps(["abc"]).encode(), "must be"),
    ]
    for body, message in cases:
        status, answer = post(server + "/api/answer", body)
        assert status == 400 and message in answer["error"], (body, answer)
    with pytest.raises(urllib.error.HTTPError, match="404"):
        urllib.request.urlopen(server + "/nothing", timeout=60)


def test_the_standalone_page_holds_its_answer(runs, tmp_path, capsys):
    out = tmp_path / "page.html"
    main([str(runs["seq2seq_attention"]), "--html", str(out), "a" * 40])
    page = out.read_text(encoding="utf-8")
    data = json.loads(re.search(r"window.EXPLORER = (\{.*?\});\n", page).group(1))
    assert data["static"] and data["answer"]["text"] == "a" * 40
    assert data["answer"]["notice"] and "truncated" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="error: The text is empty"):
        main([str(runs["seq2seq_attention"]), "--html", str(tmp_path / "no.html"), " "])
    assert not (tmp_path / "no.html").exists()


def test_the_command_serves_and_says_who_can_reach_it(runs):
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and not is_loopback("0.0.0.0")
    command = [sys.executable, "-m", "keras_attention.explore", str(runs["classifier"])]
    process = subprocess.Popen(
        [*command, "--port", "0", "--host", "0.0.0.0"], stdout=subprocess.PIPE, text=True
    )
    try:
        warning = process.stdout.readline()
        address = process.stdout.readline()
        assert "anyone who can reach this address" in warning
        port = re.search(r"http://0\.0\.0\.0:(\d+)/", address).group(1)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/info", timeout=60) as response:
            assert json.loads(response.read())["labels"] == LABELS
    finally:
        process.terminate()
        process.wait(timeout=30)
