"""`pip install .` and `pip install -e .` both give `keras_attention.models` and
`keras_attention.recipes`, importable from any folder, and no bare `models` or
`recipes` package."""

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[1]
# What a copy of the sources to build leaves out: tools' folders and what
# runs, builds and the README's main job wrote.
NOT_SOURCES = (".git", ".venv", "build", "dist", "runs", "*.egg-info", "__pycache__", ".*_cache")

CHECK = """
import importlib.metadata, importlib.util, os
import keras_attention.layers, keras_attention.models, keras_attention.recipes
# One version, written in the package and read by the packaging.
assert importlib.metadata.version("keras-attention") == keras_attention.__version__
print(keras_attention.models.__file__)
print(keras_attention.recipes.__file__)
# The user's own `models` folder is what `import models` finds; we install none.
models = importlib.util.find_spec("models")
assert list(models.submodule_search_locations) == [os.path.abspath("models")], models
assert importlib.util.find_spec("recipes") is None, "a bare `recipes` package is installed"
"""


@pytest.mark.parametrize("editable", [False, True])
def test_install_into_a_fresh_virtual_environment(editable, tmp_path):
    environment = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(environment)
    python = environment / "bin" / "python"
    # The fresh environment borrows this one's dependencies (TensorFlow is
    # large) through PYTHONPATH, but gets its own copy of this package.
    env = dict(os.environ, PYTHONPATH=sysconfig.get_paths()["purelib"])
    install = [
        str(python),
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-deps",
        "--no-build-isolation",
        "--no-index",
    ]
    if editable:
        # (It writes only its `.egg-info` into the repository, as the
        # README's own install does.)
        install += ["-e", str(REPOSITORY)]
    else:
        # Built from a copy: a build writes `build/` beside the sources, and
        # no test writes into the working tree.
        source = tmp_path / "source"
        shutil.copytree(REPOSITORY, source, ignore=shutil.ignore_patterns(*NOT_SOURCES))
        install += [str(source)]
    subprocess.run(install, check=True, env=env, cwd=tmp_path, capture_output=True)

    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "models").mkdir(parents=True)  # a user's own folder named `models`
    result = subprocess.run(
        [str(python), "-c", CHECK], env=env, cwd=elsewhere, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    models_file, recipes_file = result.stdout.split()
    if editable:
        assert Path(models_file) == REPOSITORY / "models" / "__init__.py"
    else:
        site_packages = environment / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
        assert Path(models_file).is_relative_to(site_packages), models_file
        assert Path(recipes_file).parent.name == "recipes"
        assert Path(models_file).parent.parent.name == "keras_attention"
