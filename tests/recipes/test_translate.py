import json
import subprocess
import sys

import pytest
import recipe_helpers
from recipe_helpers import check_a_tiny_translate_run

from keras_attention.data.tokenizers import SubwordTokenizer
from keras_attention.recipes import translate


def tiny_flags(data_dir, output_dir, *extra):
    return recipe_helpers.tiny_flags(data_dir, output_dir, "--checkpoint-every", "4", *extra)


@pytest.mark.large  # a whole recipe run (see docs/testing.md)
def test_an_rnn_run_in_mixed_bfloat16_with_beam_search_writes_everything(
    dates_data_dir, tmp_path, capsys
):
    """The Bahdanau model, in half precision, evaluated by beam search (the
    Transformer under XLA: test_console.py)."""
    extra = ["--preset", "dates_bahdanau", "--precision", "mixed_bfloat16", "--beam-size", "2"]
    output_dir = tmp_path / "run"
    translate.main(tiny_flags(dates_data_dir, output_dir, *extra))
    check_a_tiny_translate_run(output_dir, capsys.readouterr().out, "beam 2")


def test_bad_flags_from_the_shell_give_a_message_not_a_traceback(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "keras_attention.recipes.translate",
            "--strategy",
            "gpu_cluster",
            "--output-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert (
        "`--strategy` must be one of ('default', 'mirrored', 'multi_worker', 'tpu', "
        "'data_parallel')" in result.stderr
    )
    assert "Traceback" not in result.stderr


@pytest.mark.large  # a whole recipe run (see docs/testing.md)
def test_ted_preset_with_subwords_on_mock_data(tmp_path, capsys):
    """The TED pt->en preset, subword tokenisers and sacreBLEU, on TFDS's mock
    data (the real data set is a download)."""
    import tensorflow_datasets as tfds

    output_dir = tmp_path / "run"
    flags = [
        "--preset",
        "ted_pt_en",
        "--data-dir",
        str(tmp_path / "tfds"),
        "--output-dir",
        str(output_dir),
        "--vocabulary-size",
        "40",
        "--epochs",
        "1",
        "--batch-size",
        "8",
        "--max-input-length",
        "24",
        "--test-examples",
        "8",
        "--model-overrides",
        '{"num_layers": 1}',
    ]
    with tfds.testing.mock_data(num_examples=32, policy=tfds.testing.MockPolicy.USE_CODE):
        translate.main(flags)
    results = json.loads((output_dir / "evaluation.json").read_text())
    assert 0.0 <= results["sacrebleu"] <= 100.0
    assert results["sacrebleu_signature"].startswith("nrefs:1")
    config = json.loads((output_dir / "config.json").read_text())
    assert (config["tokenizer"], config["dataset"]) == ("subword", "ted_hrlr_translate/pt_to_en")
    for side in ("source", "target"):
        tokenizer = SubwordTokenizer.load(output_dir / f"{side}_vocabulary.model")
        assert tokenizer.vocabulary[:4] == ["<pad>", "<s>", "</s>", "<unk>"]
    assert "sacreBLEU" in capsys.readouterr().out


def test_wmt14_presets_are_the_papers():
    from keras_attention.recipes import config as recipe_config

    base = recipe_config.parse_config(
        translate.TranslateConfig, translate.PRESETS, ["--preset", "wmt14_base"]
    )
    big = recipe_config.parse_config(
        translate.TranslateConfig, translate.PRESETS, ["--preset", "wmt14_big"]
    )
    assert (base.adam_beta_1, base.adam_beta_2, base.adam_epsilon) == (0.9, 0.98, 1e-9)
    assert (base.schedule, base.warmup_steps, base.label_smoothing) == ("warmup", 4000, 0.1)
    assert (base.model_preset, big.model_preset) == ("base", "big")
    assert base.reverse and base.shared_vocabulary and base.vocabulary_size == 37000
