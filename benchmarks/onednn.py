"""The encoder race (section 2 of `benchmarks.run`, TensorFlow) with
TensorFlow's oneDNN off and on, in turns.

    python -m benchmarks onednn                 # 2 rounds of off, on (about 5 minutes)
    python -m benchmarks onednn --smoke         # tiny sizes: checks it runs

TensorFlow reads `TF_ENABLE_ONEDNN_OPTS` once, as it loads, and its default
differs between CPUs (on for Intel ones and for AMD ones with AVX-512, off
for AMD ones with AVX2 only). So each setting races in a fresh process of
its own, and the settings take turns, round by round, so that a slow spell
of a shared machine falls on both. Every row says the CPU and the setting
it was measured with; ratios (ours over KerasHub's) are what carry over.
Writes `--json` (default `benchmarks/results_onednn.json`).
"""

import json
import os
import statistics
import subprocess
import sys

from benchmarks.run import TRAINING_COLUMNS

SETTINGS = ("0", "1")  # TF_ENABLE_ONEDNN_OPTS: off, on


def race_in_a_fresh_process(setting, smoke, repeats):
    """The encoder race's rows, from a process whose TensorFlow loaded with
    `TF_ENABLE_ONEDNN_OPTS=setting`."""
    environment = {**os.environ, "TF_ENABLE_ONEDNN_OPTS": setting, "KERAS_BACKEND": "tensorflow"}
    arguments = json.dumps({"smoke": smoke, "repeats": repeats})
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.onednn", "--race", arguments],
        env=environment,
        capture_output=True,
        text=True,
    )
    if result.returncode:
        raise RuntimeError(f"the race with oneDNN {setting} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def race(arguments):
    """In the fresh process: section 2's encoder race, as one JSON line."""
    from benchmarks import measure, run

    settings = json.loads(arguments)
    sizes = run.SMOKE if settings["smoke"] else run.FULL
    dropouts = run.DROPOUTS[-1:] if settings["smoke"] else run.DROPOUTS
    matmul_size = 256 if settings["smoke"] else 4096
    rows = run.training_step("encoder", sizes, dropouts, settings["repeats"], matmul_size)
    machine = measure.machine()
    print(json.dumps([{**row, **machine} for row in rows]))


def summary(rows):
    """Ours over KerasHub's (> 1: ours faster) for every setting, dropout
    and XLA choice: the median over rounds, and each round's."""
    ratios = {}
    for row in rows:
        if row["contender"] == "keras_hub":
            key = (row["TF_ENABLE_ONEDNN_OPTS"], row["dropout"], row["xla"])
            ratios.setdefault(key, []).append(row["ours_speedup"])
    return [
        {
            "TF_ENABLE_ONEDNN_OPTS": setting,
            "dropout": dropout,
            "xla": xla,
            "ours_over_keras_hub": statistics.median(values),
            "rounds": ", ".join(f"{value:.2f}" for value in values),
        }
        for (setting, dropout, xla), values in sorted(ratios.items())
    ]


COLUMNS = [
    ("TF_ENABLE_ONEDNN_OPTS", "oneDNN", "s"),
    ("dropout", "dropout", ".1f"),
    ("xla", "XLA", ""),
    ("ours_over_keras_hub", "ours / KerasHub (median)", ".2f"),
    ("rounds", "each round", "s"),
]


REPEATS = 10


def add_options(parser):
    parser.add_argument(
        "--rounds", type=int, default=2, help="turns of off, then on (1 with --smoke)"
    )


def run(smoke, repeats, rounds):
    from benchmarks import measure

    rows = []
    for number in range(1 if smoke else rounds):
        for setting in SETTINGS:
            for row in race_in_a_fresh_process(setting, smoke, repeats):
                rows.append({"round": number + 1, **row})
    return {
        # Each row has the machine as its process saw it; this, both settings.
        "machine": {**measure.machine(), "TF_ENABLE_ONEDNN_OPTS": "0 and 1, in turns"},
        "rows": rows,
        "summary": summary(rows),
    }


TABLES = [
    (
        "encoder training step, every round",
        "rows",
        [("round", "round", "d"), ("TF_ENABLE_ONEDNN_OPTS", "oneDNN", "s"), *TRAINING_COLUMNS],
    ),
    ("ours over KerasHub's, oneDNN off (0) and on (1)", "summary", COLUMNS),
]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--race"]:  # the fresh process's part
        race(sys.argv[2])
    else:
        from benchmarks import section

        section.main("onednn")
