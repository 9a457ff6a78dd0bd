import io
import subprocess
import sys
import warnings

import numpy as np
import pytest

from keras_attention import visualize
from keras_attention.models import build_seq2seq_attention, build_transformer

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def head_panels(figure):
    return [ax for ax in figure.axes if ax.get_label() != "<colorbar>"]


@pytest.mark.parametrize("num_heads", [1, 3, 8])
def test_one_panel_per_head_and_a_png(num_heads, tmp_path):
    weights = np.random.default_rng(0).dirichlet(np.ones(4), size=(num_heads, 3))
    path = tmp_path / "map.png"
    figure = visualize.plot_attention(weights, ["le", "chat", "noir"], list("abcd"), path=path)
    panels = head_panels(figure)
    assert len(panels) == num_heads
    assert [t.get_text() for t in panels[0].get_xticklabels()] == list("abcd")
    assert [t.get_text() for t in panels[0].get_yticklabels()] == ["le", "chat", "noir"]
    np.testing.assert_allclose(panels[-1].images[0].get_array(), weights[-1])
    assert path.read_bytes()[:8] == PNG_MAGIC


def png(figure):
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=72)
    return buffer.getvalue()


@pytest.mark.parametrize("num_heads", [1, 5])
def test_a_redrawn_figure_is_the_picture_a_new_one_would_be(num_heads):
    """`redraw_attention` keeps the first drawing's layout and puts new
    weights and a new title in: the same pixels as a figure drawn anew."""
    rng = np.random.default_rng(0)
    first, second = rng.dirichlet(np.ones(6), size=(2, num_heads, 4))
    rows, columns = ["2026", "-", "11", "</s>"], list("29 nov")
    figure = visualize.plot_attention(first, rows, columns, title="epoch 1")
    png(figure)  # laid out and drawn, as after the first epoch
    redrawn = visualize.redraw_attention(figure, second, title="epoch 2")
    assert redrawn is figure
    np.testing.assert_allclose(head_panels(figure)[-1].images[0].get_array(), second[-1])
    fresh = visualize.plot_attention(second, rows, columns, title="epoch 2")
    assert png(figure) == png(fresh)
    never_drawn = visualize.plot_attention(first, rows, columns)
    visualize.redraw_attention(never_drawn, second)  # laid out first, then redrawn
    assert png(never_drawn)[:8] == PNG_MAGIC
    drawn_with = rf"the shape the figure was drawn with, \({num_heads}, 4, 6\)"
    with pytest.raises(ValueError, match=drawn_with):
        visualize.redraw_attention(figure, second[:, :3])


def test_characters_the_font_cannot_draw_become_code_points_without_a_warning(tmp_path):
    # The multilingual dates hold Thai, which DejaVu Sans (matplotlib's own
    # font) lacks; U+10FFFD (private use) is in no font at all.
    thai, nowhere = "\u0e27\u0e31\u0e19", "\U0010fffd"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        figure = visualize.plot_attention(
            np.full((2, 3), 1 / 3), ["été", nowhere], [*thai], path=tmp_path / "map.png"
        )
    panel = head_panels(figure)[0]
    rows = [t.get_text() for t in panel.get_yticklabels()]
    assert rows == ["été", "U+10FFFD"]
    fonts = visualize._font_characters()
    for label in [t.get_text() for t in panel.get_xticklabels()]:
        assert all(ord(c) in fonts for c in label), label


def test_every_layer_and_kind_of_a_transformer(tmp_path):
    model = build_transformer(20, num_layers=2, num_heads=4)
    inputs = {"source_ids": np.array([[5, 6, 7]]), "target_ids": np.array([[1, 5, 6, 8]])}
    paths = visualize.plot_model_attention(
        model,
        inputs,
        target_tokens=["<s>", "x", "y", "z"],
        source_tokens=["a", "b", "c"],
        output_dir=tmp_path,
    )
    names = sorted(p.name for p in paths)
    assert names == sorted(
        f"{kind}_layer{i}.png"
        for kind in ["encoder_self_attention", "decoder_self_attention", "decoder_cross_attention"]
        for i in range(2)
    )
    assert all(p.read_bytes()[:8] == PNG_MAGIC for p in paths)


def test_cli_draws_a_saved_model(tmp_path):
    model = build_seq2seq_attention(20)
    model.save(tmp_path / "model.keras")
    (tmp_path / "vocab.txt").write_text("\n".join(f"tok{i}" for i in range(20)))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "keras_attention.visualize",
            str(tmp_path / "model.keras"),
            "--source-ids",
            "5 6 7",
            "--target-ids",
            "1 5",
            "--vocabulary",
            str(tmp_path / "vocab.txt"),
            "--output-dir",
            str(tmp_path / "maps"),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    written = result.stdout.split()
    assert [p.rsplit("/", 1)[-1] for p in written] == ["decoder_cross_attention_layer0.png"]
    assert (tmp_path / "maps" / "decoder_cross_attention_layer0.png").read_bytes()[:8] == PNG_MAGIC


def test_cli_refuses_a_missing_model(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "keras_attention.visualize",
            str(tmp_path / "nope.keras"),
            "--source-ids",
            "5 6",
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert "no model file" in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_arguments():
    with pytest.raises(ValueError, match="Expected 2 query tokens"):
        visualize.plot_attention(np.ones((2, 2, 3)) / 3, ["a"], ["x", "y", "z"])


def test_cli_refuses_a_missing_or_corrupt_vocabulary(tmp_path):
    model = build_seq2seq_attention(20)
    model.save(tmp_path / "model.keras")
    (tmp_path / "binary.txt").write_bytes(b"\xff\xfe\x00garbage")
    arguments = [str(tmp_path / "model.keras"), "--source-ids", "5 6", "--target-ids", "1 5"]
    with pytest.raises(SystemExit, match="error: no vocabulary file at .*missing.txt"):
        visualize.main([*arguments, "--vocabulary", str(tmp_path / "missing.txt")])
    with pytest.raises(SystemExit, match="binary.txt is not a vocabulary file"):
        visualize.main([*arguments, "--vocabulary", str(tmp_path / "binary.txt")])
