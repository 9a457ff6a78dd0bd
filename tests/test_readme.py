"""The README's commands and examples are the ones that work."""

import doctest
import importlib
import re
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[1]
README = (REPOSITORY / "README.md").read_text()


def code_blocks(language):
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.DOTALL)


def test_ci_runs_exactly_the_readme_test_command():
    commands = [
        line
        for block in code_blocks("bash")
        for line in block.splitlines()
        if line and not line.startswith("#")
    ]
    assert len(commands) == 2, commands
    main_job, test_command = commands
    assert "pytest" in test_command and "pytest" not in main_job
    assert test_command in (REPOSITORY / ".ci" / "run").read_text().splitlines()


def test_python_examples_run():
    namespace = {}
    for block in code_blocks("python"):
        exec(compile(block, "README.md", "exec"), namespace)  # noqa: S102


LAYER_MODULES = [
    "bahdanau_attention",
    "luong_attention",
    "multi_head_self_attention",
    "multi_head_cross_attention",
    "positional_encoding",
    "position_embedding",
    "transformer_block",
    "transformer_decoder_block",
]


@pytest.mark.parametrize("name", LAYER_MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(f"keras_attention.layers.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0, result
