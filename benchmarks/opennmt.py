"""OpenNMT-py as a translation peer: its own virtual environment, its
documented Transformer recipe, trained for a wall-clock budget, beam 4.

OpenNMT-py 3.5.1 (its last release; the project's successor is Eole)
pins `torch<2.3,>=2.1`. PyPI has those releases only as CUDA builds of
several GB, so the environment takes the CPU build of a current torch
(`TORCH`) and installs OpenNMT-py without its pins, then its other
requirements. Two things differ from the torch it was written for, both
handled here: `torch.load` reads only weights by default since torch 2.6,
and OpenNMT-py's checkpoints hold its vocabulary and options too, so it
runs with `TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`; and it warns about
`torch.cuda.amp` names, which changes nothing on a CPU.

The recipe is the one OpenNMT-py documents for the Transformer (its FAQ,
"How do I use the Transformer model?", and
`config/config-transformer-base-1GPU.yml`): Adam with beta2 0.998, the
noam schedule with factor 2 and 8,000 warm-up steps, label smoothing 0.1,
dropout 0.1, batches of 4,096 tokens normalised by tokens, Glorot
initialisation, sinusoidal positions. It documents no preset for small
data, so two things are set to the budget, the same for every run:
- the model has our run's size (layers, d_model, heads, feed-forward), so
  both spend the budget on the same network;
- gradients are not accumulated (`accum_count` 1, where the recipe's 8
  stands in for 8 GPUs): on 2 CPU cores, 8 x 4,096 tokens an update
  would leave a few hundred updates in a 10-minute budget;
and it loads its data in the training process (`num_workers` 0): its
default of 2 loader processes starves the training on 2 cores.
`warmup_steps` is a parameter, because 8,000 warm-up steps is more than
such a budget holds; `translation_peer` runs the documented value and one
sized to the budget and reports both.

It reads the same text with our run's SentencePiece models, so both see
the same subword pieces; it drops training pairs longer than our
`--max-length` in pieces (its `filtertoolong`), where ours truncates.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

OPENNMT = "OpenNMT-py==3.5.1"
TORCH = "torch==2.13.0"
# OpenNMT-py 3.5.1's requirements but torch; it imports spacy and fasttext
# (its terminology and language-id transforms) at start-up.
REQUIREMENTS = [
    "configargparse",
    "ctranslate2>=4,<5",
    "tensorboard>=2.3",
    "flask",
    "waitress",
    "pyonmttok>=1.37,<2",
    "pyyaml",
    "sacrebleu",
    "rapidfuzz",
    "pyahocorasick",
    "fasttext-wheel",
    "spacy",
    "six",
    "numpy",
    "sentencepiece",  # its sentencepiece transform, which the benchmark's config uses
]
# What the benchmark's OpenNMT-py commands import: the environment must have each.
IMPORTS = ("onmt", "torch", "sentencepiece", "pyonmttok", "ctranslate2", "spacy", "fasttext")
ENVIRONMENT = {"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1", "PYTHONWARNINGS": "ignore"}


def environment(folder):
    """Builds OpenNMT-py's virtual environment in `folder` unless it is
    already there; returns the folder of its commands."""
    folder = Path(folder)
    commands = folder / "bin"
    if not (commands / "onmt_train").exists():
        subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
        pip = [str(commands / "python"), "-m", "pip", "install", "-q"]
        subprocess.run(pip + [TORCH], check=True)
        subprocess.run(pip + ["--no-deps", OPENNMT], check=True)
        subprocess.run(pip + REQUIREMENTS, check=True)
    check_imports(commands / "python")
    return commands


def check_imports(python):
    """Raises RuntimeError naming each module of `IMPORTS` that `python`
    cannot import (an environment built by an older benchmark lacked
    sentencepiece, and OpenNMT-py failed only once it read the data)."""
    missing = [
        module
        for module in IMPORTS
        if subprocess.run([str(python), "-c", f"import {module}"], capture_output=True).returncode
    ]
    if missing:
        raise RuntimeError(
            f"OpenNMT-py's environment ({python}) cannot import {', '.join(missing)}: "
            "delete its folder and run the benchmark again to rebuild it"
        )


def _variables():
    """The environment variables OpenNMT-py runs with."""
    return dict(os.environ, **ENVIRONMENT)


def _run(commands, name, *arguments, **kwargs):
    return subprocess.run(
        [str(commands / name), *map(str, arguments)], check=True, env=_variables(), **kwargs
    )


def write_lines(path, texts):
    Path(path).write_text("".join(text + "\n" for text in texts), encoding="utf-8")


def config(folder, model, max_length, warmup_steps):
    """The training config (a dict; JSON is YAML): the documented recipe at
    `model`'s size (a dict of num_layers, model_dim, num_heads,
    intermediate_dim, dropout), on the files `prepare` wrote."""
    folder = Path(folder)
    data = {
        "path_src": str(folder / "train.src"),
        "path_tgt": str(folder / "train.tgt"),
        "transforms": ["sentencepiece", "filtertoolong"],
    }
    valid = dict(data, path_src=str(folder / "valid.src"), path_tgt=str(folder / "valid.tgt"))
    return {
        "save_data": str(folder / "data"),
        "overwrite": True,
        "src_vocab": str(folder / "vocabulary.src"),
        "tgt_vocab": str(folder / "vocabulary.tgt"),
        "src_vocab_size": 100_000,  # every piece of the SentencePiece models
        "tgt_vocab_size": 100_000,
        "src_subword_model": str(folder / "source.model"),
        "tgt_subword_model": str(folder / "target.model"),
        "src_seq_length": max_length,
        "tgt_seq_length": max_length,
        "data": {"corpus_1": dict(data, weight=1), "valid": valid},
        "save_model": str(folder / "model"),
        "save_checkpoint_steps": 100,  # the budget's end loses at most 100 steps
        "keep_checkpoint": 2,
        "seed": 1,
        "train_steps": 10_000_000,  # the budget stops it
        "valid_steps": 10_000_000,
        "report_every": 100,
        # Its data loading in the training process: with its default of 2
        # worker processes on 2 cores, a step took 3.5x as long (measured).
        "num_workers": 0,
        # The documented Transformer recipe.
        "batch_type": "tokens",
        "batch_size": 4096,
        "valid_batch_size": 2048,
        "accum_count": [1],
        "optim": "adam",
        "adam_beta1": 0.9,
        "adam_beta2": 0.998,
        "learning_rate": 2.0,
        "decay_method": "noam",
        "warmup_steps": warmup_steps,
        "max_grad_norm": 0.0,
        "label_smoothing": 0.1,
        "param_init": 0.0,
        "param_init_glorot": True,
        "normalization": "tokens",
        "encoder_type": "transformer",
        "decoder_type": "transformer",
        "position_encoding": True,
        "enc_layers": model["num_layers"],
        "dec_layers": model["num_layers"],
        "heads": model["num_heads"],
        "hidden_size": model["model_dim"],
        "word_vec_size": model["model_dim"],
        "transformer_ff": model["intermediate_dim"],
        "dropout": [model["dropout"]],
        "attention_dropout": [model["dropout"]],
    }


def prepare(folder, train_pairs, validation_pairs, source_model, target_model):
    """Writes the splits as OpenNMT-py reads them (one text a line) and
    copies in the SentencePiece models."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, pairs in (("train", train_pairs), ("valid", validation_pairs)):
        write_lines(folder / f"{name}.src", [source for source, _ in pairs])
        write_lines(folder / f"{name}.tgt", [target for _, target in pairs])
    (folder / "source.model").write_bytes(Path(source_model).read_bytes())
    (folder / "target.model").write_bytes(Path(target_model).read_bytes())


def train(commands, folder, settings, seconds):
    """Builds the vocabularies and trains for `seconds` of wall-clock time,
    counted from the model's first step (OpenNMT-py's "Starting training"
    line); returns (the newest checkpoint, its step, its training seconds)."""
    folder = Path(folder)
    config_file = folder / "config.yaml"
    config_file.write_text(json.dumps(settings, indent=1))
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _run(commands, "onmt_build_vocab", "-config", config_file, "-n_sample", -1, **quiet)
    log_file = folder / "train.log"
    with open(log_file, "w") as log:
        process = subprocess.Popen(
            [str(commands / "onmt_train"), "-config", str(config_file)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=_variables(),
            start_new_session=True,  # its data loaders go with it
        )
    started = None
    while process.poll() is None:
        if started is None and "Starting training" in log_file.read_text():
            started = time.time()
        if started is not None and time.time() - started > seconds:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait()
            break
        time.sleep(0.5)
    else:
        raise RuntimeError(f"onmt_train stopped by itself; see {log_file}")
    checkpoints = sorted(
        folder.glob("model_step_*.pt"), key=lambda path: int(re.findall(r"\d+", path.stem)[-1])
    )
    if not checkpoints:
        raise RuntimeError(f"onmt_train saved no checkpoint in {seconds} s; see {log_file}")
    newest = checkpoints[-1]
    step = int(re.findall(r"\d+", newest.stem)[-1])
    return newest, step, round(newest.stat().st_mtime - started, 1)


def translate(commands, folder, checkpoint, sources, beam_size, max_length):
    """Beam search over `sources` with OpenNMT-py's `onmt_translate` (its
    defaults otherwise: no length penalty); returns (texts, seconds)."""
    import sentencepiece

    folder = Path(folder)
    source_pieces = sentencepiece.SentencePieceProcessor(model_file=str(folder / "source.model"))
    target_pieces = sentencepiece.SentencePieceProcessor(model_file=str(folder / "target.model"))
    write_lines(
        folder / "test.src", [" ".join(source_pieces.encode(s, out_type=str)) for s in sources]
    )
    started = time.time()
    options = ["-beam_size", beam_size, "-batch_size", 64, "-max_length", max_length]
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    inputs = ["-model", checkpoint, "-src", folder / "test.src", "-output", folder / "test.pred"]
    _run(commands, "onmt_translate", *inputs, *options, **quiet)
    seconds = time.time() - started
    lines = (folder / "test.pred").read_text(encoding="utf-8").split("\n")[: len(sources)]
    return [target_pieces.decode(line.split()) for line in lines], round(seconds, 1)
