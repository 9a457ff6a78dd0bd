"""`--init-from RUN` keeps a converted run's model and tokenisers: flags
that would make others are refused. (Fine-tuning itself, under every
strategy and backend: test_fine_tune_everywhere.py.)"""

import pytest
from convert_helpers import FIXTURES

from keras_attention.convert import convert
from keras_attention.recipes.config import InitFromError, parse_config
from keras_attention.recipes.translate import PRESETS, TranslateConfig, TranslateRecipe


@pytest.mark.parametrize(
    "flag", [["--tokenizer", "subword"], ["--model-preset", "base"], ["--preset", "wmt14_base"]]
)
def test_flags_that_contradict_the_run_are_refused(tmp_path, flag):
    converted = convert(FIXTURES / "marian", tmp_path / "converted", export=False)
    config = parse_config(TranslateConfig, PRESETS, ["--init-from", str(converted), *flag])
    with pytest.raises(InitFromError, match="contradicts --init-from"):
        TranslateRecipe(config).initial_run(("source", "target"))


def test_a_folder_that_is_not_a_run_is_refused(tmp_path):
    config = parse_config(TranslateConfig, PRESETS, ["--init-from", str(tmp_path)])
    with pytest.raises(InitFromError, match="is not a finished run"):
        TranslateRecipe(config).initial_run(("source", "target"))
