"""The README's main job, measured: the translate recipe with no flag (the
offline dates task, the `tiny` Transformer), and its Bahdanau-RNN preset.

    python -m benchmarks main_job                       # both, one after the other
    python -m benchmarks main_job --presets dates       # the main job only
    python -m benchmarks main_job --smoke               # 200 examples, 1 epoch: it runs
    python -m benchmarks main_job --presets dates --time-budget 6 \
        --json benchmarks/results_time_budget.json      # with --time-budget 6

Each run is the recipe's own command in a process of its own, into a
fresh folder; the results are what it wrote to `evaluation.json` (exact
match and sacreBLEU on the test split, training seconds) and the wall
time of the whole command. `--repeats N` runs each preset N times, a row
each. Writes `--json` (default `benchmarks/results_main_job.json`).
"""

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PRESETS = ("dates", "dates_bahdanau")
SMOKE_FLAGS = ("--train-examples", "200", "--test-examples", "50", "--epochs", "1")


def run_recipe(preset, folder, flags):
    """The recipe's command with `--preset preset` into `folder`: its
    `evaluation.json` and the command's wall seconds."""
    command = [sys.executable, "-m", "keras_attention.recipes.translate", "--preset", preset]
    command += ["--output-dir", str(folder), *flags]
    started = time.perf_counter()
    subprocess.run(command, check=True)
    seconds = time.perf_counter() - started
    evaluation = json.loads((Path(folder) / "evaluation.json").read_text())
    epochs = json.loads((Path(folder) / "config.json").read_text())["epochs"]
    return {"preset": preset, **evaluation, "epochs": epochs, "wall_seconds": round(seconds, 1)}


REPEATS = 1  # runs of each preset


def add_options(parser):
    parser.add_argument("--presets", nargs="+", choices=PRESETS, default=list(PRESETS))
    parser.add_argument("--time-budget", type=float, help="the recipe's --time-budget, minutes")


def run(smoke, repeats, presets, time_budget):
    flags = SMOKE_FLAGS if smoke else ()
    if time_budget:
        flags += ("--time-budget", str(time_budget))
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for preset in presets:
            for number in range(repeats):
                rows.append(run_recipe(preset, Path(folder) / f"{preset}_{number}", flags))
    return {"rows": rows}


TABLES = [
    (
        "the translate recipe, as the README runs it",
        "rows",
        [
            ("preset", "preset", "s"),
            ("exact_match", "exact match", ".4f"),
            ("sacrebleu", "sacreBLEU", ".2f"),
            ("training_seconds", "training s", ".0f"),
            ("epochs", "epochs", "d"),
            ("wall_seconds", "whole command s", ".0f"),
        ],
    )
]


if __name__ == "__main__":
    from benchmarks import section

    section.main("main_job")
