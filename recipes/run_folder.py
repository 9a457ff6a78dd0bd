"""A run's folder: starting a run in it, resuming the run it holds with the
choices that run made, refusing a run with other settings, and deleting
the run for `--overwrite`."""

import dataclasses
import json
import shutil
from pathlib import Path

import keras

from keras_attention.files import write_json
from keras_attention.recipes.config import (
    INIT_FROM_CONFLICTS,
    RESUMABLE_CHANGES,
    OtherRunInFolder,
    flag_name,
)
from keras_attention.recipes.strategy import make_strategy
from keras_attention.recipes.training import global_batch, set_op_determinism, set_precision
from keras_attention.run_files import RunFiles, read_config


def start_run(config):
    """Seeds, precision and strategy (made before anything else touches
    TensorFlow's devices), the run's folder, and its resolved config.

    Returns `(strategy, output_dir, config)`: the folder this process
    writes in (processes other than the chief write apart from the chief's
    files, `RunStrategy.files_folder`), and the config, which a resumed run
    completes with what it chose for its data (`keep_the_run_s_choices`).
    """
    keras.utils.set_random_seed(config.seed)
    set_op_determinism(config.deterministic)
    set_precision(config.precision)
    strategy = make_strategy(config.strategy, global_batch(config), config.join_timeout)
    output_dir = strategy.files_folder(config.output_dir)
    if config.overwrite:
        clear_run(output_dir)
    else:
        check_same_run(output_dir, config)
        config = keep_the_run_s_choices(output_dir, config)
    output_dir.mkdir(parents=True, exist_ok=True)
    write_json(RunFiles(output_dir).config, dataclasses.asdict(config))
    return strategy, output_dir, config


# What `Recipe.choose_for_data` chooses for fields left None, and what a
# run made before the flag existed did (the flag's name: that behaviour).
CHOSEN_FOR_THE_DATA = ("tokenizer", "vocabulary_size", "model_preset", "epochs")
BEFORE_THE_FLAG = {"batch_tokens": 0, "final_decay": 0.0}


def keep_the_run_s_choices(output_dir, config):
    """`config` with the fields left None that the run in `output_dir`
    chose for its data set as it chose them: a resumed run goes on as it
    began, though a newer recipe would choose otherwise (a flag newer than
    the run: as the run behaved without it)."""
    path = RunFiles(output_dir).config
    if not path.is_file():
        return config
    saved = read_config(path)
    # A fine-tuned run's tokenizer and model are its --init-from run's, again.
    names = [n for n in CHOSEN_FOR_THE_DATA if not (config.init_from and n in INIT_FROM_CONFLICTS)]
    kept = {name: saved.get(name) for name in names}
    kept.update({name: saved.get(name, before) for name, before in BEFORE_THE_FLAG.items()})
    kept = {
        name: value
        for name, value in kept.items()
        if getattr(config, name) is None and value is not None
    }
    return dataclasses.replace(config, **kept)


def check_same_run(output_dir, config):
    """Refuses to mix two runs in one folder: a folder that holds a run
    (its `config.json`) is resumed only by the same settings. A setting left
    None (chosen for the data) matches what the run chose; those of
    `RESUMABLE_CHANGES` may differ."""
    path = RunFiles(output_dir).config
    if not path.is_file():
        return
    try:
        saved = read_config(path)
    except (OSError, ValueError) as error:
        raise OtherRunInFolder(f"{path} cannot be read ({error}); {WAYS_ON}") from None
    differences = [
        f"{flag_name(field)} {_shown(saved, field.name)} there, {getattr(config, field.name)!r} now"
        for field in dataclasses.fields(config)
        if field.name not in RESUMABLE_CHANGES
        and getattr(config, field.name) is not None
        and _saved(saved, field) != _as_json(getattr(config, field.name))
    ]
    if differences:
        raise OtherRunInFolder(
            f"--output-dir {output_dir} holds a run with other settings: "
            + "; ".join(differences)
            + f". {WAYS_ON}"
        )


def _saved(saved, field):
    """The run's setting of `field`; a flag newer than the run (not in its
    config) had its default's effect there."""
    if field.name in saved:
        return saved[field.name]
    return _as_json(field.default) if field.default is not dataclasses.MISSING else MISSING


MISSING = object()
WAYS_ON = "Give a new --output-dir to keep that run, or --overwrite to delete it and start afresh."


def _shown(saved, name):
    return repr(saved[name]) if name in saved else "not set"


def _as_json(value):
    """`value` as `config.json` gives it back (tuples become lists)."""
    return json.loads(json.dumps(value))


def clear_run(output_dir):
    """`--overwrite`: deletes the run in `output_dir`, every file and folder
    of it but the other processes' (`.worker*`, which they clear
    themselves). Only a folder that holds a run (`config.json`) is
    cleared, so a mistyped `--output-dir` deletes nothing else."""
    output_dir = Path(output_dir)
    if not RunFiles(output_dir).config.is_file():
        return
    print(f"--overwrite: deleting the run in {output_dir}")
    for entry in output_dir.iterdir():
        if entry.name.startswith(".worker"):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
