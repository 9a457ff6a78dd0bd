"""The embed recipe (`recipes/embed.py`): a sentence embedder trained on
pairs with in-batch negatives. On easy synthetic pairs (a word-for-word
cipher of made-up words) a run from scratch goes from chance to near
perfect retrieval, and its export answers through `Encoder` as the model
embeds; `--init-from` fine-tunes a converted sentence-transformers
checkpoint; bad lines are named. The strategies, JAX and a killed run
resumed bit for bit are `pytest -m large`.

The loss itself is held against a numpy rendering of sentence-transformers'
MultipleNegativesRankingLoss in tests/test_objectives.py."""

import contextlib
import dataclasses
import io
import json
import os
import random
import re

import keras
import numpy as np
import pytest
import tensorflow as tf
from convert_helpers import FIXTURES
from export_helpers import ask_a_fresh_process
from kill_helpers import (
    NEWEST_BEFORE_KILL,
    assert_resumed_as_reference,
    epoch_losses,
    finish,
    kill_and_keep,
    run,
)
from kill_helpers import flags as kill_flags
from recipe_helpers import CLUSTERS, free_ports

import keras_attention  # noqa: F401  (registers the models for loading)
from keras_attention import Encoder
from keras_attention.convert import convert
from keras_attention.data.tokenizers import CharacterTokenizer, load_run_tokenizer, token_ids
from keras_attention.models import build_transformer_classifier
from keras_attention.models.transformer_embedder import TransformerEmbedder
from keras_attention.recipes import config as recipe_config
from keras_attention.recipes import embed
from keras_attention.run_files import RunFiles

RETRIEVAL = ("test_examples", "recall_at_1", "mrr_at_10")


# --- Synthetic pairs: a cipher of made-up words ---


def made_up_words(rng, consonants, count):
    words = set()
    while len(words) < count:
        syllables = rng.choice((2, 3))
        words.add("".join(rng.choice(consonants) + rng.choice("aeiou") for _ in range(syllables)))
    return sorted(words)


def cipher_pairs(count, seed, concepts=40):
    """`(anchor, positive)` pairs: 3 to 5 of `concepts` made-up words, and
    the same concepts in another made-up language (other consonants), word
    for word. Untrained, an embedder ranks a positive by chance; a model
    that learns the 40 word pairs retrieves every one."""
    rng = random.Random(0)  # the same two languages for every split
    source, target = (
        made_up_words(rng, "bkmtrs", concepts),
        made_up_words(rng, "dfglnpvz", concepts),
    )
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        chosen = [rng.randrange(concepts) for _ in range(rng.choice((3, 4, 5)))]
        pairs.append((" ".join(source[i] for i in chosen), " ".join(target[i] for i in chosen)))
    return pairs


def write_pairs(path, pairs):
    path.write_text("".join("\t".join(pair) + "\n" for pair in pairs), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def cipher_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cipher")
    return {
        name: write_pairs(folder / f"{name}.tsv", cipher_pairs(count, seed))
        for name, count, seed in (("train", 512, 1), ("validation", 64, 2), ("test", 64, 3))
    }


def file_flags(files, output_dir, *extra):
    return [
        *("--train-file", str(files["train"]), "--validation-file", str(files["validation"])),
        *("--test-file", str(files["test"]), "--output-dir", str(output_dir)),
        *("--batch-size", "32", "--epochs", "3", *extra),
    ]


def run_here(main, flags):
    """Runs a recipe's `main` in this process; returns what it printed."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        main(flags)
    return printed.getvalue()


@pytest.fixture(scope="module")
def scratch_run(cipher_files, tmp_path_factory):
    """A run from scratch on the cipher pairs (512 of them, 3 epochs of 16
    batches of 32), with its export: `(its folder, what it printed)`."""
    output_dir = tmp_path_factory.mktemp("scratch") / "run"
    return output_dir, run_here(embed.main, file_flags(cipher_files, output_dir))


# --- A run from scratch ---


def test_a_run_from_scratch_learns_to_retrieve(scratch_run):
    """Chance before training (1 in 64), near perfect after: measured
    3.1% -> 100% (TensorFlow and JAX alike)."""
    output_dir, printed = scratch_run
    results = json.loads((output_dir / "evaluation.json").read_text())
    assert results["test_examples"] == results["candidates"] == 64
    before = results["before_training"]
    assert before["recall_at_1"] <= 0.15 and before["mrr_at_10"] <= 0.3, before
    assert results["recall_at_1"] >= 0.8 and results["mrr_at_10"] >= 0.85, results
    assert re.search(r"Before training: recall@1 [\d.]+%, MRR@10 [\d.]+ on the test split", printed)
    assert "(64 anchors, each against the 64 distinct positives)" in printed
    shown = f"recall@1 {before['recall_at_1']:.2%} -> {results['recall_at_1']:.2%}"
    assert shown in printed
    config = json.loads((output_dir / "config.json").read_text())
    assert config["tokenizer"] == "subword" and config["model_preset"] == "tiny"
    assert config["similarity_scale"] == 20.0
    assert "embedder (tiny)" in printed and "512 training pairs," in printed
    # The validation loss falls epoch by epoch.
    losses = [float(loss) for loss in epoch_losses(printed)]
    assert len(losses) == 3 and losses[2] < losses[1] < losses[0]
    # Each test anchor, its positive and what it retrieved.
    rows = (output_dir / "test_retrieval.tsv").read_text(encoding="utf-8").splitlines()
    assert rows[0] == "anchor\tpositive\tretrieved" and len(rows) == 65


def test_the_run_saves_the_embedder_and_its_export_embeds_as_it_does(scratch_run):
    """`model.keras` is the `TransformerEmbedder` alone (unit vectors), and
    the export, through `Encoder`, gives its vectors: the test anchors
    retrieve their positives there too."""
    output_dir, printed = scratch_run
    assert f"The export in {output_dir / 'serving' / 'embed' / '1'} embeds" in printed
    assert (output_dir / "text_vocabulary.model").is_file()
    assert (output_dir / "attention.png").is_file()
    model = keras.saving.load_model(output_dir / "model.keras")
    assert isinstance(model, TransformerEmbedder) and model.unit_normalize
    pairs = cipher_pairs(64, 3)[:16]
    encoder = Encoder(output_dir)
    anchors = encoder.encode([a for a, _ in pairs])
    positives = encoder.encode([p for _, p in pairs])
    assert anchors.shape == (16, 64) and anchors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(anchors, axis=1), 1.0, atol=1e-5)
    config = json.loads((output_dir / "config.json").read_text())
    tokenizer = load_run_tokenizer(RunFiles(output_dir), config, "text")
    ids = token_ids(tokenizer, tf.constant([a for a, _ in pairs]), config["max_input_length"])
    np.testing.assert_allclose(anchors, np.asarray(model.embed(ids)), atol=1e-5)
    similarity = np.asarray(encoder.similarity(anchors, positives))
    assert (similarity.argmax(axis=1) == np.arange(16)).mean() >= 0.8


# --- Fine-tuning a converted sentence-transformers checkpoint ---


def test_init_from_a_converted_sentence_transformers_checkpoint(tmp_path):
    """The st_minilm fixture (BERT, mean pooling, Normalize; WordPiece from
    tokenizer.json), converted, then fine-tuned for an epoch on triples
    (a hard negative on every line): its tokenizer and model kept, its
    retrieval before training the converted model's own, its weights
    moved."""
    converted = convert(FIXTURES / "st_minilm", tmp_path / "minilm", export=False)
    texts = json.loads((FIXTURES / "st_minilm" / "reference.json").read_text())["texts"][:28]
    words = sorted({w.strip(".,?!'").lower() for t in texts for w in t.split() if w.isascii()})
    words = [word for word in words if word]
    rng = random.Random(0)
    pairs = []  # with a hard negative: other words
    for _ in range(88):
        chosen = rng.sample(words, 4)
        other = rng.sample(words, 4)
        pairs.append((" ".join(chosen), " ".join(reversed(chosen)), " ".join(other)))
    files = {
        name: write_pairs(tmp_path / f"{name}.tsv", rows)
        for name, rows in (
            ("train", pairs[:64]),
            ("validation", pairs[64:80]),
            ("test", pairs[80:]),
        )
    }
    output_dir = tmp_path / "tuned"
    flags = file_flags(files, output_dir, "--init-from", str(converted), "--no-export")
    printed = run_here(embed.main, [*flags, "--epochs", "1"])
    assert f"Fine-tuning {converted / 'model.keras'}" in printed
    assert "64 training pairs with hard negatives" in printed
    config = json.loads((output_dir / "config.json").read_text())
    assert config["tokenizer"] == "wordpiece"
    assert config["model_preset"] == f"from {converted}"
    vocabulary = "text_vocabulary.json"
    assert (output_dir / vocabulary).read_bytes() == (converted / vocabulary).read_bytes()
    tuned = keras.saving.load_model(output_dir / "model.keras")
    original = keras.saving.load_model(converted / "model.keras")
    assert isinstance(tuned, TransformerEmbedder)
    assert tuned.pooling == original.pooling == "mean" and tuned.unit_normalize
    moved = [
        not np.allclose(a, b)
        for a, b in zip(tuned.get_weights(), original.get_weights(), strict=True)
    ]
    assert sum(moved) > len(moved) // 2
    # Before training: the converted model's own retrieval of the test pairs.
    results = json.loads((output_dir / "evaluation.json").read_text())
    assert results["test_examples"] == results["candidates"] == 8
    tokenizer = load_run_tokenizer(RunFiles(converted), config, "text")

    def vectors(model, texts):
        return np.asarray(model.embed(token_ids(tokenizer, tf.constant(texts), 48)))

    test = [(anchor, positive) for anchor, positive, _ in pairs[80:]]
    candidates = sorted({p for _, p in test})
    targets = np.array([candidates.index(p) for _, p in test])
    for model, expected in ((original, results["before_training"]), (tuned, results)):
        ranks, _ = embed.retrieval_ranks(
            vectors(model, [a for a, _ in test]), vectors(model, candidates), targets
        )
        assert embed.retrieval_results(ranks) == {k: expected[k] for k in RETRIEVAL[1:]}


def test_init_from_a_run_that_is_not_an_embedder_is_refused(tmp_path, cipher_files):
    run_dir = tmp_path / "classifier"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps({"tokenizer": "character"}))
    CharacterTokenizer.train(["abc"]).save(run_dir / "text_vocabulary.txt")
    classifier = build_transformer_classifier(10, 2)
    classifier.save(run_dir / "model.keras")
    flags = file_flags(cipher_files, tmp_path / "run", "--init-from", str(run_dir))
    with pytest.raises(SystemExit) as stop:
        run_here(embed.main, flags)
    assert str(stop.value).startswith(f"error: --init-from {run_dir} is not an embedder's run")
    assert "TransformerClassifier (task 'classification')" in str(stop.value)


# --- The data ---


@pytest.mark.parametrize(
    "lines,problem",
    [
        (["a\tb", "c d", "e\tf"], "line 2 has no tab"),
        (["a\tb", "c\t \t", "e\tf"], "line 2 has an empty column"),
        (["a\tb\tn", "c\td\tm", "e\tf"], "line 3 has 2 columns where line 1 has 3"),
        (["a\tb", "", "c\td\tm", "e\tf"], "line 3 has 3 columns where line 1 has 2"),
    ],
)
def test_a_bad_line_stops_the_run_naming_its_file_and_line(tmp_path, lines, problem):
    path = tmp_path / "pairs.tsv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(SystemExit) as stop:
        embed.main(["--train-file", str(path), "--output-dir", str(tmp_path / "run")])
    assert str(stop.value).startswith(f"error: {path}, {problem}")
    # --skip-bad-lines skips and counts it instead.
    examples, skipped = embed.read_examples(path, skip_bad_lines=True)
    assert skipped == 1 and len(examples) == 2
    assert len({len(example) for example in examples}) == 1


def test_a_file_with_hard_negatives_reads_three_texts_a_line(tmp_path):
    path = tmp_path / "triples.tsv"
    path.write_bytes(b"\xef\xbb\xbfa\tb\tn\tignored\r\nc\td\tm\r\n")
    assert embed.read_examples(path) == ([("a", "b", "n"), ("c", "d", "m")], 0)


def test_pair_batches_put_the_candidates_side_by_side():
    tokenizer = CharacterTokenizer.train(["abcdefghij klmnopqrstuvwxyz"])
    triples = [("a" * n, "b" * (n + 1), "c" * (12 - n)) for n in range(1, 11)]
    dataset = tf.data.Dataset.from_tensor_slices(tuple(list(c) for c in zip(*triples, strict=True)))
    batches = embed.pair_batches(dataset, tokenizer, batch_size=4, max_length=10)
    batches = list(batches.as_numpy_iterator())
    rows = [row for batch in batches for row in zip(*batch, strict=True)]
    assert len(rows) == 10
    for anchor, candidates in rows:
        length = int(np.count_nonzero(anchor))
        n = length  # anchor "a" * n (n <= 10)
        assert candidates.shape[-1] == 2  # the positive, then the negative
        assert np.count_nonzero(candidates[:, 0]) == min(n + 1, 10)
        assert np.count_nonzero(candidates[:, 1]) == min(12 - n, 10)
        assert set(candidates[:, 0]) - {0} == set(tokenizer.tokenize(tf.constant("b")).numpy())
    # A compiled step's batches: full ones padded to one bucket width, both
    # sides alike; evaluation batches to --max-input-length.
    training = embed.pair_batches(
        dataset, tokenizer, batch_size=2, max_length=10, drop_remainder=True, bucket_shapes=True
    )
    for anchors, candidates in training:
        assert anchors.shape[1] == candidates.shape[1] in (8, 10)
        assert anchors.shape[0] == 2
    evaluation = embed.pair_batches(
        dataset, tokenizer, batch_size=4, max_length=10, bucket_shapes=True
    )
    shapes = [(tuple(a.shape), tuple(c.shape)) for a, c in evaluation]
    assert shapes == [((4, 10), (4, 10, 2))] * 2 + [((2, 10), (2, 10, 2))]


def test_retrieval_counts_a_tie_against_the_target():
    anchors = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    candidates = np.array([[2.0, 0.0], [0.0, 3.0], [1.0, 0.0]])
    ranks, first = embed.retrieval_ranks(anchors, candidates, np.array([0, 1, 2]))
    # Anchor 0 ties between candidates 0 and 2: rank 2 for its target 0.
    assert ranks.tolist() == [2, 1, 3] and first.tolist() == [0, 1, 0]
    assert embed.retrieval_results(ranks) == {"recall_at_1": 0.3333, "mrr_at_10": 0.6111}


def test_help_lists_every_flag(capsys):
    with pytest.raises(SystemExit):
        recipe_config.parse_config(embed.EmbedConfig, embed.PRESETS, ["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for field in dataclasses.fields(embed.EmbedConfig):
        assert recipe_config.flag_name(field) in help_text
    assert "--similarity-scale FLOAT the loss multiplies the cosine similarities" in help_text
    assert "(default: 20.0)" in help_text


# --- Large: a killed run, the strategies, JAX ---

MIRRORED = {"LOGICAL_CPUS": "2"}
JAX = {"KERAS_BACKEND": "jax"}
NO_EXPORT = "--no-export"


def recipe_flags(files, output_dir, *extra):
    """The resume tests' flags (three epochs, a checkpoint every two steps,
    `--deterministic`) on the cipher pairs."""
    flags = file_flags(files, output_dir, "--checkpoint-every", "2", "--deterministic", *extra)
    return [*flags, "--epochs", "3"]


@pytest.mark.large
def test_a_killed_run_resumes_as_if_never_stopped(dates_data_dir, tmp_path):
    """On the built-in task (a written date and its ISO form), killed at
    epoch 2, step 3: the same losses, weights and retrieval, bit for bit."""
    reference = finish(
        run(kill_flags(dates_data_dir, tmp_path / "reference", NO_EXPORT), None, "embed")
    )
    assert reference[0] == 0, reference[2][-3000:]
    assert (
        "Chosen for the data (set these flags to choose otherwise): --tokenizer character"
        in (reference[1])
    )
    output_dir = tmp_path / "killed"
    arguments = kill_flags(dates_data_dir, output_dir, NO_EXPORT)
    killed_stdout = kill_and_keep(arguments, output_dir, {}, "embed")
    resumed = finish(run(arguments, None, "embed"))
    assert f"Resuming from {output_dir / 'checkpoints' / NEWEST_BEFORE_KILL}" in resumed[1]
    assert_resumed_as_reference(resumed, killed_stdout, reference, output_dir, RETRIEVAL)


@pytest.mark.large
def test_mirrored_learns_and_a_killed_mirrored_run_resumes(cipher_files, tmp_path):
    """Two replicas on two logical CPUs, each scoring its 16 anchors against
    its 16 candidates: it learns, and killed, it resumes bit for bit."""
    extra = ("--strategy", "mirrored", NO_EXPORT)
    reference = finish(
        run(recipe_flags(cipher_files, tmp_path / "reference", *extra), MIRRORED, "embed")
    )
    assert reference[0] == 0, reference[2][-3000:]
    assert "strategy mirrored (2 replicas)" in reference[1]
    results = json.loads((tmp_path / "reference" / "evaluation.json").read_text())
    assert results["recall_at_1"] >= 0.8 > 0.15 >= results["before_training"]["recall_at_1"]
    output_dir = tmp_path / "killed"
    arguments = recipe_flags(cipher_files, output_dir, *extra)
    killed_stdout = kill_and_keep(arguments, output_dir, MIRRORED, "embed")
    resumed = finish(run(arguments, MIRRORED, "embed"))
    assert (
        f"Resuming from {output_dir / 'checkpoints' / NEWEST_BEFORE_KILL}: epoch 2, step 2"
        in (resumed[1])
    )
    assert_resumed_as_reference(resumed, killed_stdout, reference, output_dir, RETRIEVAL)


@pytest.mark.large
@pytest.mark.xdist_group(CLUSTERS)
def test_a_multi_worker_job_trains_as_mirrored_does(cipher_files, tmp_path):
    """Two workers of one replica each: the same weights on both, and the
    losses of one process with two replicas (`mirrored`), as printed."""
    extra = ("--epochs", "2", NO_EXPORT, "--deterministic")
    mirrored = finish(
        run(
            file_flags(cipher_files, tmp_path / "mirrored", "--strategy", "mirrored", *extra),
            MIRRORED,
            "embed",
        )
    )
    assert mirrored[0] == 0, mirrored[2][-3000:]
    ports = [f"127.0.0.1:{port}" for port in free_ports(2)]
    workers = []
    for index in range(2):
        config = {"cluster": {"worker": ports}, "task": {"type": "worker", "index": index}}
        flags = file_flags(cipher_files, tmp_path / "cluster", "--strategy", "multi_worker", *extra)
        workers.append(run(flags, {"TF_CONFIG": json.dumps(config)}, "embed"))
    results = [finish(worker) for worker in workers]
    for code, _, stderr in results:
        assert code == 0, stderr[-3000:]
    assert "strategy multi_worker (2 replicas)" in results[0][1]
    assert epoch_losses(results[0][1]) == epoch_losses(results[1][1]) == epoch_losses(mirrored[1])
    chief = keras.saving.load_model(tmp_path / "cluster" / "model.keras").get_weights()
    other = keras.saving.load_model(tmp_path / "cluster" / ".worker1" / "model.keras").get_weights()
    for a, b in zip(chief, other, strict=True):
        np.testing.assert_array_equal(a, b)
    results = json.loads((tmp_path / "cluster" / "evaluation.json").read_text())
    assert results["recall_at_1"] > results["before_training"]["recall_at_1"] + 0.5


@pytest.mark.large
def test_on_jax_it_learns_exports_and_trains_data_parallel_as_one_device(cipher_files, tmp_path):
    """On JAX: a run learns and ends with an export (made on TensorFlow)
    that gives, in a fresh process, the vectors of the JAX model; and
    `data_parallel` on two host devices computes every batch whole (every
    anchor against every candidate): one device's losses, to 2e-3."""
    one_dir = tmp_path / "one"
    one = finish(run(file_flags(cipher_files, one_dir), JAX, "embed"))
    assert one[0] == 0, one[2][-3000:]
    assert "Exporting with TensorFlow" in one[1]
    results = json.loads((one_dir / "evaluation.json").read_text())
    assert results["recall_at_1"] >= 0.8 > 0.15 >= results["before_training"]["recall_at_1"]
    texts = [a for a, _ in cipher_pairs(64, 3)[:8]]
    answers = ask_a_fresh_process(
        {
            str(one_dir / "serving" / "embed" / "1"): [
                ("embed", {"text": np.array([t.encode() for t in texts], dtype=object)})
            ]
        },
        tmp_path,
    )
    served = answers[str(one_dir / "serving" / "embed" / "1")]["answers"][0]["embeddings"]
    config = json.loads((one_dir / "config.json").read_text())
    tokenizer = load_run_tokenizer(RunFiles(one_dir), config, "text")
    ids = token_ids(tokenizer, tf.constant(texts), config["max_input_length"])
    model = keras.saving.load_model(one_dir / "model.keras")
    np.testing.assert_allclose(served, np.asarray(model.embed(ids)), atol=1e-5)

    two_devices = {
        **JAX,
        "XLA_FLAGS": f"--xla_force_host_platform_device_count=2 {os.environ.get('XLA_FLAGS', '')}",
    }
    two = finish(
        run(
            file_flags(cipher_files, tmp_path / "two", "--strategy", "data_parallel", NO_EXPORT),
            two_devices,
            "embed",
        )
    )
    assert two[0] == 0, two[2][-3000:]
    assert "strategy data_parallel (2 replicas)" in two[1]
    losses = [float(loss) for loss in epoch_losses(two[1])]
    assert losses == pytest.approx([float(loss) for loss in epoch_losses(one[1])], abs=2e-3)


@pytest.mark.large
def test_a_killed_jax_run_resumes_as_if_never_stopped(cipher_files, tmp_path):
    """On JAX, killed at epoch 2, step 3 and started again: the same
    losses, weights and retrieval, bit for bit."""
    reference = finish(
        run(recipe_flags(cipher_files, tmp_path / "reference", NO_EXPORT), JAX, "embed")
    )
    assert reference[0] == 0, reference[2][-3000:]
    output_dir = tmp_path / "killed"
    arguments = recipe_flags(cipher_files, output_dir, NO_EXPORT)
    killed_stdout = kill_and_keep(arguments, output_dir, JAX, "embed")
    resumed = finish(run(arguments, JAX, "embed"))
    assert (
        f"Resuming from {output_dir / 'checkpoints' / NEWEST_BEFORE_KILL}: epoch 2, step 2"
        in (resumed[1])
    )
    assert_resumed_as_reference(resumed, killed_stdout, reference, output_dir, RETRIEVAL)
