"""Every recipe on a user's own text files: the splits held out, the choices
made for the data, and bad files refused with a message and exit status 1."""

import contextlib
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from keras_attention.data import dates, text_files
from keras_attention.data.tokenizers import SubwordTokenizer
from keras_attention.recipes import classify, language_model, translate

SMALL_RUN = ["--epochs", "1", "--batch-size", "16", "--max-input-length", "24"]


@pytest.fixture(scope="module")
def examples():
    """Written dates: the text, the ISO date and the locale that wrote it."""
    return list(dates.generate("train", 400, locales=("en", "fr", "de", "es")))


def write_lines(path, lines, header=b""):
    """Writes `lines` as a Windows editor would: a byte-order mark and CRLF."""
    path.write_bytes(header + "".join(f"{line}\r\n" for line in lines).encode())
    return path


def readme_quick_start_flags():
    """The flags of the README's quick-start command (`--train-file pairs.tsv
    --output-dir runs/mine`)."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    command = "python -m keras_attention.recipes.translate "
    (line,) = [line for line in readme.splitlines() if command + "--train-file" in line]
    return line.split(command)[1].split()


@pytest.fixture(scope="module")
def quick_start_run(examples, tmp_path_factory):
    """The README's quick-start command, on a small file and with a short
    run's flags added: `(the run's folder, what it printed)`, for the tests
    of what it chose and of its CTranslate2 export."""
    folder = tmp_path_factory.mktemp("quick_start")
    pairs = write_lines(
        folder / "pairs.tsv",
        [f"{e.source}\t{e.target}\tCC-BY 2.0 attribution #{i}" for i, e in enumerate(examples)],
        header=b"\xef\xbb\xbf",
    )
    flags = readme_quick_start_flags()
    assert flags == ["--train-file", "pairs.tsv", "--output-dir", "runs/mine"]
    output_dir = folder / "runs" / "mine"
    flags = [str(pairs) if flag == "pairs.tsv" else flag for flag in flags]
    flags = [str(output_dir) if flag == "runs/mine" else flag for flag in flags]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        translate.main([*flags, *SMALL_RUN, "--no-tune-decoding"])
    return output_dir, printed.getvalue()


def test_the_readme_quick_start_chooses_for_the_data_and_serves_it(quick_start_run):
    """The README's command, from the folder that has `pairs.tsv`."""
    output_dir, printed = quick_start_run
    assert "held out of" in printed
    assert (
        "Chosen for the data (set these flags to choose otherwise): --tokenizer subword, "
        "--vocabulary-size 500, --model-preset tiny, --final-decay 0.2, --beam-size 4"
    ) in printed
    config = json.loads((output_dir / "config.json").read_text())
    assert (config["tokenizer"], config["model_preset"], config["beam_size"]) == (
        "subword",
        "tiny",
        4,
    )
    results = json.loads((output_dir / "evaluation.json").read_text())
    assert results["decoding"] == "beam 4"
    assert 0 <= results["sacrebleu"] <= 100 and 0 <= results["chrf"] <= 100
    assert results["chrf_signature"].startswith("nrefs:1")
    # Held out by a hash of the source: about 5% each, no source in two splits.
    assert 8 <= results["test_examples"] <= 40
    # The export, with two SentencePiece models, translates as the model did.
    assert "translates these differently" not in printed
    source = SubwordTokenizer.load(output_dir / "source_vocabulary.model")
    target = SubwordTokenizer.load(output_dir / "target_vocabulary.model")
    assert source.vocabulary != target.vocabulary
    assert (output_dir / "attention.png").is_file()
    lines = (output_dir / "test_translations.tsv").read_text().splitlines()
    assert lines[0] == "source\treference\ttranslation"
    assert len(lines) == 1 + results["test_examples"]
    # What the README's docker command mounts: the models and their batching.
    serving = output_dir / "serving"
    assert 'base_path: "/models/translate"' in (serving / "models.config").read_text()
    assert "max_batch_size { value: 32 }" in (serving / "batching_parameters.txt").read_text()


@pytest.mark.large  # three exports, two CTranslate2 models and a benchmark's processes
def test_the_serving_benchmark_runs_on_a_subword_run(quick_start_run, tmp_path):
    """`benchmarks/serving_speed.py` on a run with SentencePiece on both
    sides, as its command runs it (each part in a process of its own: the
    XLA programs it compiles stay out of this worker): our plain and XLA
    exports' `translate_batch` and CTranslate2's in float32 and int8 (made
    once, for both parts), each its SentencePiece, all timed; one
    sentence's latency, and the XLA export's as TF Serving runs it; a
    Translator's batches of tokens and of sentences; BLEU of each on the
    test split's first sentences (nothing about speed is asserted); and the
    run of OPUS-MT's sizes the benchmark races too."""
    from benchmarks import serving_speed
    from keras_attention.export.run import load_run
    from keras_attention.run_files import RunFiles

    output_dir, _ = quick_start_run
    sentences = serving_speed.test_sources(output_dir, 4)  # what `--sentences 4` races
    assert len(sentences) == 4 and all(sentences)
    figures = tmp_path / "serving_speed.json"
    command = [sys.executable, "-m", "benchmarks.serving_speed", str(output_dir)]
    sizes = ["--sentences", "4", "--repeats", "1", "--bleu-sentences", "4"]
    parts = ["--part", "speed", "--part", "bleu"]
    searches = ["--beam-sizes", "4", "--batch-sizes", "2"]
    shared = ["--contenders-dir", str(tmp_path / "contenders")]
    subprocess.run(
        [*command, *sizes, *parts, *searches, *shared, "--json", str(figures)],
        cwd=Path(__file__).resolve().parents[2],
        check=True,
        timeout=900,
    )
    results = json.loads(figures.read_text())
    assert results["command"].startswith("python -m benchmarks.serving_speed ")
    assert results["commit"] and results["machine"]["cpu"]
    (row,) = results["rows"]
    assert (row["decoding"], row["batch_size"]) == ("beam 4", 2)
    contenders = ("ours", "ours_xla", "ours_xla_int8", "ctranslate2_float32", "ctranslate2_int8")
    for name in contenders:
        assert row[name] > 0, name
    assert row["xla_over_float32"] == row["ours_xla"] / row["ctranslate2_float32"]
    assert row["xla_int8_over_int8"] == row["ours_xla_int8"] / row["ctranslate2_int8"]
    for share in ("same_answers", "int8_same_answers", "their_int8_same_answers"):
        assert 0 <= row[share] <= 1
    # (and the XLA export as TF Serving runs it: a TF1 session)
    latency_rows = results["latency"]
    assert [r["contender"] for r in latency_rows] == [*contenders, "ours_xla_served"]
    assert all(0 < r["p50_ms"] <= r["p99_ms"] for r in latency_rows)
    batching = results["token_batching"]
    assert batching["sentences"] == 4 and batching["tokens_per_batch"] > 32
    assert batching["examples_per_second"] > 0 and batching["tokens_per_second"] > 0
    bleu_rows = results["bleu"]
    assert [r["contender"] for r in bleu_rows] == list(contenders)
    assert all(r["sentences"] == 4 and 0 <= r["sacrebleu"] <= 100 for r in bleu_rows)
    # The bleu part's process found the speed part's exports: none made twice.
    for name in serving_speed.EXPORTS:
        assert [p.name for p in (tmp_path / "contenders" / "serving" / name).iterdir()] == ["1"]
    with pytest.raises(SystemExit, match="holds the contenders of .*, not of"):
        serving_speed.contenders_folder(tmp_path / "contenders", tmp_path)

    opus_run = serving_speed.opus_mt_sized_run(output_dir, tmp_path / "opus_mt")
    model, config, _, tokenizer = load_run(opus_run)
    sizes = model.get_config()
    assert [sizes[k] for k in ("num_layers", "model_dim", "num_heads")] == [6, 512, 8]
    assert sizes["intermediate_dim"] == 2048
    assert sizes["target_vocabulary_size"] == tokenizer("target").vocabulary_size
    assert config == json.loads(RunFiles(output_dir).config.read_text())


def test_a_subword_run_exports_to_ctranslate2_with_its_sentencepiece_models(quick_start_run):
    """CTranslate2 takes pieces: its model folder carries the run's two
    SentencePiece models, which give them (word-for-word equality with our
    model: tests/export/test_ctranslate2.py)."""
    import ctranslate2
    import sentencepiece

    output_dir, _ = quick_start_run
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "keras_attention.export",
            str(output_dir),
            "--format",
            "ctranslate2",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    folder = output_dir / "ctranslate2"
    source = sentencepiece.SentencePieceProcessor(
        model_file=str(folder / "source_vocabulary.model")
    )
    target = sentencepiece.SentencePieceProcessor(
        model_file=str(folder / "target_vocabulary.model")
    )
    translator = ctranslate2.Translator(str(folder), intra_threads=1)
    (answer,) = translator.translate_batch([source.encode("29 novembre 2026", out_type=str)])
    assert isinstance(target.decode(answer.hypotheses[0]), str)
    assert set(answer.hypotheses[0]) <= {
        target.id_to_piece(i) for i in range(target.get_piece_size())
    }


@pytest.mark.large  # a whole recipe run (see docs/testing.md)
def test_classify_on_files_with_string_labels(examples, tmp_path, capsys):
    train = write_lines(tmp_path / "train.tsv", [f"{e.source}\t{e.locale}" for e in examples])
    test = write_lines(
        tmp_path / "test.tsv",
        [f"{e.source}\t{e.locale}" for e in dates.generate("test", 40, locales=("fr", "de"))],
    )
    output_dir = tmp_path / "run"
    flags = ["--train-file", str(train), "--test-file", str(test), "--output-dir", str(output_dir)]
    classify.main([*flags, *SMALL_RUN])
    printed = capsys.readouterr().out

    assert f"test 40 ({test})" in printed and "validation" in printed
    assert json.loads((output_dir / "labels.json").read_text()) == ["de", "en", "es", "fr"]
    assert json.loads((output_dir / "evaluation.json").read_text())["test_examples"] == 40
    served = tf.saved_model.load(str(output_dir / "serving" / "classify" / "1"))
    answer = served.signatures["serving_default"](text=tf.constant(["29 novembre 2026"]))
    assert answer["label"].numpy()[0].decode() in ("de", "en", "es", "fr")


def interface_messages(count, seed=0):
    """`count` English -> French pairs of made-up interface messages, most
    with placeholders (`%s`, `%d`, `{name}`, `<b>...</b>`) that the French
    keeps, some moved to another place in the sentence."""
    rng = np.random.default_rng(seed)
    words = [("open", "ouvrir"), ("close", "fermer"), ("save", "enregistrer"), ("copy", "copier")]
    things = [("the file", "le fichier"), ("the folder", "le dossier"), ("a page", "une page")]
    templates = [
        ("{verb} {thing}", "{verb} {thing}"),
        ("{verb} {thing} %s", "{verb} {thing} %s"),
        ("Cannot {verb} %s", "Impossible de {verb} %s"),
        ("{verb} %d times", "{verb} %d fois"),
        ("<b>{verb}</b> {thing}", "<b>{verb}</b> {thing}"),
        ("{verb} {{name}} now", "{verb} maintenant {{name}}"),
    ]
    pairs = set()
    while len(pairs) < count:
        (verb, verbe), (thing, chose) = words[rng.integers(4)], things[rng.integers(3)]
        english, french = templates[rng.integers(len(templates))]
        number = f" {rng.integers(1000)}"  # so that the pairs are many
        pairs.add(
            (
                english.format(verb=verb, thing=thing) + number,
                french.format(verb=verbe, thing=chose) + number,
            )
        )
    return sorted(pairs)


@pytest.mark.large  # a whole recipe run (see docs/testing.md)
def test_a_shared_vocabulary_and_placeholders_as_tokens_and_counted(tmp_path):
    """`--shared-vocabulary`: one vocabulary, one embedding matrix for
    source, target and output; the placeholders frequent in the training
    file each one token; the test split's placeholders kept or lost are
    counted."""
    pairs = write_lines(tmp_path / "pairs.tsv", [f"{e}\t{f}" for e, f in interface_messages(600)])
    output_dir = tmp_path / "run"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        translate.main(
            ["--train-file", str(pairs), "--output-dir", str(output_dir), *SMALL_RUN]
            + ["--shared-vocabulary", "--no-tune-decoding", "--no-export"]
        )
    printed = printed.getvalue()
    source = (output_dir / "source_vocabulary.model").read_bytes()
    assert source == (output_dir / "target_vocabulary.model").read_bytes()
    vocabulary = SubwordTokenizer.load(output_dir / "source_vocabulary.model").vocabulary
    assert {"%s", "%d", "{name}", "<b>", "</b>"} <= set(vocabulary)
    model = keras.saving.load_model(output_dir / "model.keras")
    assert model.share_embeddings and model.output_projection is None  # one matrix

    rows = [
        line.split("\t")
        for line in (output_dir / "test_translations.tsv").read_text().splitlines()[1:]
    ]
    with_placeholders = [(s, t) for s, _, t in rows if re.search(r"%[sd]|\{name\}|<b>", s)]
    kept = sum(
        sorted(re.findall(r"%[sd]|\{name\}|</?b>", s))
        == sorted(re.findall(r"%[sd]|\{name\}|</?b>", t))
        for s, t in with_placeholders
    )
    results = json.loads((output_dir / "evaluation.json").read_text())
    assert results["placeholders"] == {"pairs": len(with_placeholders), "kept": kept}
    assert len(with_placeholders) > 10
    assert f"kept whole in {kept:,} of the {len(with_placeholders):,} test translations" in printed


@pytest.mark.large  # a whole recipe run (see docs/testing.md)
def test_language_model_on_a_file_of_lines(examples, tmp_path, capsys):
    corpus = write_lines(tmp_path / "corpus.txt", [e.source for e in examples] + [""])
    output_dir = tmp_path / "run"
    language_model.main(["--train-file", str(corpus), "--output-dir", str(output_dir), *SMALL_RUN])
    assert "--tokenizer subword" in capsys.readouterr().out
    results = json.loads((output_dir / "evaluation.json").read_text())
    assert results["perplexity"] > 1
    assert (output_dir / "text_vocabulary.model").is_file()


@pytest.mark.large  # a whole recipe run (see docs/testing.md)
def test_any_tfds_data_set_by_name_and_keys(tmp_path):
    output_dir = tmp_path / "run"
    flags = [
        "--dataset",
        "tfds:ag_news_subset",
        "--text-key",
        "description",
        "--label-key",
        "label",
        "--data-dir",
        str(tmp_path / "tfds"),
        "--output-dir",
        str(output_dir),
        "--vocabulary-size",
        "60",
        *SMALL_RUN,
    ]
    with tfds.testing.mock_data(num_examples=48, policy=tfds.testing.MockPolicy.USE_CODE):
        classify.main(flags)
    labels = json.loads((output_dir / "labels.json").read_text())
    assert labels == ["World", "Sports", "Business", "Sci/Tech"]
    config = json.loads((output_dir / "config.json").read_text())
    assert (config["tokenizer"], config["model_preset"]) == ("subword", "tiny")


@pytest.mark.parametrize(
    "recipe,content,message",
    [
        ("translate", None, "missing.tsv: no such file"),
        ("translate", b"", "is empty"),
        ("translate", b"one\tun\ntwo deux\n", "train.tsv, line 2 has no tab"),
        ("translate", b"one\tun\nd\xe9j\xe0\tdeja\n", "train.tsv, line 2 is not UTF-8"),
        ("translate", b"one\tun\n" * 10, "too few examples (10) to hold out"),
        ("classify", b"good\tpos\nbad\tneg\n", "test.tsv, line 1 has the label 'neutral'"),
    ],
)
def test_bad_files_end_with_a_message_and_status_1(recipe, content, message, tmp_path):
    """One case through the command line (status 1, the message, no
    traceback); the others call the same `main` in this process."""
    train = tmp_path / ("missing.tsv" if content is None else "train.tsv")
    if content is not None:
        train.write_bytes(content)
    flags = ["--train-file", str(train), "--output-dir", str(tmp_path / "run")]
    if recipe == "classify":
        (tmp_path / "test.tsv").write_text("so so\tneutral\n")
        (tmp_path / "validation.tsv").write_text("good\tpos\n")
        flags += ["--test-file", str(tmp_path / "test.tsv")]
        flags += ["--validation-file", str(tmp_path / "validation.tsv")]
    if content is not None:
        with pytest.raises(SystemExit, match=re.escape(message)):
            {"translate": translate, "classify": classify}[recipe].main(flags)
        return
    result = subprocess.run(
        [sys.executable, "-m", f"keras_attention.recipes.{recipe}", *flags],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1, result.stderr[-2000:]
    assert message in result.stderr and "Traceback" not in result.stderr


def test_bad_lines_can_be_skipped_and_are_counted(examples, tmp_path, capsys):
    lines = [f"{e.source}\t{e.target}" for e in examples]
    lines[5] = lines[5].replace("\t", " ")
    pairs = write_lines(tmp_path / "pairs.tsv", lines)
    flags = ["--train-file", str(pairs), "--output-dir", str(tmp_path / "run")]
    with pytest.raises(SystemExit, match="pairs.tsv, line 6 has no tab"):
        translate.main(flags)
    # Stopped before the run wrote anything but its config.
    assert not (tmp_path / "run" / "checkpoints").exists()
    config = translate.TranslateConfig(train_file=str(pairs), skip_bad_lines=True)
    recipe = translate.TranslateRecipe(config)
    splits = recipe.read_files(lambda path: text_files.read_columns(path, skip_bad_lines=True))
    assert "skipped 1 lines of" in capsys.readouterr().out
    assert sum(len(split) for split in splits.values()) == len(examples) - 1


def test_files_need_a_training_file(capsys):
    with pytest.raises(SystemExit):
        translate.main(["--test-file", "test.tsv"])
    assert "--test-file needs --train-file" in capsys.readouterr().err
