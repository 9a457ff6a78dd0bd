"""`--init-from RUN`: fine-tuning a finished run, whose tokenisers and model
a recipe takes in place of those it would make for the data."""

import dataclasses

import keras

from keras_attention.data.tokenizers import load_run_tokenizer
from keras_attention.recipes.config import INIT_FROM_CONFLICTS, InitFromError
from keras_attention.run_files import RunFiles, read_config


def initial_run(config, sides):
    """The run `--init-from` names: `(tokenizers, config)`, its tokenisers
    for `sides` ("source", "target" or "text") and `config` with the run's
    tokeniser kind and model in place of what would be made for the data
    (None without `--init-from`)."""
    if not config.init_from:
        return None
    for name in INIT_FROM_CONFLICTS:  # what would make a model or vocabulary anew
        value = getattr(config, name, None)
        if value not in (None, {}, False):
            raise InitFromError(
                f"--{name.replace('_', '-')} {value!r} (given, or set by --preset) "
                f"contradicts --init-from {config.init_from}, whose model and tokenizers "
                "are kept"
            )
    files = RunFiles(config.init_from)
    for needed in (files.config, files.model):
        if not needed.is_file():
            raise InitFromError(
                f"--init-from {config.init_from} is not a finished run: {needed} not found"
            )
    run_config = read_config(files.config)
    try:
        tokenizers = {side: load_run_tokenizer(files, run_config, side) for side in sides}
    except ValueError as error:
        raise InitFromError(f"--init-from {config.init_from}: {error}") from None
    print(f"Fine-tuning {files.model}: its model and tokenizers ({run_config['tokenizer']})")
    return tokenizers, dataclasses.replace(
        config, tokenizer=run_config["tokenizer"], model_preset=f"from {files.folder}"
    )


def initial_model(config):
    """The model of `--init-from`'s run (call under the strategy's scope)."""
    import keras_attention.models  # noqa: F401  (registers the model classes)

    return keras.saving.load_model(RunFiles(config.init_from).model)
