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


def test_ci_runs_the_readme_commands_in_order():
    commands = [
        line
        for block in code_blocks("bash")[:2]  # the two set-up commands come first
        for line in block.splitlines()
        if line and not line.startswith("#")
    ]
    assert len(commands) == 2, commands
    main_job, test_command = commands
    assert "pytest" in test_command and "pytest" not in main_job
    ci = (REPOSITORY / ".ci" / "run").read_text().splitlines()
    # A new user runs the main job, then the tests, in one folder.
    assert main_job in ci and test_command in ci
    assert ci.index(main_job) < ci.index(test_command)
    # The second backend's command, which the README gives below it.
    (jax_command,) = re.findall(r"`(KERAS_BACKEND=jax [^`]*pytest[^`]*)`", README)
    assert jax_command in ci


def test_python_examples_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the examples write pictures
    namespace = {}
    for block in code_blocks("python"):
        exec(compile(block, "README.md", "exec"), namespace)  # noqa: S102


DOCUMENTED_MODULES = [
    "keras_attention.layers.bahdanau_attention",
    "keras_attention.layers.luong_attention",
    "keras_attention.layers.multi_head_self_attention",
    "keras_attention.layers.multi_head_cross_attention",
    "keras_attention.layers.positional_encoding",
    "keras_attention.layers.position_embedding",
    "keras_attention.layers.rotary_embedding",
    "keras_attention.layers.transformer_block",
    "keras_attention.layers.transformer_decoder_block",
    "keras_attention.layers.token_pooling",
    "keras_attention.layers.relative_position_bias",
    "keras_attention.models.transformer",
    "keras_attention.models.transformer_lm",
    "keras_attention.models.transformer_classifier",
    "keras_attention.models.transformer_embedder",
    "keras_attention.models.transformer_stacks",
    "keras_attention.models.seq2seq_attention",
]


@pytest.mark.parametrize("name", DOCUMENTED_MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0, result
