"""sentence-transformers folders into `TransformerEmbedder` runs, held
against sentence-transformers' own `encode` on the committed tiny folders
(made by fixtures/make_sentence_transformers_fixtures.py): every pooling
mode, Dense and Normalize, prompts, a plain BERT folder as an embedder,
WordPiece from `tokenizer.json` alone, the refusals, and the export
reloaded in a fresh process."""

import json
import shutil

import numpy as np
import pytest
import tensorflow as tf
from convert_helpers import FIXTURES
from export_helpers import ask_a_fresh_process

from keras_attention.convert import CheckpointError, convert, from_huggingface
from keras_attention.data.tokenizers import token_ids

MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
HUB_KEYS = {
    "cls": "pooling_mode_cls_token",
    "max": "pooling_mode_max_tokens",
    "mean": "pooling_mode_mean_tokens",
    "mean_sqrt_len_tokens": "pooling_mode_mean_sqrt_len_tokens",
    "weightedmean": "pooling_mode_weightedmean_tokens",
    "lasttoken": "pooling_mode_lasttoken",
}


def reference(name):
    folder = FIXTURES / name
    return json.loads((folder / "reference.json").read_text()), np.load(folder / "reference.npz")


def embed(converted, texts, prompt=""):
    tokenizer = converted.tokenizers["text"]
    ids = token_ids(tokenizer, [prompt + t for t in texts], converted.config["max_input_length"])
    return np.asarray(converted.model.embed(ids))


def assert_same_vectors(ours, theirs):
    """Cosine >= 0.99999 per row, and close value by value."""
    assert ours.shape == theirs.shape
    cosine = (ours * theirs).sum(1) / (
        np.linalg.norm(ours, axis=1) * np.linalg.norm(theirs, axis=1) + 1e-30
    )
    assert cosine.min() >= 0.99999, cosine.min()
    np.testing.assert_allclose(ours, theirs, atol=1e-5, rtol=0)


def copy_fixture(tmp_path, name="st_minilm"):
    folder = tmp_path / name
    shutil.copytree(FIXTURES / name, folder)
    return folder


def edit_json(path, edit):
    document = json.loads(path.read_text())
    edit(document)
    path.write_text(json.dumps(document))


@pytest.fixture(scope="module")
def minilm():
    return from_huggingface(FIXTURES / "st_minilm")


def test_the_hub_layout_converts_as_sentence_transformers_encodes(minilm):
    """Transformer, mean Pooling and a Normalize whose folder is absent;
    `max_seq_length` 24 of 40 positions; `tokenizer.json` only."""
    expected, arrays = reference("st_minilm")
    assert not (FIXTURES / "st_minilm" / "vocab.txt").exists()
    assert not (FIXTURES / "st_minilm" / "2_Normalize").exists()
    assert minilm.config["task"] == "embedding" and minilm.config["max_input_length"] == 24
    assert minilm.model.unit_normalize and minilm.model.pooling == "mean"
    ours = embed(minilm, expected["texts"])
    assert_same_vectors(ours, arrays["mean"])
    assert np.allclose(np.linalg.norm(ours, axis=1), 1, atol=1e-5)
    # Outputs that differ from text to text, and texts the truncation cuts.
    cosines = arrays["mean"] @ arrays["mean"].T
    assert np.median(cosines[~np.eye(len(cosines), dtype=bool)]) < 0.95
    assert max(map(len, expected["input_ids"])) == expected["max_seq_length"] == 24


def test_prompts_are_kept_and_put_first(minilm):
    expected, arrays = reference("st_minilm")
    assert minilm.config["prompts"] == {"query": "query: ", "passage": "passage: "}
    assert minilm.config["default_prompt_name"] is None
    assert_same_vectors(embed(minilm, expected["texts"], "query: "), arrays["mean_query"])


def test_wordpiece_from_tokenizer_json_gives_hugging_faces_ids(minilm):
    """Hundreds of varied strings (English, French, capitals, accents,
    other scripts, emoji, controls, long texts cut at 24 ids)."""
    expected, _ = reference("st_minilm")
    vocabulary = json.loads((FIXTURES / "st_minilm" / "tokenizer.json").read_text())["model"]
    tokenizer = minilm.tokenizers["text"]
    ours_to_theirs = np.array([vocabulary["vocab"][token] for token in tokenizer.vocabulary])
    texts = expected["tokenizer_texts"]
    assert len(texts) >= 300
    ids = tokenizer.tokenize(tf.constant(texts)).to_list()
    assert [ours_to_theirs[row].tolist() for row in ids] == expected["input_ids"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("layout", ["hub", "sentence_transformers_6"])
def test_every_pooling_mode(tmp_path, mode, layout):
    """Each mode, written as the Hub's `pooling_mode_*` flags or as
    sentence-transformers 6's `pooling_mode`."""
    expected, arrays = reference("st_minilm")
    folder = copy_fixture(tmp_path)

    def set_mode(config):
        for key in HUB_KEYS.values():
            config.pop(key, None)
        if layout == "hub":
            config.update({key: key == HUB_KEYS[mode] for key in HUB_KEYS.values()})
        else:
            config.update(pooling_mode=mode, include_prompt=True)

    edit_json(folder / "1_Pooling" / "config.json", set_mode)
    converted = from_huggingface(folder)
    assert converted.model.pooling == mode
    assert_same_vectors(embed(converted, expected["texts"]), arrays[mode])


def test_dense_normalize_and_a_default_prompt():
    """sentence-transformers 6's own layout: CLS pooling, Dense (tanh) to
    16, Normalize; its default prompt is put before every text."""
    expected, arrays = reference("st_dense")
    converted = from_huggingface(FIXTURES / "st_dense")
    model = converted.model
    assert (model.pooling, model.output_dim, model.output_activation) == ("cls", 16, "tanh")
    assert converted.config["default_prompt_name"] == "query"
    assert_same_vectors(embed(converted, expected["texts"], "query: "), arrays["default"])
    assert_same_vectors(embed(converted, expected["texts"]), arrays["no_prompt"])


def test_a_plain_bert_folder_becomes_an_embedder_when_asked():
    """sentence-transformers' fallback for a folder without modules.json:
    mean pooling; BERT's pooler is not used. Without `task` the folder
    still becomes a classifier."""
    expected, _ = reference("st_minilm")
    theirs = np.load(FIXTURES / "bert_model" / "sentence_transformers.npz")["mean"]
    converted = from_huggingface(FIXTURES / "bert_model", task="embedding")
    assert converted.config["task"] == "embedding" and converted.label_names is None
    assert converted.model.pooling == "mean" and not converted.model.unit_normalize
    assert_same_vectors(embed(converted, expected["texts"]), theirs)
    with pytest.warns(UserWarning, match="--task embedding"):
        assert from_huggingface(FIXTURES / "bert_model").config["task"] == "classification"


def write_modules(folder, kinds):
    edit_json(
        folder / "modules.json",
        lambda modules: modules.__setitem__(
            slice(None), [{"idx": i, "path": p, "type": t} for i, (p, t) in enumerate(kinds)]
        ),
    )


REFUSALS = {
    "a module kind": (
        lambda f: write_modules(
            f,
            [
                ("", "sentence_transformers.models.Transformer"),
                ("1_Pooling", "sentence_transformers.models.Pooling"),
                ("2_LSTM", "sentence_transformers.models.LSTM"),
            ],
        ),
        r"module type 'sentence_transformers.models.LSTM' is not supported",
    ),
    "a custom module": (
        lambda f: write_modules(f, [("", "my_package.MyTransformer")]),
        r"module type 'my_package.MyTransformer' is not supported",
    ),
    "modules out of order": (
        lambda f: write_modules(
            f,
            [
                ("", "sentence_transformers.models.Transformer"),
                ("2_Normalize", "sentence_transformers.models.Normalize"),
                ("1_Pooling", "sentence_transformers.models.Pooling"),
            ],
        ),
        r"modules \['Transformer', 'Normalize', 'Pooling'\] are not supported",
    ),
    "two pooling modes": (
        lambda f: edit_json(
            f / "1_Pooling" / "config.json",
            lambda c: c.update(pooling_mode_cls_token=True, pooling_mode_mean_tokens=True),
        ),
        r"1_Pooling/config.json: pooling modes \['cls', 'mean'\] are not supported",
    ),
    "a pooling mode we lack": (
        lambda f: edit_json(
            f / "1_Pooling" / "config.json", lambda c: c.update(pooling_mode="median")
        ),
        r"pooling modes \['median'\] are not supported",
    ),
    "prompts left out of pooling": (
        lambda f: edit_json(f / "1_Pooling" / "config.json", lambda c: c.update(include_prompt=0)),
        r"include_prompt=False is not supported",
    ),
    "a default prompt it does not have": (
        lambda f: edit_json(
            f / "config_sentence_transformers.json",
            lambda c: c.update(default_prompt_name="question"),
        ),
        r"config_sentence_transformers.json: default_prompt_name='question' is not one of",
    ),
    "a similarity we lack": (
        lambda f: edit_json(
            f / "config_sentence_transformers.json",
            lambda c: c.update(similarity_fn_name="manhattan"),
        ),
        r"similarity_fn_name='manhattan' is not supported",
    ),
    "a bad max_seq_length": (
        lambda f: edit_json(
            f / "sentence_bert_config.json", lambda c: c.update(max_seq_length="long")
        ),
        r"sentence_bert_config.json: max_seq_length='long' is not an integer",
    ),
    "lower-casing a cased tokenizer": None,  # (st_dense: below)
    "no vocabulary at all": (
        lambda f: (f / "tokenizer.json").unlink(),
        r"neither vocab.txt nor tokenizer.json found in",
    ),
    "a vocabulary with gaps": (
        lambda f: edit_json(
            f / "tokenizer.json", lambda t: t["model"]["vocab"].update({"[PAD]": 9999})
        ),
        r"tokenizer.json: model.vocab=.* do not have the ids 0 to N - 1",
    ),
}


@pytest.mark.parametrize("case", [name for name, case in REFUSALS.items() if case])
def test_what_is_not_supported_is_refused_by_name(tmp_path, case):
    change, message = REFUSALS[case]
    folder = copy_fixture(tmp_path)
    change(folder)
    with pytest.raises(CheckpointError, match=message):
        from_huggingface(folder)


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda f: edit_json(
                f / "2_Dense" / "config.json",
                lambda c: c.update(activation_function="torch.nn.modules.activation.SiLU"),
            ),
            r"2_Dense/config.json: activation_function='torch.nn.modules.activation.SiLU' is not",
        ),
        (
            lambda f: (f / "2_Dense" / "model.safetensors").unlink(),
            r"2_Dense: model.safetensors not found \(a pytorch_model.bin needs torch",
        ),
        (
            lambda f: edit_json(f / "2_Dense" / "config.json", lambda c: c.update(in_features=31)),
            r"in_features=31 but the encoder's width is 32",
        ),
        (
            lambda f: (f / "sentence_bert_config.json").write_text('{"do_lower_case": true}'),
            r"do_lower_case=True with a tokenizer that keeps case is not supported",
        ),
    ],
)
def test_what_a_dense_module_cannot_be_is_refused(tmp_path, change, message):
    folder = copy_fixture(tmp_path, "st_dense")
    change(folder)
    with pytest.raises(CheckpointError, match=message):
        from_huggingface(folder)


def test_a_task_the_folder_cannot_be_is_refused():
    with pytest.raises(CheckpointError, match="sentence-transformers folder; it converts to"):
        from_huggingface(FIXTURES / "st_minilm", task="classification")
    with pytest.raises(CheckpointError, match=r"converts to \['language_model'\]"):
        from_huggingface(FIXTURES / "gpt2", task="embedding")


@pytest.fixture(scope="module")
def dense_run(tmp_path_factory):
    return convert(FIXTURES / "st_dense", tmp_path_factory.mktemp("converted") / "st_dense")


def as_bytes(texts):
    return np.array([t.encode("utf-8") for t in texts], dtype=object)


def test_the_export_embeds_as_sentence_transformers(dense_run, tmp_path):
    """`serving_default` and `embed` (the default prompt), and
    `embed_with_prompt` ("" for none, per row), reloaded in a fresh process
    that imports only TensorFlow and TF Text."""
    expected, arrays = reference("st_dense")
    export = dense_run / "serving" / "st_dense" / "1"
    texts = expected["texts"]
    names = ["", "query"] * (len(texts) // 2) + [""] * (len(texts) % 2)
    requests = [
        ("serving_default", {"text": as_bytes(texts)}),
        ("embed", {"text": as_bytes(texts)}),
        ("embed_with_prompt", {"text": as_bytes(texts), "prompt_name": as_bytes(names)}),
        ("serving_default", {"text": np.array([], dtype=object)}),
    ]
    answers = ask_a_fresh_process({export: requests}, tmp_path)[export]
    assert answers["unregistered_ops"] == []
    assert answers["signatures"]["embed_with_prompt"]["inputs"] == ["prompt_name", "text"]
    assert answers["signatures"]["serving_default"]["outputs"] == ["embeddings"]
    default, embedded, per_row, empty = answers["answers"]
    assert_same_vectors(default["embeddings"], arrays["default"])
    assert_same_vectors(embedded["embeddings"], arrays["default"])
    chosen = np.where(np.array(names)[:, None] == "query", arrays["default"], arrays["no_prompt"])
    assert_same_vectors(per_row["embeddings"], chosen)
    assert empty["embeddings"].shape == (0, 16)
    metadata = json.loads((export / "assets.extra" / "keras_attention.json").read_text())
    assert metadata["default_prompt_name"] == "query"


def test_an_unknown_prompt_name_fails_the_request_naming_it(dense_run):
    export = tf.saved_model.load(str(dense_run / "serving" / "st_dense" / "1"))
    signature = export.signatures["embed_with_prompt"]
    with pytest.raises(tf.errors.InvalidArgumentError, match="`prompt_name` must be one of"):
        signature(text=tf.constant(["a", "b"]), prompt_name=tf.constant(["query", "question"]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="one value per text"):
        signature(text=tf.constant(["a", "b"]), prompt_name=tf.constant(["query"]))


def test_the_encoder_encodes_as_sentence_transformers(dense_run):
    """`Encoder(path).encode` over the export: its default prompt, a named
    one, a free prompt, one text, batching that keeps the order,
    normalization and `similarity`."""
    from keras_attention import Encoder

    expected, arrays = reference("st_dense")
    texts = expected["texts"]
    encoder = Encoder(dense_run)
    assert encoder.prompts == {"document": "", "query": "query: "}
    assert_same_vectors(encoder.encode(texts, batch_size=7), arrays["default"])
    assert_same_vectors(encoder.encode(texts, prompt_name="document"), arrays["no_prompt"])
    assert_same_vectors(encoder.encode(texts, prompt=""), arrays["no_prompt"])
    assert_same_vectors(encoder.encode(texts, prompt="query: "), arrays["default"])
    one = encoder.encode(texts[3])
    assert one.shape == (16,)
    assert_same_vectors(one[None], arrays["default"][3:4])
    assert encoder.encode([]).shape == (0, 16)
    vectors = encoder.encode(texts[:4], normalize_embeddings=True)
    similarity = Encoder.similarity(vectors, vectors)
    np.testing.assert_allclose(np.diag(similarity), 1, atol=1e-6)
    np.testing.assert_allclose(similarity, vectors @ vectors.T, atol=1e-6)
    with pytest.raises(ValueError, match="`prompt_name` must be one of the export's prompts"):
        encoder.encode(texts, prompt_name="question")
    with pytest.raises(TypeError, match="`sentences` must be a list of texts"):
        encoder.encode([1, 2])
    with pytest.raises(ValueError, match="`batch_size` must be a positive integer"):
        encoder.encode(texts, batch_size=0)


def test_the_embed_command_writes_a_npy_file(dense_run, tmp_path):
    from keras_attention import embed

    expected, arrays = reference("st_dense")
    lines = tmp_path / "texts.txt"
    lines.write_text("\n".join(expected["texts"][:9]) + "\n", encoding="utf-8")
    output = tmp_path / "vectors.npy"
    embed.main([str(dense_run), str(lines), "-o", str(output), "--prompt-name", "document"])
    assert_same_vectors(np.load(output), arrays["no_prompt"][:9])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["texts.txt", "vectors.npy"]


def test_the_explorer_opens_an_embedder(dense_run):
    """Its answer: the tokens, the vector (the model's, unit length here)
    and every layer's attention over the tokens."""
    from keras_attention.explore import Explorer

    explorer = Explorer(dense_run)
    answer = explorer.answer("The weather is nice today.")
    assert answer["task"] == "embedding" and len(answer["embedding"]) == 16
    assert answer["source_tokens"][0] == "[CLS]" and answer["source_tokens"][-1] == "[SEP]"
    assert abs(answer["norm"] - 1) < 1e-3
    (layer,) = answer["attention"]["self_attention"]
    assert np.asarray(layer).shape[-2:] == (len(answer["source_tokens"]),) * 2


def test_an_xla_export_embeds_in_a_few_shapes(tmp_path):
    """`export_jit_compile`: the same vectors, from programs of the shapes
    the metadata lists only (batches of 1 to 70 rows, texts short and cut
    at the 24 ids of `max_seq_length`), reloaded in a fresh process."""
    from keras_attention.export.run import export_run

    expected, arrays = reference("st_minilm")
    run = convert(FIXTURES / "st_minilm", tmp_path / "minilm", export=False)
    export = export_run(run, {"export_jit_compile": True})
    metadata = json.loads((export / "assets.extra" / "keras_attention.json").read_text())
    assert metadata["compiled_shapes"] == {"batch_sizes": [1, 4, 16, 64], "lengths": [16, 24]}
    texts = (expected["texts"] * 2)[:70]
    requests = [
        ("embed", {"text": as_bytes(texts)}),
        ("embed", {"text": as_bytes(texts[:3])}),
        ("embed", {"text": np.array([], dtype=object)}),
    ]
    answers = ask_a_fresh_process({export: requests}, tmp_path)[export]
    many, few, empty = answers["answers"]
    assert all("error" not in answer for answer in answers["answers"]), answers["answers"]
    theirs = np.concatenate([arrays["mean"], arrays["mean"]])[:70]
    assert_same_vectors(many["embeddings"], theirs)
    assert_same_vectors(few["embeddings"], theirs[:3])
    assert empty["embeddings"].shape == (0, 32)
