"""What CTranslate2's signatures cost the signatures that were there before
them: `serving_default` and `translate_with_options` of today's export
against the same run exported by the code from before `translate_batch`
and `score_batch`, side by side, one thread.

    python -m benchmarks unused_options RUN_DIR [--baseline REV]
    python -m benchmarks unused_options --smoke      # trains a tiny run first

The baseline's package comes from this repository's history (`git archive
REV`), installed apart without its dependencies (`pip install --no-deps
--target`), and its own export command exports the same run folder. Both
exports are loaded into this process, and each signature is called on the
test split's first sources, batches of 1 and of 32, the two exports in
turns call by call. Every answer must be the same from both. The ratio is
the baseline's median time over today's: above 1, today's is faster; the
goal is at least 0.95 (no more than 5% slower).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (the exports tokenize with its ops)

from benchmarks import measure
from benchmarks.serving_speed import test_sources

# The last commit before `translate_batch` and `score_batch` landed.
BASELINE = "1bf0a47"
SIGNATURES = ("serving_default", "translate_with_options")
BATCH_SIZES = (1, 32)
COLUMNS = [
    ("signature", "signature", ""),
    ("batch_size", "batch", ""),
    ("baseline", "baseline, s", ".4f"),
    ("today", "today, s", ".4f"),
    ("ratio", "baseline / today", ".3f"),
]


def baseline_package(revision, folder):
    """The package at `revision`, installed into `folder` without its
    dependencies (they are this environment's); returns `folder`."""
    source = Path(folder) / "source"
    source.mkdir(parents=True)
    command = ["git", "-C", str(measure.REPOSITORY), "archive", revision]
    archive = subprocess.run(command, capture_output=True, check=False)
    if archive.returncode:
        raise SystemExit(
            f"error: --baseline {revision!r}: git archive failed "
            f"({archive.stderr.decode().strip()}); a clone with its history is needed"
        )
    subprocess.run(["tar", "-x", "-C", str(source)], input=archive.stdout, check=True)
    site = Path(folder) / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"]
        + ["--target", str(site), str(source)],
        check=True,
    )
    return site


def as_before(run_dir, folder):
    """A copy of the run in `folder` whose config.json also says
    `max_length`, the name the baseline's code reads (`max_input_length`
    today); returns `folder`."""
    shutil.copytree(run_dir, folder, ignore=shutil.ignore_patterns("serving", "checkpoints"))
    config_file = Path(folder) / "config.json"
    config = json.loads(config_file.read_text())
    config["max_length"] = config.get("max_input_length", config.get("max_length"))
    config_file.write_text(json.dumps(config))
    return folder


def export(run_dir, folder, package=None):
    """`python -m keras_attention.export RUN_DIR` into `folder`, by today's
    package or the one installed in `package`; returns the version folder."""
    environment = None if package is None else {**os.environ, "PYTHONPATH": str(package)}
    subprocess.run(
        [sys.executable, "-m", "keras_attention.export", str(run_dir), "--export-dir", str(folder)],
        check=True,
        capture_output=True,
        env=environment,
    )
    (version,) = Path(folder).glob("*/1")
    return version


def calls(export_path, texts, beam_size, max_length):
    """Each signature of `SIGNATURES` called on `texts`, as a function
    returning its answers. (The options signature's length input is
    `max_length` in the baseline's export, `max_decoding_length` today.)"""
    signatures = tf.saved_model.load(str(export_path)).signatures
    size = len(texts)
    options = signatures["translate_with_options"].structured_input_signature[1]
    length_input = "max_decoding_length" if "max_decoding_length" in options else "max_length"
    inputs = {
        "serving_default": {"text": tf.constant(texts)},
        "translate_with_options": {
            "text": tf.constant(texts),
            "beam_size": tf.fill([size], beam_size),
            length_input: tf.fill([size], max_length),
        },
    }
    return {
        name: (lambda name=name: signatures[name](**inputs[name])["translation"].numpy())
        for name in SIGNATURES
    }


def race(run_dir, sentences, repeats, baseline=BASELINE):
    """Rows of (signature, batch size, both medians, their ratio)."""
    from keras_attention.run_files import read_config

    config = read_config(Path(run_dir) / "config.json")
    beam_size = int(config.get("beam_size") or 1)
    max_length = int(config["max_input_length"])
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        package = baseline_package(baseline, Path(folder) / "baseline_package")
        exports = {
            "baseline": export(
                as_before(run_dir, Path(folder) / "run"), Path(folder) / "baseline", package
            ),
            "today": export(run_dir, Path(folder) / "today"),
        }
        for batch_size in BATCH_SIZES:
            texts = sentences[:batch_size]
            contenders = {
                name: calls(path, texts, beam_size, max_length) for name, path in exports.items()
            }
            for signature in SIGNATURES:
                answers = {name: contenders[name][signature]() for name in exports}
                if not np.array_equal(answers["baseline"], answers["today"]):
                    raise AssertionError(f"{signature}: the two exports answer differently")
                times = measure.race(
                    {name: contenders[name][signature] for name in exports}, repeats
                )
                rows.append(
                    {
                        "signature": signature,
                        "batch_size": batch_size,
                        **times,
                        "ratio": times["baseline"] / times["today"],
                    }
                )
    return rows


REPEATS = 20
ONE_THREAD = True
TABLES = [("seconds a call, the baseline against today (one thread)", "rows", COLUMNS)]


def add_options(parser):
    parser.add_argument("run_dir", nargs="?", help="a finished translate run")
    parser.add_argument(
        "--baseline", default=BASELINE, help="a git revision (default: %(default)s)"
    )
    parser.add_argument("--sentences", type=int, default=32, help="(default: %(default)s)")


def run(smoke, repeats, run_dir, baseline, sentences):
    if smoke == (run_dir is not None):
        raise SystemExit("error: give RUN_DIR or --smoke")
    with tempfile.TemporaryDirectory() as folder:
        if smoke:
            from keras_attention.recipes import translate

            run_dir = Path(folder) / "run"
            translate.main(
                [
                    *("--data-dir", str(Path(folder) / "tfds")),
                    *("--output-dir", str(run_dir), "--no-export"),
                    *("--train-examples", "256", "--test-examples", "32", "--epochs", "1"),
                ]
            )
        texts = test_sources(run_dir, sentences)
        return {"baseline": baseline, "rows": race(run_dir, texts, repeats, baseline)}


if __name__ == "__main__":
    from benchmarks import section

    section.main("unused_options")
