"""What cannot be converted exactly is refused by name, and nothing is left
half-written."""

import json
import shutil
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
from convert_helpers import FIXTURES, write_safetensors

from keras_attention.convert import CheckpointError, convert, from_huggingface
from keras_attention.convert.checkpoint import read_safetensors


def copy_of(name, tmp_path):
    folder = tmp_path / name
    shutil.copytree(FIXTURES / name, folder)
    return folder


def edit_config(folder, **changes):
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize(
    "name, changes, message",
    [
        ("marian", {"model_type": "t5"}, "model_type='t5'"),
        ("marian", {"architectures": ["MarianForCausalLM"]}, "architectures"),
        ("marian", {"activation_function": "gelu_new"}, "activation_function='gelu_new'"),
        ("marian", {"decoder_layers": 3}, "decoder_layers=3"),
        ("marian", {"vocab_size": 7}, "vocab_size=7"),
        ("llama", {"hidden_act": "gelu"}, "hidden_act='gelu'"),
        (
            "llama",
            {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}, "rope_parameters": None},
            "rope_type",
        ),
        ("llama", {"rope_parameters": {"rope_type": "dynamic", "factor": 8.0}}, "rope_type"),
        (
            "llama",
            {"rope_parameters": {"rope_type": "llama3", "factor": 8.0, "rope_theta": 1e4}},
            "has no number low_freq_factor for llama3",
        ),
        ("llama", {"pretraining_tp": 2}, "pretraining_tp=2"),
        ("llama", {"eos_token_id": [2, 5]}, "eos_token_id"),
        ("gpt2", {"activation_function": "relu"}, "activation_function='relu'"),
        ("gpt2", {"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx"),
        ("qwen2", {"use_sliding_window": True}, "use_sliding_window=True"),
        (
            "llama3",
            {"rope_parameters": {"rope_type": "yarn", "factor": 8.0, "rope_theta": 5e5}},
            "rope_type",
        ),
    ],
)
def test_unsupported_config_values_are_refused_by_name(tmp_path, name, changes, message):
    folder = copy_of(name, tmp_path)
    edit_config(folder, **changes)
    with pytest.raises(CheckpointError, match=message.replace("[", r"\[")):
        from_huggingface(folder)


def test_a_llama_without_tokenizer_model_needs_a_byte_level_bpe_tokenizer_json(tmp_path):
    folder = copy_of("llama", tmp_path)
    (folder / "tokenizer.model").unlink()  # its tokenizer.json is Llama 2's: SentencePiece's BPE
    with pytest.raises(CheckpointError, match=r"tokenizer\.json: pre_tokenizer\.type='Metaspace'"):
        from_huggingface(folder)


@pytest.mark.parametrize(
    "name, keys, value, message",
    [
        ("gpt2", ["normalizer"], {"type": "Lowercase"}, "normalizer.type='Lowercase'"),
        ("gpt2", ["pre_tokenizer"], {"type": "Whitespace"}, "pre_tokenizer.type='Whitespace'"),
        ("gpt2", ["pre_tokenizer", "add_prefix_space"], True, "add_prefix_space=True"),
        ("gpt2", ["decoder"], {"type": "WordPiece"}, "decoder.type='WordPiece'"),
        ("gpt2", ["model", "type"], "Unigram", "model.type='Unigram'"),
        (
            "qwen2",
            ["pre_tokenizer", "pretokenizers", 0, "pattern", "Regex"],
            r"(?<=\s)\p{L}+|\s+",
            "pre_tokenizer.pretokenizers[0].pattern.Regex: the regex '(?<=",
        ),
        (
            "qwen2",
            ["pre_tokenizer", "pretokenizers", 0, "pattern", "Regex"],
            r"\p{L}++|\s+",
            "RE2 cannot read the regex",
        ),
        (
            "qwen2",
            ["pre_tokenizer", "pretokenizers", 0, "behavior"],
            "Removed",
            "pre_tokenizer.pretokenizers[0].behavior='Removed'",
        ),
        ("llama3", ["model", "dropout"], 0.1, "model.dropout=0.1"),
        ("llama3", ["post_processor"], {"type": "BertProcessing"}, "type='BertProcessing'"),
    ],
)
def test_unknown_tokenizer_json_components_are_refused_by_name(
    tmp_path, name, keys, value, message
):
    folder = copy_of(name, tmp_path)
    data = json.loads((folder / "tokenizer.json").read_text("utf-8"))
    parent = data
    for key in keys[:-1]:
        parent = parent[key]
    parent[keys[-1]] = value
    (folder / "tokenizer.json").write_text(json.dumps(data), "utf-8")
    with pytest.raises(CheckpointError) as error:
        from_huggingface(folder)
    assert f"{folder / 'tokenizer.json'}: " in str(error.value)
    assert message in str(error.value)


@pytest.mark.parametrize(
    "missing", ["config.json", "model.safetensors", "source.spm", "vocab.json"]
)
def test_a_missing_file_is_named(tmp_path, missing):
    folder = copy_of("marian", tmp_path)
    (folder / missing).unlink()
    with pytest.raises(CheckpointError, match=missing.replace(".", r"\.")):
        from_huggingface(folder)


def test_a_truncated_weights_file_is_named_and_no_run_is_written(tmp_path):
    folder = copy_of("marian", tmp_path)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        convert(folder, tmp_path / "run", export=False)
    assert not (tmp_path / "run").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp")]


def test_a_tensor_of_the_wrong_shape_or_an_unknown_one_is_refused(tmp_path):
    folder = copy_of("marian", tmp_path)
    tensors = dict(read_safetensors(folder / "model.safetensors"))
    name = "model.encoder.layers.0.fc1.weight"
    tensors[name] = tensors[name][:, :-1]
    write_safetensors(folder / "model.safetensors", tensors)
    with pytest.raises(CheckpointError, match=f"{name}.*shape"):
        from_huggingface(folder)
    tensors = dict(read_safetensors(FIXTURES / "marian" / "model.safetensors"))
    tensors["model.encoder.layers.0.adapter.weight"] = np.zeros((2, 2), "float32")
    write_safetensors(folder / "model.safetensors", tensors)
    with pytest.raises(CheckpointError, match="adapter"):
        from_huggingface(folder)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_half_precision_weights_are_read_and_cast(tmp_path, converted, dtype):
    folder = copy_of("marian", tmp_path)
    tensors = read_safetensors(folder / "model.safetensors")
    write_safetensors(
        folder / "model.safetensors", {k: v.astype(dtype) for k, v in tensors.items()}
    )
    half = from_huggingface(folder).model
    full = converted("marian").model
    ids = np.array([[5, 6, 7, 2]], "int32")
    inputs = {"source_ids": ids, "target_ids": np.array([[1, 5]], "int32")}
    rounded = {k: v.astype(dtype).astype("float32") for k, v in tensors.items()}
    assert any(not np.array_equal(rounded[k], tensors[k]) for k in tensors)  # the cast is real
    difference = np.abs(np.asarray(half(inputs)) - np.asarray(full(inputs))).max()
    assert 0 < difference < 1.0


def test_an_existing_output_folder_is_refused_unless_overwrite(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "mine.txt").write_text("kept")
    with pytest.raises(FileExistsError, match="overwrite"):
        convert(FIXTURES / "marian", run, export=False)
    assert (run / "mine.txt").read_text() == "kept"
    convert(FIXTURES / "marian", run, export=False, overwrite=True)
    assert (run / "model.keras").is_file() and not (run / "mine.txt").exists()


def test_the_command_says_what_is_wrong(tmp_path):
    folder = copy_of("marian", tmp_path)
    edit_config(folder, model_type="t5")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "keras_attention.convert",
            str(folder),
            "--output-dir",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1
    assert "error:" in result.stderr and "model_type='t5'" in result.stderr
