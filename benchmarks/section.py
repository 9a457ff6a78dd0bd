"""How a benchmark section runs: its flags, its tables and its JSON file,
the same for every section.

A section is a module of this package that has

- `run(smoke, repeats, **options)`: measures, and returns its figures as a
  dict (a section of one table keeps them under "rows");
- `TABLES`: `(title, key, columns)` for each table it prints from those
  figures: the rows are `figures[key]` (a tuple of keys reaches into
  nested dicts; a dict there is a table of one row), `columns` as
  `report.print_table` takes them; a key the figures lack is a table this
  run did not make;
- `REPEATS`: timed calls a figure unless `--repeats` says (1 with `--smoke`);
- optionally `add_options(parser)`: its own flags, given to `run` by name;
- optionally `ONE_THREAD = True`: every engine runs on one thread (so it
  runs alone: TensorFlow's threads are set before it starts);
- optionally `RUNS_ALONE = True`: never with other sections in one
  command;
- optionally `RESULTS_FILE`: its JSON file, if not
  `benchmarks/results_NAME.json` (None: only where `--json` says);
- optionally `WANTS_RESULTS_PATH = True`: `run` is also given
  `results_path`, where the JSON file goes (None: nowhere), to write
  other files beside it.

`python -m benchmarks NAME...` and `python -m benchmarks.NAME` both come
here. The JSON file starts with the provenance (command, date, commit,
machine, load), then `smoke` and `repeats`, then the figures. A smoke run
writes one only where `--json` says, so that it never replaces measured
figures.
"""

import argparse
import importlib
import os

SMOKE_REPEATS = 1


def module_of(name):
    """The benchmark `name`: the module `benchmarks.NAME`."""
    return importlib.import_module(f"benchmarks.{name}")


def is_section(name):
    return hasattr(module_of(name), "TABLES")


def runs_alone(name):
    module = module_of(name)
    return getattr(module, "ONE_THREAD", False) or getattr(module, "RUNS_ALONE", False)


def results_file(name):
    """Where section `name` writes its figures unless `--json` says."""
    return getattr(module_of(name), "RESULTS_FILE", f"benchmarks/results_{name}.json")


def parser_for(name):
    module = module_of(name)
    parser = argparse.ArgumentParser(
        prog=f"python -m benchmarks {name}", description=module.__doc__.splitlines()[0]
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: checks that it runs")
    parser.add_argument(
        "--repeats",
        type=int,
        help=f"timed calls a figure ({module.REPEATS}; {SMOKE_REPEATS} with --smoke)",
    )
    parser.add_argument(
        "--json",
        help=f"where the figures go ({results_file(name) or 'nowhere'} unless given; "
        "none with --smoke)",
    )
    if hasattr(module, "add_options"):
        module.add_options(parser)
    return parser


def main(name, argv=None):
    """Runs section `name` with the command-line flags `argv`; returns its
    figures as written."""
    from benchmarks import measure, report
    from keras_attention.files import write_json

    module = module_of(name)
    args = parser_for(name).parse_args(argv)
    if args.repeats is not None and args.repeats < 1:
        raise SystemExit(f"error: --repeats must be 1 or more, not {args.repeats}")
    repeats = args.repeats or (SMOKE_REPEATS if args.smoke else module.REPEATS)
    options = {
        key: value for key, value in vars(args).items() if key not in ("smoke", "repeats", "json")
    }
    path = args.json or (None if args.smoke else results_file(name))
    if getattr(module, "WANTS_RESULTS_PATH", False):
        options["results_path"] = path
    one_thread = getattr(module, "ONE_THREAD", False)
    if one_thread:
        measure.use_threads(1)
    results = {**measure.provenance(name, argv), "smoke": args.smoke, "repeats": repeats}
    results.update(module.run(args.smoke, repeats, **options))
    results["load_average_after"] = os.getloadavg()
    print("\n" + report.describe(results["machine"]) + ("; one thread each" if one_thread else ""))
    print_tables(module, results)
    if path:
        write_json(path, results)
        print(f"\nwrote {path}")
    return results


def print_tables(module, figures):
    from benchmarks import report

    for title, key, columns in module.TABLES:
        rows = figures
        for part in key if isinstance(key, tuple) else (key,):
            rows = rows.get(part, {})
        if rows:
            report.print_table(title, [rows] if isinstance(rows, dict) else rows, columns)


def run_and_print(module, smoke, repeats, **options):
    """A section's figures, its tables printed: a part of a larger run
    (`benchmarks.run`), which writes them into its own file."""
    figures = module.run(smoke, repeats, **options)
    print_tables(module, figures)
    return figures
