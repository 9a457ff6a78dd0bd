"""BERT classifiers converted, held against Hugging Face's own outputs on
the committed tiny checkpoints (fixtures/make_bert_fixtures.py): token ids,
logits, the export's probabilities in a fresh process, fine-tuning with
`--init-from`, and what is refused."""

import json
import math
import re
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf
from convert_helpers import FIXTURES, reference
from export_helpers import ask_a_fresh_process

from keras_attention.convert import CheckpointError, from_huggingface
from keras_attention.data.tokenizers import END_ID, START_ID, load_run_tokenizer
from keras_attention.recipes import classify
from keras_attention.run_files import RunFiles


def checkpoint_ids(tokenizer, name):
    """Our id -> the checkpoint's (`vocab.txt`'s line), as an array."""
    vocabulary = (FIXTURES / name / "vocab.txt").read_text("utf-8").splitlines()
    line = {token: i for i, token in enumerate(vocabulary)}
    return np.array([line[token] for token in tokenizer.vocabulary])


def text_ids(tokenizer, texts):
    return tokenizer.tokenize(tf.constant(texts))


def pair_ids(tokenizer, pairs):
    first, second = zip(*pairs, strict=True)
    return tokenizer.tokenize_pairs(tf.constant(first), tf.constant(second))


@pytest.mark.filterwarnings("ignore:.*holds a BertModel")  # (test_a_bert_model_gets_a_new_head)
@pytest.mark.parametrize("name", ["bert", "bert_model"])
def test_token_ids_equal_hugging_faces(converted, name):
    """Lower-cased and accents stripped (bert) or cased (bert_model),
    truncated to the model's 40 positions, pairs as `longest_first`."""
    expected, _ = reference(name)
    tokenizer = converted(name).tokenizers["text"]
    ours_to_theirs = checkpoint_ids(tokenizer, name)
    for kind, ids in (
        ("text", text_ids(tokenizer, expected["texts"])),
        ("pair", pair_ids(tokenizer, expected["pairs"])),
    ):
        ours = [ours_to_theirs[row].tolist() for row in ids.to_list()]
        assert ours == expected[f"{kind}_input_ids"]


def test_logits_equal_hugging_faces(converted):
    expected, arrays = reference("bert")
    run = converted("bert")
    tokenizer = run.tokenizers["text"]
    for kind, ids in (
        ("text", text_ids(tokenizer, expected["texts"])),
        ("pair", pair_ids(tokenizer, expected["pairs"])),
    ):
        logits = np.asarray(run.model(ids.to_tensor()))  # padded: every row as it is alone
        np.testing.assert_allclose(logits, arrays[f"{kind}_logits"], atol=1e-4)
    assert arrays["text_logits"].std(axis=0).min() > 0.1  # outputs differ from text to text
    # Texts and pairs that fill the 40 positions: truncated, as Hugging Face truncates them.
    for kind in ("text", "pair"):
        assert max(map(len, expected[f"{kind}_input_ids"])) == expected["max_length"] == 40
    assert run.label_names == ["negative", "neutral", "positive"]
    assert run.config["tokenizer"] == "wordpiece" and run.config["max_input_length"] == 40


def test_a_bert_model_gets_a_new_head():
    """A `BertModel` has no classifier: its pooled output is Hugging Face's,
    and its new head starts from zero, said in a warning."""
    expected, arrays = reference("bert_model")
    with pytest.warns(UserWarning, match="holds a BertModel: its classifier is new"):
        run = from_huggingface(FIXTURES / "bert_model")
    tokenizer = run.tokenizers["text"]
    for kind, ids in (
        ("text", text_ids(tokenizer, expected["texts"])),
        ("pair", pair_ids(tokenizer, expected["pairs"])),
    ):
        pooled = np.asarray(run.model.pool(ids.to_tensor()))
        np.testing.assert_allclose(pooled, arrays[f"{kind}_pooled"], atol=1e-4)
    assert run.label_names == ["LABEL_0", "LABEL_1"]
    assert not np.asarray(run.model(text_ids(tokenizer, ["a"]).to_tensor())).any()


def as_bytes(texts):
    return np.array([t.encode("utf-8") if isinstance(t, str) else t for t in texts], dtype=object)


def test_the_export_classifies_as_hugging_face(bert_run, tmp_path):
    """`serving_default` on every text and `classify_pairs` on every pair,
    from the export reloaded in a fresh process that imports only
    TensorFlow and TF Text: Hugging Face's probabilities and labels."""
    expected, _ = reference("bert")
    config = json.loads(RunFiles(bert_run).config.read_text())
    assert config["tokenizer"] == "wordpiece"
    assert json.loads(RunFiles(bert_run).labels.read_text()) == ["negative", "neutral", "positive"]
    export = bert_run / "serving" / "bert" / "1"
    first, second = zip(*expected["pairs"], strict=True)
    odd = as_bytes(["", b"\xff\xfe caf\xc3\xa9", "x" * 5000])
    requests = [
        ("serving_default", {"text": as_bytes(expected["texts"])}),
        ("classify_pairs", {"text": as_bytes(first), "text_pair": as_bytes(second)}),
        ("classify_pairs", {"text": odd, "text_pair": odd[::-1]}),
        ("serving_default", {"text": np.array([], dtype=object)}),
    ]
    answers = ask_a_fresh_process({export: requests}, tmp_path)[export]
    assert answers["unregistered_ops"] == []
    assert answers["signatures"]["classify_pairs"]["inputs"] == ["text", "text_pair"]
    texts, pairs, odd_pairs, empty = answers["answers"]
    for kind, answer in (("text", texts), ("pair", pairs)):
        np.testing.assert_allclose(
            answer["probabilities"], expected[f"{kind}_probabilities"], atol=1e-5, rtol=0
        )
        labels = [label.decode() for label in answer["label"]]
        assert labels == expected[f"{kind}_labels"]
    assert len(expected["texts"]) >= 50 and len(expected["pairs"]) >= 20
    assert odd_pairs["probabilities"].shape == (3, 3)
    assert empty["probabilities"].shape == (0, 3)


def labelled_texts(count, seed):
    """Questions and statements of the fixture's words, half each: a new
    label set that one epoch learns something of."""
    random = np.random.default_rng(seed)
    words = "the cat dog house train station coffee garden book teacher lake".split()
    rows = []
    for index in range(count):
        text = " ".join(random.choice(words, random.integers(3, 7)))
        rows.append((f"where is {text}?", "question") if index % 2 else (f"{text}.", "statement"))
    return rows


def write_rows(path, rows):
    path.write_text("".join(f"{text}\t{label}\n" for text, label in rows), encoding="utf-8")
    return path


def mean_loss(run, rows):
    """Mean cross-entropy of `rows` under the run's model."""
    files = RunFiles(run)
    config = json.loads(files.config.read_text())
    tokenizer = load_run_tokenizer(files, config, "text")
    labels = json.loads(files.labels.read_text())
    model = keras.saving.load_model(files.model)
    ids = tokenizer.tokenize(tf.constant([text for text, _ in rows])).to_tensor()
    logits = np.asarray(model(ids), np.float64)
    log_probs = logits - logits.max(-1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
    return -np.mean([log_probs[i, labels.index(label)] for i, (_, label) in enumerate(rows)])


def test_fine_tuning_a_converted_bert_on_new_labels(bert_run, tmp_path, capsys):
    """`classify --init-from RUN --train-file F` with labels the run lacks:
    a new head from zero (every class equally likely: a loss of ln 2), said
    in one line; one epoch lowers the validation loss."""
    train = write_rows(tmp_path / "train.tsv", labelled_texts(512, 0))
    validation = write_rows(tmp_path / "validation.tsv", labelled_texts(32, 1))
    test = write_rows(tmp_path / "test.tsv", labelled_texts(8, 2))
    output = tmp_path / "tuned"
    classify.main(
        ["--init-from", str(bert_run), "--train-file", str(train)]
        + ["--validation-file", str(validation), "--test-file", str(test)]
        + ["--epochs", "1", "--batch-size", "16", "--no-export", "--output-dir", str(output)]
    )
    printed = capsys.readouterr().out
    assert printed.count("a new classifier head of 2 classes, starting from zero") == 1
    assert json.loads(RunFiles(output).labels.read_text()) == ["question", "statement"]
    rows = [line.split("\t") for line in validation.read_text().splitlines()]
    assert mean_loss(output, rows) < math.log(2) - 0.1  # 0.55 when written


def test_fine_tuning_on_the_runs_labels_keeps_its_head(bert_run, tmp_path):
    """Labels that are the run's, in another order: the run's order and head."""
    recipe = classify.ClassifyRecipe(classify.ClassifyConfig(init_from=str(bert_run)))
    assert recipe.initial_labels(["positive", "negative", "neutral"]) == [
        "negative",
        "neutral",
        "positive",
    ]
    assert not recipe.new_head


def test_a_run_that_is_not_a_classifiers_is_refused(tmp_path):
    from keras_attention.recipes.config import InitFromError

    recipe = classify.ClassifyRecipe(classify.ClassifyConfig(init_from=str(tmp_path)))
    with pytest.raises(InitFromError, match="is not a classifier's run: .*labels.json not found"):
        recipe.initial_labels(["a", "b"])


def copy_fixture(tmp_path, name="bert"):
    folder = tmp_path / name
    shutil.copytree(FIXTURES / name, folder)
    return folder


def edit_json(path, edit):
    value = json.loads(path.read_text("utf-8"))
    edit(value)
    path.write_text(json.dumps(value), "utf-8")


def set_key(*keys_and_value):
    *keys, value = keys_and_value

    def edit(document):
        for key in keys[:-1]:
            document = document[key]
        document[keys[-1]] = value

    return edit


REFUSALS = [
    ("tokenizer.json", set_key("normalizer", {"type": "NFC"}), "normalizer={'type': 'NFC'}"),
    (
        "tokenizer.json",
        set_key("normalizer", "strip_accents", False),
        "strip_accents=False with lower-casing True",
    ),
    (
        "tokenizer.json",
        set_key("normalizer", "handle_chinese_chars", False),
        "normalizer.handle_chinese_chars=False",
    ),
    (
        "tokenizer.json",
        set_key("pre_tokenizer", {"type": "Whitespace"}),
        "pre_tokenizer={'type': 'Whitespace'}",
    ),
    (
        "tokenizer.json",
        lambda tokenizer: tokenizer["added_tokens"].append({"id": 400, "content": "<emoji>"}),
        "added_tokens=['<emoji>'] are not supported",
    ),
    ("config.json", set_key("hidden_act", "gelu_new"), "hidden_act='gelu_new'"),
    (
        "config.json",
        set_key("position_embedding_type", "relative_key"),
        "position_embedding_type='relative_key'",
    ),
    (
        "config.json",
        set_key("problem_type", "multi_label_classification"),
        "problem_type='multi_label_classification'",
    ),
    ("config.json", set_key("id2label", {"0": "score"}), "num_labels=1 is a regression"),
    ("config.json", set_key("architectures", ["BertForMaskedLM"]), "architectures="),
    ("config.json", set_key("pad_token_id", 7), "pad_token_id=7 is not the id of [PAD]"),
]


@pytest.mark.parametrize("file, edit, message", REFUSALS)
def test_what_is_not_bert_as_converted_is_refused(tmp_path, file, edit, message):
    folder = copy_fixture(tmp_path)
    edit_json(folder / file, edit)
    with pytest.raises(CheckpointError, match=re.escape(f"{file}: {message}")):
        from_huggingface(folder)


def test_tokenizer_config_alone_is_read_and_checked(tmp_path):
    """Without tokenizer.json, tokenizer_config.json's slow-tokenizer keys."""
    folder = copy_fixture(tmp_path)
    (folder / "tokenizer.json").unlink()
    edit_json(folder / "tokenizer_config.json", set_key("strip_accents", False))
    with pytest.raises(CheckpointError, match="tokenizer_config.json: strip_accents=False"):
        from_huggingface(folder)


def test_without_vocab_txt_the_vocabulary_is_tokenizer_jsons(tmp_path, converted):
    """Many folders ship `tokenizer.json` only: its WordPiece `model.vocab`
    is the vocabulary; with neither file the folder is refused."""
    folder = copy_fixture(tmp_path)
    (folder / "vocab.txt").unlink()
    assert from_huggingface(folder).tokenizers["text"].vocabulary == (
        converted("bert").tokenizers["text"].vocabulary
    )
    (folder / "tokenizer.json").unlink()
    with pytest.raises(CheckpointError, match="neither vocab.txt nor tokenizer.json found"):
        from_huggingface(folder)


def test_the_explorer_opens_a_converted_bert(bert_run):
    from keras_attention.explore import Explorer

    expected, _ = reference("bert")
    answer = Explorer(bert_run).answer(expected["texts"][2])
    assert answer["label"] == expected["text_labels"][2]
    probabilities = list(answer["probabilities"].values())
    np.testing.assert_allclose(probabilities, expected["text_probabilities"][2], atol=1e-4)
    assert answer["source_tokens"][0] == "[CLS]" and answer["source_tokens"][-1] == "[SEP]"


def test_a_shorter_max_length_keeps_the_frame(converted):
    """`with_max_length` (fine-tuning with a smaller --max-input-length): texts and
    pairs still end with [SEP], within the new limit."""
    expected, _ = reference("bert")
    tokenizer = converted("bert").tokenizers["text"].with_max_length(8)
    long_text = max(expected["texts"], key=len)
    for ids in (
        text_ids(tokenizer, [long_text]),
        pair_ids(tokenizer, [(long_text, long_text)]),
    ):
        (row,) = ids.to_list()
        assert len(row) == 8 and row[0] == START_ID and row[-1] == END_ID
