"""Every benchmark from one command.

    python -m benchmarks                            # lists them, one line each
    python -m benchmarks NAME [FLAGS...]            # runs one, e.g.:
    python -m benchmarks serving_speed runs/en_fr   # our exports against CTranslate2
    python -m benchmarks NAME --help                # its flags
    python -m benchmarks decoding generation --smoke   # several sections, in turn

`python -m benchmarks.NAME` runs the same. Each prints its tables and
writes its figures to a JSON file (most by default to their own file in
benchmarks/); benchmarks/README.md keeps the results, as ratios measured
side by side in one run. The sections (`benchmarks/section.py`) share
their flags (`--smoke`, `--repeats`, `--json`) and their JSON format, and
several run in one command, but for those that set TensorFlow's threads;
the others take their own arguments and run one at a time.
"""

import sys
import textwrap

from benchmarks import section

# The benchmarks, each a module of this package: a section (`benchmarks/section.py`)
# or a script with a `main(argv)`.
BENCHMARKS = (
    "run",
    "serving_speed",
    "translation_peer",
    "main_job",
    "pretrained",
    "bert_classifier",
    "embeddings",
    "bpe_tokenizer",
    "modern_attention",
    "generation",
    "decoding",
    "self_attention",
    "onednn",
    "bfloat16",
    "unused_options",
    "report",
)


def summary(name):
    """The first sentence of the benchmark's docstring."""
    module = section.module_of(name)
    paragraph = " ".join(module.__doc__.strip().split("\n\n")[0].split())
    return paragraph.split(". ")[0].rstrip(".:") + "."


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip().splitlines()[0] + " Benchmarks:\n")
        for name in BENCHMARKS:
            lines = textwrap.wrap(summary(name), 78 - 21)
            print(f"  {name:18} " + ("\n" + 21 * " ").join(lines))
        print("\npython -m benchmarks NAME --help: its flags")
        return
    if argv[0] not in BENCHMARKS:
        raise SystemExit(
            f"error: no benchmark {argv[0]!r}; the benchmarks: {', '.join(BENCHMARKS)}"
        )
    names = []
    while argv and argv[0] in BENCHMARKS:
        names.append(argv.pop(0))
    if len(names) == 1 and not section.is_section(names[0]):
        return section.module_of(names[0]).main(argv)
    others = [name for name in names if not section.is_section(name)]
    if others:
        raise SystemExit(
            f"error: {', '.join(others)} take their own arguments and run alone; "
            f"the sections that run together: {', '.join(filter(section.is_section, BENCHMARKS))}"
        )
    alone = [name for name in names if section.runs_alone(name)]
    if len(names) > 1 and alone:
        raise SystemExit(
            "error: these set TensorFlow's threads before it starts, so each runs in a "
            f"command of its own: {', '.join(alone)}"
        )
    if len(names) > 1 and "--json" in argv:
        raise SystemExit("error: --json names one file: give it to one section at a time")
    for name in names:
        section.main(name, argv)


if __name__ == "__main__":
    main()
