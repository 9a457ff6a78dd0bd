import json
import subprocess
import sys

import pytest
import recipe_helpers
from recipe_helpers import check_a_tiny_translate_run, run_on_mock_data

from keras_attention.data.tokenizers import SubwordTokenizer
from keras_attention.recipes import translate


def tiny_flags(data_dir, output_dir, *extra):
    return recipe_helpers.tiny_flags(data_dir, output_dir, "--checkpoint-every", "4", *extra)


@pytest.mark.large  # a whole recipe run (see docs/testing.md)
def test_an_rnn_run_in_mixed_bfloat16_with_beam_search_writes_everything(
    dates_data_dir, tmp_path, capsys
):
    """The Bahdanau model, in half precision, evaluated by beam search with
    the length penalty chosen on the validation split (the Transformer
    under XLA: test_console.py)."""
    extra = ["--preset", "dates_bahdanau", "--precision", "mixed_bfloat16", "--beam-size", "2"]
    output_dir = tmp_path / "run"
    translate.main(tiny_flags(dates_data_dir, output_dir, *extra))
    printed = capsys.readouterr().out
    config = check_a_tiny_translate_run(output_dir, printed, "beam 2")
    # The length penalty, not given, chosen on the validation split (the
    # beam size was given): recorded, used for the test split and the export.
    assert "Choosing the decoding on 24 validation pairs:" in printed
    assert config["beam_size"] == 2 and config["length_penalty"] in (0.3, 0.6, 1.0)
    results = json.loads((output_dir / "evaluation.json").read_text())
    assert results["length_penalty"] == config["length_penalty"]
    assert list(results["decoding_tuning"]) == [
        f"beam 2, length penalty {alpha}" for alpha in (0.3, 0.6, 1.0)
    ]
    (metadata,) = (output_dir / "serving").glob("*/1/assets.extra/keras_attention.json")
    assert json.loads(metadata.read_text())["length_penalty"] == config["length_penalty"]


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
    overrides = ("--model-overrides", '{"num_layers": 1}')
    output_dir = run_on_mock_data(
        translate.main, "ted_pt_en", tmp_path, 24, *overrides, num_examples=32
    )
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


def test_the_decoding_is_chosen_on_the_validation_split(monkeypatch, capsys):
    """`tune_decoding`: each length penalty at the run's beam size, then each
    beam size at the best penalty, by sacreBLEU on the validation pairs;
    what the user gave is kept, and another beam size than the run's must
    score `BEAM_SIZE_GAIN` more."""
    import dataclasses
    import types

    import tensorflow as tf

    references = ["le chat est sur la table", "il pleut depuis ce matin", "ouvrez le fichier"]
    pairs = tf.data.Dataset.from_tensor_slices((["x"] * 3, references))
    config = translate.TranslateConfig(beam_size=4)
    data = types.SimpleNamespace(
        config=config, tokenizer=None, target_tokenizer=None, validation_examples=pairs
    )
    # Right answers by (beam, penalty); 1 for those not listed.
    best = {(4, 1.0): 2, (8, 1.0): 3, (2, 1.0): 2}
    asked = []

    def decode(model, tokenizer, target_tokenizer, sources, tried):
        asked.append((tried.beam_size, tried.length_penalty))
        right = best.get((tried.beam_size, tried.length_penalty), 1)
        return references[:right] + ["non"] * (len(references) - right)

    monkeypatch.setattr(translate, "translate", decode)
    chosen, trials = translate.tune_decoding(None, data, given=translate.TranslateConfig())
    assert (chosen.beam_size, chosen.length_penalty) == (8, 1.0)
    assert asked == [(4, 0.3), (4, 0.6), (4, 1.0), (2, 1.0), (8, 1.0)]
    # Each trial's sacreBLEU, as the run records it (`decoding_tuning`).
    assert list(trials) == [f"beam {b}, length penalty {a}" for b, a in asked]
    assert trials["beam 8, length penalty 1.0"] == 100.0
    assert trials["beam 4, length penalty 1.0"] < 100.0
    assert "Chosen on the validation split: --beam-size 8 --length-penalty 1.0" in (
        capsys.readouterr().out
    )
    asked.clear()
    given = translate.TranslateConfig(beam_size=4)
    chosen, _ = translate.tune_decoding(None, data, given=given)
    assert (chosen.beam_size, chosen.length_penalty) == (4, 1.0)
    assert asked == [(4, 0.3), (4, 0.6), (4, 1.0)]
    asked.clear()
    best[2, 0.6] = 3
    data.config = dataclasses.replace(config, length_penalty=0.6)  # as the user gave it
    given = translate.TranslateConfig(length_penalty=0.6)
    chosen, _ = translate.tune_decoding(None, data, given)
    assert (chosen.beam_size, chosen.length_penalty) == (2, 0.6)
    assert asked == [(4, 0.6), (2, 0.6), (8, 0.6)]
    # Better, but by less than BEAM_SIZE_GAIN: the run's own beam size stays.
    monkeypatch.setattr(translate, "BEAM_SIZE_GAIN", 200.0)
    chosen, _ = translate.tune_decoding(None, data, given)
    assert (chosen.beam_size, chosen.length_penalty) == (4, 0.6)
