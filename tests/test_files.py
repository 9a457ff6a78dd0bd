"""Files are written whole or not at all."""

import pytest

from keras_attention import files


def test_atomic_write_leaves_no_partial_file(tmp_path, monkeypatch):
    path = tmp_path / "out" / "result.json"
    files.write_json(path, {"exact_match": 1.0})
    assert path.read_text() == '{\n  "exact_match": 1.0\n}\n'

    def interrupted(source, destination):
        raise KeyboardInterrupt  # killed between writing and renaming

    monkeypatch.setattr(files.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        files.write_json(path, {"exact_match": 0.5})
    assert path.read_text() == '{\n  "exact_match": 1.0\n}\n'  # the old file is intact
    assert [p.name for p in path.parent.iterdir()] == ["result.json"]  # no temporary left
