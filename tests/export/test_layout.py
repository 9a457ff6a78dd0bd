"""TF Serving's folder layout, written atomically; warm-up records; models.config."""

import os
import re

import pytest
import tensorflow as tf
from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

from keras_attention.export import layout


def fill(folder):
    (folder / "saved_model.pb").write_text("new")


def test_next_version_counts_only_integer_folders(tmp_path):
    assert layout.next_version(tmp_path / "missing") == 1
    for name in ("1", "3", "abc", ".tmp-4-x"):
        (tmp_path / name).mkdir()
    (tmp_path / "7").write_text("a file, not a version")
    assert layout.versions(tmp_path) == [1, 3]
    assert layout.next_version(tmp_path) == 4


def test_write_version_renames_a_complete_folder_into_place(tmp_path):
    seen = []

    def write(folder):
        seen.append(folder)
        assert folder.parent == tmp_path / "m" and not folder.name.isdigit()  # servers skip it
        fill(folder)

    path = layout.write_version(tmp_path / "m", write)
    assert path == tmp_path / "m" / "1"
    assert (path / "saved_model.pb").read_text() == "new"
    assert not seen[0].exists()
    assert layout.write_version(tmp_path / "m", fill).name == "2"


def test_a_failed_write_leaves_nothing(tmp_path):
    def write(folder):
        fill(folder)
        raise RuntimeError("killed halfway")

    with pytest.raises(RuntimeError, match="halfway"):
        layout.write_version(tmp_path, write)
    assert list(tmp_path.iterdir()) == []


def test_an_existing_version_is_replaced_only_when_asked(tmp_path):
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "saved_model.pb").write_text("old")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        layout.write_version(tmp_path, fill, version=1)
    assert (tmp_path / "1" / "saved_model.pb").read_text() == "old"
    layout.write_version(tmp_path, fill, version=1, overwrite=True)
    assert (tmp_path / "1" / "saved_model.pb").read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["1"]


def test_a_racing_writer_keeps_its_version(tmp_path):
    def write(folder):
        fill(folder)
        (tmp_path / "1").mkdir()  # another export finished version 1 meanwhile
        (tmp_path / "1" / "saved_model.pb").write_text("theirs")

    with pytest.raises(OSError):
        layout.write_version(tmp_path, write)
    assert (tmp_path / "1" / "saved_model.pb").read_text() == "theirs"
    assert [p.name for p in tmp_path.iterdir()] == ["1"]


@pytest.mark.parametrize("version", [0, -1, "2", 1.0, True])
def test_bad_versions_are_refused(tmp_path, version):
    with pytest.raises(ValueError, match="version"):
        layout.write_version(tmp_path, fill, version=version)


def test_warmup_records_round_trip(tmp_path):
    requests = {"serving_default": {"text": ["a", "bc"], "beam_size": 2}}
    path = layout.write_warmup_requests(tmp_path, requests, "dates")
    assert path == tmp_path / "assets.extra" / "tf_serving_warmup_requests"
    (request,) = layout.read_warmup_requests(path)
    assert request.model_spec.name == "dates"
    assert request.model_spec.signature_name == "serving_default"
    assert list(tf.make_ndarray(request.inputs["text"])) == [b"a", b"bc"]
    assert tf.make_ndarray(request.inputs["beam_size"]) == 2


def test_models_config_lists_every_model(tmp_path):
    path = tmp_path / "models.config"
    layout.write_models_config(path, {"dates": "/models/dates", "reverse": "/models/reverse"})
    config = text_format.Parse(path.read_text(), model_server_config_pb2.ModelServerConfig())
    entries = [(c.name, c.base_path, c.model_platform) for c in config.model_config_list.config]
    assert entries == [
        ("dates", "/models/dates", "tensorflow"),
        ("reverse", "/models/reverse", "tensorflow"),
    ]
    # Beside it, the batching parameters, in TF Serving's text format.
    batching = {}
    for line in (tmp_path / "batching_parameters.txt").read_text().splitlines():
        match = re.fullmatch(r"(\w+) \{ value: (\d+) \}", line)
        assert match, line
        batching[match[1]] = int(match[2])
    assert batching == {
        "max_batch_size": 32,
        "batch_timeout_micros": 5000,
        "max_enqueued_batches": 100,
        "num_batch_threads": os.cpu_count(),
    }
    layout.write_models_config(path, {"dates": "/models/dates"}, num_batch_threads=8)
    assert "num_batch_threads { value: 8 }" in (tmp_path / "batching_parameters.txt").read_text()
    with pytest.raises(ValueError, match="num_batch_threads"):
        layout.write_models_config(tmp_path / "other.config", {"a": "/a"}, num_batch_threads=-1)
    assert not (tmp_path / "other.config").exists()
    with pytest.raises(ValueError, match="at least one"):
        layout.write_models_config(path, {})
    with pytest.raises(ValueError, match="'a/b'"):
        layout.write_models_config(path, {"a/b": "/models/x"})
