"""The guide's code runs, its pictures exist, and the script that makes them
still works (in its quick mode)."""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
GUIDE = (DOCS / "guide.md").read_text()
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def make_figures_module():
    spec = importlib.util.spec_from_file_location("make_figures", DOCS / "make_figures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_guides_code_runs_in_order():
    namespace = {}
    blocks = re.findall(r"```python\n(.*?)```", GUIDE, flags=re.DOTALL)
    assert len(blocks) >= 8
    for block in blocks:
        exec(compile(block, "docs/guide.md", "exec"), namespace)  # noqa: S102
    assert tuple(namespace["scores"]["cross_attention"].shape) == (1, 4, 3, 5)


@pytest.mark.parametrize(
    "page",
    # (serving.md exports a model and calls each signature: most of a minute.)
    ["layers", "models", "training", pytest.param("serving", marks=pytest.mark.large)],
)
def test_each_pages_code_runs_in_order(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the examples write pictures and exports
    blocks = re.findall(r"```python\n(.*?)```", (DOCS / f"{page}.md").read_text(), re.DOTALL)
    assert blocks
    namespace = {}
    for block in blocks:
        exec(compile(block, f"docs/{page}.md", "exec"), namespace)  # noqa: S102


def test_every_page_is_linked_and_every_link_is_in_the_repository():
    readme = DOCS.parent / "README.md"
    pages = sorted(DOCS.glob("*.md"))
    for page in pages:
        assert f"(docs/{page.name})" in readme.read_text(), page.name
    for document in [readme, *pages]:
        prose = re.sub(r"```.*?```|`[^`]*`", "", document.read_text(), flags=re.DOTALL)
        for target in re.findall(r"\]\(([^)#]+)", prose):
            if not target.startswith("https://"):
                assert (document.parent / target).exists(), (document.name, target)


def test_every_picture_in_the_guide_is_made_by_the_script():
    pictures = re.findall(r"\]\(figures/([\w.]+)\)", GUIDE)
    assert sorted(pictures) == sorted(make_figures_module().FIGURES)
    for name in pictures:
        assert (DOCS / "figures" / name).read_bytes()[:8] == PNG_MAGIC


# Trains the guide's models: `pytest -m large`.
@pytest.mark.large
def test_the_script_makes_every_picture_from_scratch(tmp_path):
    """As its docstring runs it, in a process of its own: run in this
    worker, the two runs and exports it makes kept 2.8 GB of its memory
    after the test had ended."""
    module = make_figures_module()
    script = [sys.executable, str(DOCS / "make_figures.py")]
    output_dir = tmp_path / "figures"
    subprocess.run([*script, "--quick", "--output-dir", str(output_dir)], check=True, timeout=1200)
    for name in module.FIGURES:
        assert (output_dir / name).read_bytes()[:8] == PNG_MAGIC


def test_the_api_reference_builds_without_warnings(tmp_path):
    """`pdoc`, as the README's command runs it: every public layer, builder,
    decoding and export function, and every recipe flag, from the docstrings."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pdoc",
            "keras_attention",
            "keras_attention.recipes",
            "-o",
            str(tmp_path),
        ],
        env={**os.environ, "PDOC_ALLOW_EXEC": "1"},  # TensorFlow runs `uname` on import
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert [line for line in result.stderr.splitlines() if line.startswith("Warn")] == []
    pages = {
        "layers": ["MultiHeadSelfAttention", "BahdanauAttention", "TransformerDecoderBlock"],
        "models": ["build_transformer", "build_seq2seq_attention", "build_transformer_lm"],
        "decoding": ["beam_search", "greedy_search", "sample"],
        "export": ["export_model", "write_models_config"],
        "recipes/translate": ["--beam-size", "--export-version", "--deterministic"],
    }
    for page, names in pages.items():
        html = (tmp_path / "keras_attention" / f"{page}.html").read_text()
        for name in names:
            assert name in html, (page, name)
