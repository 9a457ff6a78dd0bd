"""The benchmarks still run (smoke mode). Nothing about speed is asserted: only
that every section ran, for every contender, and wrote sane figures."""

import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import contenders, measure, run

REPOSITORY = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    output = tmp_path_factory.mktemp("benchmarks") / "results.json"
    # oneDNN off, as TensorFlow leaves it by default on AMD CPUs: there its
    # allocator keeps no statistics, and the run must measure memory anyway.
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--smoke", "--json", str(output)],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        env={**os.environ, "TF_ENABLE_ONEDNN_OPTS": "0"},
    )
    assert result.returncode == 0, result.stderr[-5000:]
    for figure in ("attention_memory.png", "sliding_window.png"):  # beside the JSON file
        assert (output.parent / figure).stat().st_size > 0, figure
    return json.loads(output.read_text()), result.stdout


def run_benchmark(tmp_path, name, *flags, timeout=None):
    """`python -m benchmarks NAME --smoke FLAGS --json tmp_path/NAME.json`,
    in a process of its own, which must succeed: the results it wrote, and
    what it printed."""
    output = tmp_path / f"{name}.json"
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks", name, "--smoke", *flags, "--json", str(output)],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stderr[-5000:]
    return json.loads(output.read_text()), result.stdout


# The benchmarks' smoke run (minutes): `pytest -m large`.
@pytest.mark.large
def test_every_training_contender_ran(smoke):
    results, stdout = smoke
    for kind in ("encoder", "decoder"):
        rows = results[f"{kind}_training_step"]
        ran = {(row["contender"], row["xla"]) for row in rows}
        assert ran == {(c, x) for c in contenders.CONTENDERS for x in (True, False)}
        assert all(row["ms_per_step"] > 0 and row["gflops"] > 0 for row in rows)
        assert all(row["matmul_peak_gflops"] > 0 and row["xla_matmul_gflops"] > 0 for row in rows)
        ours = [row for row in rows if row["contender"] == run.OURS]
        assert all(row["ours_speedup"] == 1 for row in ours)
        assert f"{kind} training step" in stdout
    on_jax = results["encoder_training_step_jax"]
    assert {row["contender"] for row in on_jax} == set(contenders.CONTENDERS)
    assert all(row["backend"] == "jax" and row["xla"] for row in on_jax)
    assert all(row["ms_per_step"] > 0 and row["jax_speedup"] > 0 for row in on_jax)
    assert "encoder training step (2 layers) on the JAX backend" in stdout
    assert_provenance(results, "python -m benchmarks.run --smoke")


# The benchmarks' smoke run (minutes): `pytest -m large`.
@pytest.mark.large
def test_self_attention_decoding_and_serving_ran(smoke):
    results, stdout = smoke
    ran = [
        (row["length"], row["causal"], row["contender"])
        for row in results["self_attention"]
        if not row.get("skipped")
    ]
    chunked, dense, peer = "keras_attention_chunked", "keras_attention", "keras_core"
    assert ran == [
        (64, False, chunked),
        (64, False, dense),
        (64, False, peer),
        (128, False, chunked),  # the dense ones are not run past `dense_up_to`
        (64, True, chunked),
        (64, True, dense),
    ]
    for row in results["self_attention"]:
        assert row.get("skipped") or (row["ms"] > 0 and row["peak_mib"] >= 0)
        assert row.get("skipped") or row["memory_measure"] == measure.PEAK_RSS
    assert [row["output_tokens"] for row in results["greedy_decoding"]] == [4, 8]
    assert [row["batch_size"] for row in results["serving"]] == [1, 32]
    for serving in results["serving"]:
        assert serving["exported_ms"] > 0 and serving["in_process_ms"] > 0
        assert serving["exported_with_options_ms"] > 0
    assert "exported/in-process" in stdout
    generation = results["generation"]
    assert [row["new_tokens"] for row in generation] == [4, 8]
    for row in generation:
        for name in ("ours", "ours_xla", "keras_hub", "keras_hub_xla"):
            assert row[f"{name}_tokens_per_s"] > 0
    assert "ours against KerasHub GPT2CausalLM" in stdout


# The benchmarks' smoke run (minutes): `pytest -m large`.
@pytest.mark.large
def test_the_modern_attention_section_ran(smoke):
    results, stdout = smoke
    modern = results["modern_attention"]
    # The cache holds only the key/value heads: H_kv / H of multi-head's.
    assert [row["num_key_value_heads"] for row in modern["kv_cache"]] == [4, 2, 1]
    for row in modern["kv_cache"]:
        assert row["vs_multi_head"] == pytest.approx(row["expected"])
    assert [row["new_tokens"] for row in modern["generation"]] == [4, 8]
    for row in modern["generation"]:
        for name in ("ours", "ours_xla", "keras_hub", "keras_hub_xla"):
            assert row[f"{name}_tokens_per_s"] > 0
    assert [(row["length"], row["contender"]) for row in modern["window"]] == [
        (128, "full causal"),
        (128, "window"),
        (256, "full causal"),
        (256, "window"),
    ]
    assert all(row["ms"] > 0 for row in modern["window"])
    assert [row["positions"] for row in modern["extrapolation"]] == ["alibi"]
    for row in modern["extrapolation"]:
        assert 1 < row["perplexity_32"] < 1000 and 1 < row["perplexity_64"] < 1000
    assert "against KerasHub `LlamaCausalLM`" in stdout


# Trains two small tokenizers and races them (about a minute): `pytest -m large`.
@pytest.mark.large
def test_the_byte_level_bpe_benchmark_runs_and_agrees_with_tokenizers(tmp_path):
    """`benchmarks.bpe_tokenizer --smoke`: both pre-tokenizers raced, every
    text's ids equal to `tokenizers`' (no torch needed)."""
    results, _ = run_benchmark(tmp_path, "bpe_tokenizer")
    assert results["commit"] and results["machine"]["cpu"]
    assert [row["pre_tokenizer"] for row in results["rows"]] == ["gpt2", "llama3"]
    for row in results["rows"]:
        assert row["ids_equal"] == f"{row['texts']} of {row['texts']}"
        assert row["ratio"] > 0


# Converts the tiny fixtures and races them (about 2 minutes): `pytest -m large`.
@pytest.mark.large
def test_the_pretrained_benchmark_runs_without_torch(tmp_path):
    """`benchmarks.pretrained --smoke` with no Python that has torch: the
    transformers contender is skipped with a line that says so, and the
    other contenders give the same text (Llama) and mostly the same
    translations (Marian: the fixture's sentences end where they like, and
    our export's length penalty is not CTranslate2's)."""
    results, stdout = run_benchmark(
        tmp_path, "pretrained", "--hf-python", "", "--work-dir", str(tmp_path / "work")
    )
    assert "transformers (torch): skipped" in stdout
    assert results["command"].startswith("python -m benchmarks.pretrained --smoke")
    assert results["commit"] and results["date"] and results["machine"]["cpu"]
    assert len(results["load_average_before"]) == len(results["load_average_after"]) == 3
    (row,) = results["llama"]["rows"]
    assert row["reference"] == "keras_hub" and row["export_text_equal"]
    assert row["keras_hub_tokens"] == row["new_tokens"]
    assert row["ours_export_xla_over_keras_hub"] > 0
    assert "ours_export_xla_over_transformers" not in row
    (row,) = results["marian"]["rows"]
    assert row["reference"] == "ctranslate2" and row["ours_export_xla_over_ctranslate2"] > 0
    assert 2 * row["ours_export_xla_same_as_reference"] > len(results["marian"]["sources"])
    assert "the peer's time over ours" in stdout


# Converts and exports the tiny BERT fixture (under a minute): `pytest -m large`.
@pytest.mark.large
def test_the_bert_classifier_benchmark_runs_without_torch(tmp_path):
    """`benchmarks.bert_classifier --smoke` with no Python that has torch:
    the transformers column is skipped with a line that says so, and our
    export is timed at each batch size."""
    results, stdout = run_benchmark(
        tmp_path, "bert_classifier", "--hf-python", "", "--work-dir", str(tmp_path / "work")
    )
    assert "transformers (torch): skipped" in stdout
    assert results["command"].startswith("python -m benchmarks.bert_classifier --smoke")
    assert results["commit"] and results["date"] and results["machine"]["cpu"]
    rows = results["bert"]["rows"]
    assert [row["batch_size"] for row in rows] == [1, 4]
    assert all(row["ours_texts_per_s"] > 0 and "ours_over_transformers" not in row for row in rows)
    assert "transformers' time over our export's" in stdout


# Converts and exports the tiny sentence-transformers fixture twice (under a minute):
# `pytest -m large`.
@pytest.mark.large
def test_the_embeddings_benchmark_runs_without_torch(tmp_path):
    """`benchmarks.embeddings --smoke` with no Python that has torch: the
    sentence-transformers column is skipped with a line that says so; both
    exports are timed at each batch size and length, agree, and start."""
    results, stdout = run_benchmark(
        tmp_path, "embeddings", "--hf-python", "", "--work-dir", str(tmp_path / "work")
    )
    assert "transformers (torch): skipped" in stdout
    assert results["command"].startswith("python -m benchmarks.embeddings --smoke")
    rows = results["embeddings"]["rows"]
    assert [row["batch_size"] for row in rows] == [1, 4, 1, 4]
    assert all(row["ours_texts_per_s"] > 0 and row["xla_texts_per_s"] > 0 for row in rows)
    assert all(row["largest_cosine_distance"] < 1e-5 for row in rows)
    assert [start["export"] for start in results["embeddings"]["starts"]] == ["graph", "XLA"]
    assert "sentence-transformers' time over our export's" in stdout


PEAK_OF_64_MIB = """
import json, tensorflow as tf
from benchmarks import measure
step = tf.function(lambda: tf.reduce_sum(tf.random.uniform((16, 1024, 1024))))
step()
print(json.dumps(measure.peak_memory(lambda: step().numpy())))
"""


@pytest.mark.parametrize("onednn, expected", [("1", measure.TF_ALLOCATOR), ("0", measure.PEAK_RSS)])
def test_peak_memory_is_measured_with_onednn_on_and_off(onednn, expected):
    """oneDNN on: TensorFlow's allocator statistics; off (TensorFlow's
    default on AMD CPUs), where they raise: the peak resident set. Either
    way a step that makes a 64 MiB tensor adds about that much (the
    resident set may already hold a few of its pages)."""
    result = subprocess.run(
        [sys.executable, "-c", PEAK_OF_64_MIB],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        env={**os.environ, "TF_ENABLE_ONEDNN_OPTS": onednn},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    mib, how = json.loads(result.stdout.splitlines()[-1])
    assert how == expected
    assert 60 <= mib < 4 * 64


def test_every_result_says_which_machine_measured_it(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nmodel name\t: AMD EPYC 9B14\nflags\t\t: fpu sse avx2 avx avx512f\n"
    )
    machine = measure.machine(cpuinfo)
    assert machine["cpu"] == "AMD EPYC 9B14"
    assert machine["avx_flags"] == ["avx", "avx2", "avx512f"]
    assert machine["cpus"] >= 1
    from benchmarks import report

    line = report.describe({**machine, "cpus": 2, "TF_ENABLE_ONEDNN_OPTS": "0"})
    assert (
        line == "CPU: AMD EPYC 9B14 (AVX flags: avx avx2 avx512f), 2 cores, TF_ENABLE_ONEDNN_OPTS=0"
    )
    assert measure.machine()["cpu"]  # this machine's, from /proc/cpuinfo


def test_every_results_file_says_how_when_and_where_it_was_measured():
    """The docs quote these files (tests/test_docs.py), so each says its
    command, date, commit and CPU; where the command that wrote it did not
    record them, `filled_from_git` says what was taken from git."""
    folder = REPOSITORY / "benchmarks"
    for path in [*sorted(folder.glob("results*.json")), folder / "translation_peer.json"]:
        results = json.loads(path.read_text())
        for recorded in results if isinstance(results, list) else [results]:
            assert recorded["command"].startswith("python -m benchmarks"), path.name
            assert re.match(r"\d{4}-\d{2}-\d{2}", recorded["date"]), path.name
            assert re.match(r"[0-9a-f]{40}", recorded["commit"]), path.name
            assert recorded["machine"]["cpu"] and recorded["machine"]["cpus"], path.name
    from benchmarks import report

    text = report.report(json.loads((folder / "results.json").read_text()))
    assert text.startswith("CPU: AMD EPYC (AVX-512), 2 cores (flags and oneDNN not recorded)")


def assert_provenance(results, command):
    """A results file as the command wrote it says how, when and where it
    was measured: what tests/test_docs.py reads beside its figures."""
    assert results["command"].startswith(command)
    assert re.match(r"\d{4}-\d{2}-\d{2}T", results["date"])
    assert re.match(r"[0-9a-f]{40}", results["commit"])
    assert results["machine"]["cpu"] and results["machine"]["cpus"] >= 1


def test_flop_counts_match_a_hand_count():
    # One encoder layer's forward pass at B=1, T=2, D=4, FF=8, in multiply-adds:
    # Q, K, V and output projections 4 * (2*4*4) = 128; Q K^T and weights V
    # 2 * (2*2*4) = 32; feed-forward 2 * (2*4*8) = 128. FLOPs = 2 * 288.
    layer_forward = 2 * 288
    sizes = dict(batch_size=1, length=2, model_dim=4, num_heads=2, intermediate_dim=8)
    assert run.encoder_flops(**sizes) == 3 * run.NUM_LAYERS * layer_forward
    # Cross-attention adds Q and output projections over the target, K and V
    # over the (equally long) context, and its two products: 128 + 32.
    assert run.decoder_flops(**sizes) == 3 * run.NUM_LAYERS * (layer_forward + 2 * 160)


# The benchmarks' smoke run (minutes): `pytest -m large`.
@pytest.mark.large
def test_the_report_renders_every_section(smoke):
    from benchmarks import report

    results, _ = smoke
    text = report.report(results)
    assert text.startswith(report.describe(results["machine"]))
    for title in (
        "Encoder training step",
        "Decoder training step",
        "Self-attention alone",
        "Greedy generation, decoder-only",
        "Greedy generation, our `modern` preset",
        "Length extrapolation",
    ):
        assert f"#### {title}" in text
    assert text.count("| keras_hub |") == 2 * len(results["encoder_training_step"]) // 3
    assert report.xla_bound(results, "encoder") > 0


# Two fresh TensorFlow processes (about a minute): `pytest -m large`.
@pytest.mark.large
def test_the_onednn_race_runs_each_setting_in_its_own_process(tmp_path):
    """`benchmarks.onednn --smoke`: the encoder race once with oneDNN off,
    once on, each process's TensorFlow loaded with its setting (the rows
    say which), and the ratios summed up for each."""
    results, stdout = run_benchmark(tmp_path, "onednn")
    settings = [row["TF_ENABLE_ONEDNN_OPTS"] for row in results["rows"]]
    assert sorted(set(settings)) == ["0", "1"]
    for setting in ("0", "1"):
        contenders_run = {
            (row["contender"], row["xla"])
            for row in results["rows"]
            if row["TF_ENABLE_ONEDNN_OPTS"] == setting
        }
        assert contenders_run == {(c, x) for c in contenders.CONTENDERS for x in (True, False)}
    assert all(row["gflops"] > 0 for row in results["rows"])
    summary = {(row["TF_ENABLE_ONEDNN_OPTS"], row["xla"]) for row in results["summary"]}
    assert summary == {("0", True), ("0", False), ("1", True), ("1", False)}
    assert all(row["ours_over_keras_hub"] > 0 for row in results["summary"])
    assert results["machine"]["cpu"] and "ours over KerasHub's" in stdout
    assert_provenance(results, "python -m benchmarks.onednn --smoke")


def test_one_section_runs_alone_and_keeps_its_rows(tmp_path, capsys):
    """`benchmarks self_attention --json` and `benchmarks modern_attention
    --parts window --json`, at smoke sizes: only what was asked is run and
    written (and a part that does not exist is refused by name)."""
    from benchmarks import __main__ as runner

    rows_file = tmp_path / "self_attention.json"
    runner.main(["self_attention", "--smoke", "--json", str(rows_file)])
    results = json.loads(rows_file.read_text())
    assert_provenance(results, "python -m benchmarks.self_attention --smoke")
    assert {row["contender"] for row in results["rows"]} == {
        "keras_attention_chunked",
        "keras_attention",
        "keras_core",
    }
    parts_file, plot = tmp_path / "modern.json", tmp_path / "window.png"
    runner.main(
        ["modern_attention", "--smoke", "--parts", "window", "--json", str(parts_file)]
        + ["--plot", str(plot)]
    )
    results = json.loads(parts_file.read_text())
    assert_provenance(results, "python -m benchmarks.modern_attention --smoke --parts window")
    recorded = {*measure.provenance("modern_attention"), "smoke", "repeats", "load_average_after"}
    assert [key for key in results if key not in recorded] == ["window"]
    assert [row["length"] for row in results["window"]] == [128, 128, 256, 256]
    assert plot.stat().st_size > 0
    with pytest.raises(SystemExit):
        runner.main(["modern_attention", "--smoke", "--parts", "windows"])
    assert "--parts: invalid choice: 'windows'" in capsys.readouterr().err


def test_python_m_benchmarks_lists_every_benchmark_and_runs_one_by_name(capsys):
    """`python -m benchmarks` lists every module of the package that has a
    `main` or is a section (so a new benchmark cannot be left out), and
    passes a name's flags on to it."""
    from benchmarks import __main__ as runner

    folder = Path(runner.__file__).parent
    runnable = {
        path.stem
        for path in folder.glob("*.py")
        if ("\ndef main(" in path.read_text() or "\nTABLES = " in path.read_text())
        and path.stem not in ("__main__", "section", "on_jax")  # the runners; a helper of `run`
    }
    assert set(runner.BENCHMARKS) == runnable
    runner.main([])
    listing = capsys.readouterr().out
    assert all(f"  {name} " in listing for name in runner.BENCHMARKS)
    with pytest.raises(SystemExit, match="no benchmark 'nope'; the benchmarks: run, "):
        runner.main(["nope"])
    with pytest.raises(SystemExit) as help_exit:
        runner.main(["serving_speed", "--help"])
    assert help_exit.value.code == 0
    assert "usage: " in capsys.readouterr().out


def test_every_section_runs_from_one_runner_with_the_same_flags_and_json(
    tmp_path, capsys, monkeypatch
):
    """The sections share `--smoke`, `--repeats` and `--json` and one JSON
    layout (provenance, smoke, repeats, the figures); several run in one
    command; a smoke run writes nothing unless `--json` says where; bad
    flags are refused by name."""
    from benchmarks import __main__ as runner
    from benchmarks import section

    sections = [name for name in runner.BENCHMARKS if section.is_section(name)]
    assert {"decoding", "generation", "self_attention", "bfloat16", "main_job"} <= set(sections)
    for name in sections:
        module = importlib.import_module(f"benchmarks.{name}")
        assert module.REPEATS >= 1 and callable(module.run), name
        assert all(len(table) == 3 for table in module.TABLES), name
    monkeypatch.chdir(tmp_path)  # where benchmarks/results_NAME.json would go
    runner.main(["decoding", "self_attention", "--smoke"])
    printed = capsys.readouterr().out
    assert "greedy decoding, cached against uncached" in printed
    assert "self-attention alone, forward + backward" in printed
    assert not list(tmp_path.rglob("*.json"))
    output = tmp_path / "decoding.json"
    with pytest.raises(SystemExit, match="--repeats must be 1 or more, not 0"):
        section.main("decoding", ["--smoke", "--repeats", "0"])
    with pytest.raises(SystemExit, match="--json names one file"):
        runner.main(["decoding", "generation", "--smoke", "--json", str(output)])
    with pytest.raises(SystemExit, match="translation_peer take their own arguments"):
        runner.main(["decoding", "translation_peer", "--smoke"])
    with pytest.raises(
        SystemExit,
        match="threads before it starts, so each runs in a command of its own: serving_speed",
    ):
        runner.main(["decoding", "serving_speed", "--smoke"])
    with pytest.raises(SystemExit):
        runner.main(["decoding", "--smoke", "--lengths", "4"])
    assert "unrecognized arguments: --lengths 4" in capsys.readouterr().err


def test_the_bfloat16_race_times_both_precisions_on_the_same_work(tmp_path):
    """Also the sections' JSON layout: what `section.main` returns is what
    it wrote, provenance first, then `smoke`, `repeats` and the figures."""
    from benchmarks import section

    output = tmp_path / "bfloat16.json"
    results = section.main("bfloat16", ["--smoke", "--repeats", "2", "--json", str(output)])
    assert json.loads(output.read_text()) == json.loads(json.dumps(results))
    assert_provenance(results, "python -m benchmarks.bfloat16 --smoke --repeats 2")
    assert results["smoke"] is True and results["repeats"] == 2
    assert [(row["model"], row["work"]) for row in results["rows"]] == [("tiny", "training step")]
    for row in results["rows"]:
        assert row["float32_ms"] > 0 and row["mixed_bfloat16_ms"] > 0
        assert row["float32_over_bfloat16"] == pytest.approx(
            row["float32_ms"] / row["mixed_bfloat16_ms"]
        )


# Trains a tiny run and exports it twice (a few minutes): `pytest -m large`.
@pytest.mark.large
def test_the_unused_options_benchmark_races_the_baselines_export(tmp_path):
    """`benchmarks.unused_options --smoke`: the run exported by the code from
    before `translate_batch` (installed apart from this repository's
    history) and by today's, both answering alike (checked by the
    benchmark), every signature and batch size timed."""
    results, _ = run_benchmark(tmp_path, "unused_options")
    output = tmp_path / "unused_options.json"
    assert results["command"] == f"python -m benchmarks.unused_options --smoke --json {output}"
    assert results["commit"] and results["baseline"]
    rows = [(row["signature"], row["batch_size"]) for row in results["rows"]]
    assert rows == [
        (signature, size)
        for size in (1, 32)
        for signature in ("serving_default", "translate_with_options")
    ]
    assert all(row["baseline"] > 0 and row["today"] > 0 for row in results["rows"])


def test_the_opennmt_environment_is_checked_for_every_module_it_imports(monkeypatch):
    """`benchmarks.opennmt.environment` ends by importing each module the
    peer's commands need (sentencepiece among them: an environment without
    it failed in `onmt_build_vocab`); this Python has sentencepiece but not
    OpenNMT-py."""
    from benchmarks import opennmt

    assert "sentencepiece" in opennmt.IMPORTS
    assert "sentencepiece" in opennmt.REQUIREMENTS
    with pytest.raises(RuntimeError, match="cannot import onmt") as error:
        opennmt.check_imports(sys.executable)
    assert "sentencepiece" not in str(error.value)
    monkeypatch.setattr(opennmt, "IMPORTS", ("json", "sentencepiece"))
    opennmt.check_imports(sys.executable)


@pytest.mark.large
def test_the_main_job_benchmark_runs_the_recipe_and_keeps_what_it_wrote(tmp_path):
    """`benchmarks.main_job --smoke`: the README's main job, a few examples,
    in a process of its own; the results are its evaluation.json and the
    command's wall time, with how, when and where they were measured."""
    results, _ = run_benchmark(tmp_path, "main_job", "--presets", "dates", timeout=900)
    assert_provenance(results, "python -m benchmarks.main_job --smoke")
    (row,) = results["rows"]
    assert row["preset"] == "dates" and row["test_examples"] == 50
    assert 0 <= row["exact_match"] <= 1 and row["wall_seconds"] > row["training_seconds"] > 0


# Our recipe and the keras.io example, each trained a few seconds: `pytest -m large`.
@pytest.mark.large
def test_the_translation_peer_benchmark_runs_ours_beside_the_keras_hub_example(tmp_path):
    from benchmarks import translation_peer

    words = "zero one two three four five six seven eight nine".split()
    french = "zéro un deux trois quatre cinq six sept huit neuf".split()
    pairs = [
        (
            f"{words[i % 10]} {words[i // 10 % 10]} {words[i // 100]}",
            f"{french[i % 10]} {french[i // 10 % 10]} {french[i // 100]}",
        )
        for i in range(600)
    ]
    train_file = tmp_path / "pairs.tsv"
    train_file.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    output = tmp_path / "results.json"
    flags = "--epochs 1 --no-export --no-tune-decoding --max-input-length 16 --beam-size 2"
    argv = ["--train-file", str(train_file), "--output-dir", str(tmp_path / "runs")]
    argv += ["--peers", "keras_hub_example", "--flags", flags, "--json", str(output)]
    translation_peer.main(argv)
    results = json.loads(output.read_text())
    assert_provenance(results, "python -m benchmarks.translation_peer")
    assert results["flags"] == flags.split() and results["train_pairs"] > 500
    for name in ("ours", "keras_hub_example"):
        assert 0 <= results[name]["sacrebleu"] <= 100 and results[name]["training_seconds"] > 0
    assert results["ours"]["decoding"] == "beam 2"
    assert results["ours"]["length_penalty"] is None  # copied: not tuned, search's default
    assert results["keras_hub_example"]["epochs"] >= 1
    assert len(results["examples"]) == 12 and "keras_hub_example" in results["examples"][0]
