"""The guide's code runs, its pictures exist, and the script that makes them
still works (in its quick mode)."""

import importlib.util
import re
from pathlib import Path

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


def test_every_picture_in_the_guide_is_made_by_the_script():
    pictures = re.findall(r"\]\(figures/([\w.]+)\)", GUIDE)
    assert sorted(pictures) == sorted(make_figures_module().FIGURES)
    for name in pictures:
        assert (DOCS / "figures" / name).read_bytes()[:8] == PNG_MAGIC


def test_the_script_makes_every_picture_from_scratch(tmp_path):
    module = make_figures_module()
    module.main(["--quick", "--output-dir", str(tmp_path / "figures")])
    for name in module.FIGURES:
        assert (tmp_path / "figures" / name).read_bytes()[:8] == PNG_MAGIC
