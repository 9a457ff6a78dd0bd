"""The encoder families beyond BERT as sentence embedders, held against
sentence-transformers' own `encode` on the committed tiny folders (made by
fixtures/make_embedding_families_fixtures.py): XLM-RoBERTa (RoBERTa's
position offset, a SentencePiece Unigram tokenizer with fairseq's ids, from
`sentencepiece.bpe.model` or `tokenizer.json` alone) and MPNet (the same
offset, a relative position bias shared by every layer, WordPiece framed
`<s> text </s>`), the refusals, and the exports reloaded in a fresh
process."""

import json
import shutil

import numpy as np
import pytest
import tensorflow as tf
from convert_helpers import FIXTURES
from export_helpers import ask_a_fresh_process

from keras_attention.convert import CheckpointError, convert, from_huggingface
from keras_attention.data.tokenizers import token_ids


def reference(name):
    folder = FIXTURES / name
    return json.loads((folder / "reference.json").read_text()), np.load(folder / "reference.npz")


def embed(converted, texts):
    tokenizer = converted.tokenizers["text"]
    ids = token_ids(tokenizer, texts, converted.config["max_input_length"])
    return np.asarray(converted.model.embed(ids))


def assert_same_vectors(ours, theirs):
    """Cosine >= 0.99999 per row, and close value by value."""
    assert ours.shape == theirs.shape
    cosine = (ours * theirs).sum(1) / (
        np.linalg.norm(ours, axis=1) * np.linalg.norm(theirs, axis=1) + 1e-30
    )
    assert cosine.min() >= 0.99999, cosine.min()
    np.testing.assert_allclose(ours, theirs, atol=1e-5, rtol=0)


def copy_fixture(tmp_path, name):
    folder = tmp_path / name
    shutil.copytree(FIXTURES / name, folder)
    return folder


def edit_json(path, edit):
    document = json.loads(path.read_text())
    edit(document)
    path.write_text(json.dumps(document))


def as_bytes(texts):
    return np.array([t.encode("utf-8") for t in texts], dtype=object)


# === XLM-RoBERTa ===


@pytest.fixture(scope="module")
def xlm_roberta():
    return from_huggingface(FIXTURES / "st_xlm_roberta")


def test_xlm_roberta_converts_as_sentence_transformers_encodes(xlm_roberta):
    """Transformer, mean Pooling and Normalize as sentence-transformers 6
    saves them; RoBERTa's positions from 2; `max_seq_length` 24 of the 40
    positions; texts in many scripts."""
    expected, arrays = reference("st_xlm_roberta")
    model = xlm_roberta.model
    assert xlm_roberta.config["task"] == "embedding"
    assert xlm_roberta.config["tokenizer"] == "mapped_subword"
    assert xlm_roberta.config["max_input_length"] == expected["max_seq_length"] == 24
    assert (model.position_offset, model.max_position_embeddings, model.num_segments) == (2, 42, 1)
    assert model.pooling == "mean" and model.unit_normalize
    ours = embed(xlm_roberta, expected["texts"])
    assert_same_vectors(ours, arrays["mean"])
    # Outputs that differ from text to text, and texts the truncation cuts.
    cosines = arrays["mean"] @ arrays["mean"].T
    assert np.median(cosines[~np.eye(len(cosines), dtype=bool)]) < 0.95
    assert len(expected["truncated_input_ids"]) >= 40


def test_a_plain_xlm_roberta_folder_becomes_a_mean_pooling_embedder(tmp_path):
    """Without modules.json: sentence-transformers' fallback (mean pooling,
    no Normalize), which is also the family's own task."""
    expected, arrays = reference("st_xlm_roberta")
    folder = copy_fixture(tmp_path, "st_xlm_roberta")
    for name in ("modules.json", "sentence_bert_config.json"):
        (folder / name).unlink()
    converted = from_huggingface(folder)
    assert converted.config["task"] == "embedding" and not converted.model.unit_normalize
    assert_same_vectors(embed(converted, expected["texts"]), arrays["plain"])
    with pytest.raises(CheckpointError, match=r"converts to \['embedding'\]"):
        from_huggingface(folder, task="classification")


def their_ids(tokenizer, folder):
    """Our ids -> the checkpoint's, through each piece's id in tokenizer.json."""
    vocabulary = json.loads((folder / "tokenizer.json").read_text())["model"]["vocab"]
    index = {piece: i for i, (piece, _) in enumerate(vocabulary)}
    return np.array([index[piece] for piece in tokenizer.vocabulary]), vocabulary


def assert_hugging_faces_ids(tokenizer, folder, texts, expected):
    """Our ids are transformers' for every text, but where two
    segmentations of equal score are made of the same pieces in another
    order ("8|88" and "88|8" for "888"): transformers' Viterbi keeps the one
    whose last piece starts first, SentencePiece's the other. There, the
    text, the pieces and the score are the same."""
    ours_to_theirs, vocabulary = their_ids(tokenizer, folder)
    rows = tokenizer.tokenize(tf.constant(texts)).to_list()
    ties = 0
    for text, row, theirs in zip(texts, rows, expected, strict=True):
        ours = ours_to_theirs[row].tolist()
        if ours == theirs:
            continue
        ties += 1
        assert sorted(ours) == sorted(theirs), text
        assert "".join(vocabulary[i][0] for i in ours) == "".join(vocabulary[i][0] for i in theirs)
    assert ties <= 3, ties


def test_xlm_roberta_ids_are_hugging_faces(xlm_roberta):
    """Hundreds of strings: English, French, a dozen scripts, emoji,
    accents composed and not, full-width forms, ligatures, controls, every
    kind of white space (U+0085 too, which the normalizer keeps and
    transformers splits on), whole and cut at 24 ids."""
    expected, _ = reference("st_xlm_roberta")
    folder = FIXTURES / "st_xlm_roberta"
    texts = expected["tokenizer_texts"]
    assert len(texts) >= 800
    tokenizer = xlm_roberta.tokenizers["text"]
    assert tokenizer.as_spaces == "\x85"
    assert_hugging_faces_ids(tokenizer.with_max_length(None), folder, texts, expected["input_ids"])
    truncated = [
        expected["truncated_input_ids"].get(str(i), ids)
        for i, ids in enumerate(expected["input_ids"])
    ]
    assert max(map(len, truncated)) == 24
    assert_hugging_faces_ids(tokenizer, folder, texts, truncated)


def test_xlm_roberta_from_tokenizer_json_alone(tmp_path):
    """Without `sentencepiece.bpe.model`, the model is made of
    tokenizer.json's pieces, scores and charsmap: the same ids."""
    expected, arrays = reference("st_xlm_roberta")
    folder = copy_fixture(tmp_path, "st_xlm_roberta")
    (folder / "sentencepiece.bpe.model").unlink()
    converted = from_huggingface(folder)
    tokenizer = converted.tokenizers["text"].with_max_length(None)
    texts = expected["tokenizer_texts"]
    assert_hugging_faces_ids(tokenizer, folder, texts, expected["input_ids"])
    assert_same_vectors(embed(converted, expected["texts"]), arrays["mean"])


def set_config(**values):
    return lambda folder: edit_json(folder / "config.json", lambda c: c.update(values))


def set_tokenizer_json(edit):
    return lambda folder: edit_json(folder / "tokenizer.json", edit)


def tokenizer_json_alone(edit):
    def change(folder):
        (folder / "sentencepiece.bpe.model").unlink()
        edit_json(folder / "tokenizer.json", edit)

    return change


XLM_ROBERTA_REFUSALS = {
    "an activation": (set_config(hidden_act="gelu_new"), r"hidden_act='gelu_new' is not one of"),
    "relative positions": (
        set_config(position_embedding_type="relative_key"),
        r"position_embedding_type='relative_key' is not supported \(absolute\)",
    ),
    "two token types": (set_config(type_vocab_size=2), r"type_vocab_size=2 is not supported"),
    "another padding id": (set_config(pad_token_id=0), r"pad_token_id=0 is not the id of <pad>"),
    "a decoder": (set_config(is_decoder=True), r"is_decoder=True is not supported"),
    "another vocabulary size": (
        set_config(vocab_size=7),
        r"vocab_size=7 but sentencepiece.bpe.model has \d+ tokens",
    ),
    "a masked language model": (
        set_config(architectures=["XLMRobertaForMaskedLM"]),
        r"names 'XLMRobertaForMaskedLM'; xlm-roberta converts \['XLMRobertaModel'\]",
    ),
    "no prefix space": (
        lambda f: edit_json(
            f / "tokenizer_config.json", lambda c: c.update(add_prefix_space=False)
        ),
        r"tokenizer_config.json: add_prefix_space=False is not supported",
    ),
    "files that disagree": (
        set_tokenizer_json(lambda t: t["model"]["vocab"][10].__setitem__(1, -1.0)),
        r"tokenizer.json and .*sentencepiece.bpe.model hold different vocabularies",
    ),
    "a BPE tokenizer.json": (
        tokenizer_json_alone(lambda t: t["model"].update(type="BPE")),
        r"tokenizer.json: model.type='BPE' is not supported \(Unigram\)",
    ),
    "byte fallback": (
        tokenizer_json_alone(lambda t: t["model"].update(byte_fallback=True)),
        r"model.byte_fallback=True is not supported",
    ),
    "another id layout": (
        tokenizer_json_alone(lambda t: t["model"].update(unk_id=0)),
        r"model.vocab=.* is not XLM-RoBERTa's layout",
    ),
    "an added token": (
        tokenizer_json_alone(
            lambda t: t["added_tokens"].append({"id": 4, "content": "<extra>", "special": True})
        ),
        r"added_tokens=\['<extra>'\] are not supported",
    ),
    "no tokenizer": (
        lambda f: [(f / name).unlink() for name in ("sentencepiece.bpe.model", "tokenizer.json")],
        r"neither sentencepiece.bpe.model nor tokenizer.json found",
    ),
    "a model file that is not SentencePiece": (
        lambda f: (f / "sentencepiece.bpe.model").write_bytes(b"\xff" * 64),
        r"sentencepiece.bpe.model is not a SentencePiece model",
    ),
}


@pytest.mark.parametrize("case", list(XLM_ROBERTA_REFUSALS))
def test_what_xlm_roberta_cannot_be_is_refused_by_name(tmp_path, case):
    change, message = XLM_ROBERTA_REFUSALS[case]
    folder = copy_fixture(tmp_path, "st_xlm_roberta")
    change(folder)
    with pytest.raises(CheckpointError, match=message):
        from_huggingface(folder)


def test_modules_over_a_family_without_an_encoder_are_refused(tmp_path):
    """sentence-transformers' modules over a GPT-2 checkpoint: its family
    reads no encoder; the message names those that do."""
    folder = copy_fixture(tmp_path, "gpt2")
    for name in ("modules.json", "1_Pooling"):
        source = FIXTURES / "st_xlm_roberta" / name
        copy = shutil.copytree if source.is_dir() else shutil.copy
        copy(source, folder / name)
    with pytest.raises(
        CheckpointError, match=r"model_type 'gpt2' cannot be an embedder here \(bert"
    ):
        from_huggingface(folder)


# === MPNet ===


@pytest.fixture(scope="module")
def mpnet():
    return from_huggingface(FIXTURES / "st_mpnet")


def test_mpnet_converts_as_sentence_transformers_encodes(mpnet):
    """all-mpnet-base-v2's Hub layout (Normalize without its folder, E5's
    prompts), `max_seq_length` 48 of 64 positions: RoBERTa's offset and the
    relative position bias of 32 buckets, one table for both layers."""
    expected, arrays = reference("st_mpnet")
    model = mpnet.model
    assert mpnet.config["task"] == "embedding" and mpnet.config["tokenizer"] == "wordpiece"
    assert mpnet.config["max_input_length"] == expected["max_seq_length"] == 48
    assert (model.position_offset, model.relative_attention_num_buckets) == (2, 32)
    assert model.num_segments is None and model.unit_normalize
    assert sum("relative_position_bias" in w.path for w in model.weights) == 1
    assert_same_vectors(embed(mpnet, expected["texts"]), arrays["mean"])
    queries = [f"query: {text}" for text in expected["texts"]]
    assert_same_vectors(embed(mpnet, queries), arrays["mean_query"])
    assert len(expected["truncated_input_ids"]) >= 4


def test_mpnets_relative_position_bias_matters(tmp_path):
    """Without its table (all zeros) the vectors are far from theirs."""
    expected, arrays = reference("st_mpnet")
    converted = from_huggingface(FIXTURES / "st_mpnet")
    bias = converted.model.encoder.relative_position_bias
    bias.set_weights([np.zeros_like(w) for w in bias.get_weights()])
    ours = embed(converted, expected["texts"])
    cosine = (ours * arrays["mean"]).sum(1)
    assert np.median(cosine) < 0.99, np.median(cosine)


def test_a_plain_mpnet_folder_becomes_a_mean_pooling_embedder(tmp_path):
    expected, arrays = reference("st_mpnet")
    folder = copy_fixture(tmp_path, "st_mpnet")
    for name in ("modules.json", "sentence_bert_config.json"):
        (folder / name).unlink()
    converted = from_huggingface(folder)
    assert converted.config["max_input_length"] == 64 and not converted.model.unit_normalize
    assert_same_vectors(embed(converted, expected["texts"]), arrays["plain"])


def test_mpnet_ids_are_hugging_faces(mpnet, tmp_path):
    """Hundreds of strings, lower-cased and stripped of accents, `[UNK]`
    for what the vocabulary lacks, framed `<s> text </s>`, whole and cut at
    48 ids; from `vocab.txt` and from `tokenizer.json` alone."""
    expected, _ = reference("st_mpnet")
    texts = expected["tokenizer_texts"]
    vocabulary = (FIXTURES / "st_mpnet" / "vocab.txt").read_text().splitlines()
    folder = copy_fixture(tmp_path, "st_mpnet")
    (folder / "vocab.txt").unlink()
    truncated = [
        expected["truncated_input_ids"].get(str(i), ids)
        for i, ids in enumerate(expected["input_ids"])
    ]
    assert max(map(len, truncated)) == 48
    for tokenizer in (mpnet.tokenizers["text"], from_huggingface(folder).tokenizers["text"]):
        assert tokenizer.vocabulary[:4] == ["<pad>", "<s>", "</s>", "[UNK]"]
        ours_to_theirs = np.array([vocabulary.index(token) for token in tokenizer.vocabulary])
        whole = tokenizer.with_max_length(10**6).tokenize(tf.constant(texts)).to_list()
        assert [ours_to_theirs[row].tolist() for row in whole] == expected["input_ids"]
        cut = tokenizer.tokenize(tf.constant(texts)).to_list()
        assert [ours_to_theirs[row].tolist() for row in cut] == truncated


def set_tokenizer_config(**values):
    return lambda folder: edit_json(folder / "tokenizer_config.json", lambda c: c.update(values))


def swap_first_tokens(folder):
    lines = (folder / "vocab.txt").read_text().splitlines()
    lines[0], lines[1] = lines[1], lines[0]
    (folder / "vocab.txt").write_text("\n".join(lines) + "\n")


MPNET_REFUSALS = {
    "other buckets": (
        set_config(relative_attention_num_buckets=64),
        r"relative_attention_num_buckets=64 is not supported \(32",
    ),
    "an activation": (set_config(hidden_act="gelu_new"), r"hidden_act='gelu_new' is not one of"),
    "a decoder": (set_config(is_decoder=True), r"is_decoder=True is not supported"),
    "a masked language model": (
        set_config(architectures=["MPNetForMaskedLM"]),
        r"names 'MPNetForMaskedLM'; mpnet converts \['MPNetModel'\]",
    ),
    "another vocabulary size": (
        set_config(vocab_size=7),
        r"vocab_size=7 but .*vocab.txt has 405 tokens",
    ),
    "padding elsewhere": (swap_first_tokens, r"vocab.txt: <pad>=0 is not id 1"),
    "accents kept while lower-casing": (
        set_tokenizer_config(strip_accents=False),
        r"tokenizer_config.json: strip_accents=False with do_lower_case True is not supported",
    ),
    "Chinese characters not split": (
        set_tokenizer_config(tokenize_chinese_chars=False),
        r"tokenize_chinese_chars=False is not supported",
    ),
    "an unknown token it lacks": (
        set_tokenizer_config(unk_token="[OOV]"),
        r"vocab.txt has no \[OOV\]",
    ),
    "files that disagree": (
        set_tokenizer_json(lambda t: t["normalizer"].update(lowercase=False)),
        r"tokenizer.json: normalizer=.* differs from tokenizer_config.json",
    ),
    "another pre-tokenizer": (
        set_tokenizer_json(lambda t: t.update(pre_tokenizer={"type": "Whitespace"})),
        r"pre_tokenizer=\{'type': 'Whitespace'\} is not supported \(BertPreTokenizer\)",
    ),
    "an added token": (
        set_tokenizer_json(
            lambda t: t["added_tokens"].append({"id": 404, "content": "<extra>", "special": True})
        ),
        r"added_tokens=\['<extra>'\] are not supported",
    ),
    "no vocabulary": (
        lambda f: [(f / name).unlink() for name in ("vocab.txt", "tokenizer.json")],
        r"neither vocab.txt nor tokenizer.json found",
    ),
}


@pytest.mark.parametrize("case", list(MPNET_REFUSALS))
def test_what_mpnet_cannot_be_is_refused_by_name(tmp_path, case):
    change, message = MPNET_REFUSALS[case]
    folder = copy_fixture(tmp_path, "st_mpnet")
    change(folder)
    with pytest.raises(CheckpointError, match=message):
        from_huggingface(folder)


def test_an_mpnet_folder_is_no_classifier():
    with pytest.raises(CheckpointError, match=r"a mpnet checkpoint converts to \['embedding'\]"):
        from_huggingface(FIXTURES / "st_mpnet", task="classification")


def test_the_exports_embed_as_sentence_transformers(tmp_path):
    """Both runs' exports, reloaded in one fresh process that imports only
    TensorFlow and TF Text: XLM-RoBERTa's SentencePiece in the graph,
    `<s> text </s>` cut at 24 ids, the position offset; MPNet's relative
    position bias and its prompts (`embed_with_prompt`)."""
    xlm_expected, xlm_arrays = reference("st_xlm_roberta")
    mpnet_expected, mpnet_arrays = reference("st_mpnet")
    xlm_export = convert(FIXTURES / "st_xlm_roberta", tmp_path / "xlmr") / "serving" / "xlmr" / "1"
    mpnet_export = convert(FIXTURES / "st_mpnet", tmp_path / "mpnet") / "serving" / "mpnet" / "1"
    texts = xlm_expected["texts"]
    names = ["", "query"] * (len(texts) // 2) + [""] * (len(texts) % 2)
    spec = {
        xlm_export: [
            ("embed", {"text": as_bytes(texts)}),
            ("serving_default", {"text": as_bytes(texts[:3])}),
        ],
        mpnet_export: [
            ("embed", {"text": as_bytes(texts)}),
            ("embed_with_prompt", {"text": as_bytes(texts), "prompt_name": as_bytes(names)}),
        ],
    }
    answers = ask_a_fresh_process(spec, tmp_path)
    assert (
        answers[xlm_export]["unregistered_ops"] == answers[mpnet_export]["unregistered_ops"] == []
    )
    every, few = answers[xlm_export]["answers"]
    assert_same_vectors(every["embeddings"], xlm_arrays["mean"])
    assert_same_vectors(few["embeddings"], xlm_arrays["mean"][:3])
    plain, prompted = answers[mpnet_export]["answers"]
    assert_same_vectors(plain["embeddings"], mpnet_arrays["mean"])
    query = np.array(names)[:, None] == "query"
    chosen = np.where(query, mpnet_arrays["mean_query"], mpnet_arrays["mean"])
    assert_same_vectors(prompted["embeddings"], chosen)
    assert mpnet_expected["texts"] == texts
