"""Our TF Serving export against CTranslate2 on the same weights: sentences
per second, text in and text out, greedy and beam 4, at batch 1 and 32.

    python -m benchmarks.serving_speed RUN_DIR     # a finished translate run (a Transformer)
    python -m benchmarks.serving_speed --smoke     # trains a tiny run first: checks it runs

Ours: the run's model exported for each beam size, once as a plain graph
and once with its search compiled by XLA (`--jit-compile`), each loaded in
this process as TF Serving loads it and called through `serving_default`.
CTranslate2: the same weights written by `python -m keras_attention.export
RUN --format ctranslate2` in float32 and int8, its tokenisation in
Python beside it (characters, or the run's SentencePiece model), as a
CTranslate2 user would run it. Both engines get the same threads
(`--threads`, 1 by default: TensorFlow's intra- and inter-op pools, and
CTranslate2's `intra_threads`); on a busy 2-core machine two threads'
timings swing widely. Both decode to
the run's `--max-length` with a length penalty of alpha 0.6, each its own
kind (ours Wu et al.'s `((5 + length) / 6) ** alpha`, CTranslate2's
`length ** alpha`): the same kind of search, not always the same answer.
The test split's first sources are the inputs; each figure is the
median of a few passes over them, all four contenders in turn.
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import tensorflow as tf

from benchmarks import measure, report

LENGTH_PENALTY = 0.6  # alpha, as our exports' beam search uses
COLUMNS = [
    ("decoding", "decoding", "s"),
    ("batch_size", "batch", "d"),
    ("ours", "ours (graph)", ".1f"),
    ("ours_xla", "ours (XLA)", ".1f"),
    ("ctranslate2_float32", "CTranslate2 fp32", ".1f"),
    ("ctranslate2_int8", "CTranslate2 int8", ".1f"),
    ("xla_over_float32", "XLA / fp32", ".3f"),
    ("xla_over_int8", "XLA / int8", ".3f"),
    ("ours_over_float32", "graph / fp32", ".3f"),
]


def our_exports(run_dir, folder, beam_sizes):
    """`{(beam size, jit_compile): serving_default}`: the run's model
    exported into `folder` with each beam size, without and with XLA."""
    from keras_attention.export import export_model
    from keras_attention.export.__main__ import load_run
    from keras_attention.run_files import RunFiles

    model, config, _, tokenizer = load_run(RunFiles(run_dir).model, Path(run_dir))
    source, target = tokenizer("source"), tokenizer("target")
    served = {}
    for beam_size in beam_sizes:
        for jit_compile in (False, True):
            name = f"beam_{beam_size}" + ("_xla" if jit_compile else "")
            version = export_model(
                model,
                folder,
                name,
                source,
                target,
                max_length=config["max_length"],
                beam_size=beam_size,
                jit_compile=jit_compile,
            )
            served[beam_size, jit_compile] = tf.saved_model.load(str(version)).signatures[
                "serving_default"
            ]
    return served


def ctranslate2_model(run_dir, folder, quantization):
    flags = ["--format", "ctranslate2", "--export-dir", str(folder)]
    flags += ["--quantization", quantization] if quantization else []
    subprocess.run(
        [sys.executable, "-m", "keras_attention.export", str(run_dir), *flags],
        check=True,
        capture_output=True,
    )
    return folder


def pieces_of(config, folder):
    """How a CTranslate2 user turns text into the model's tokens and back."""
    if config["tokenizer"] == "character":
        return list, "".join
    import sentencepiece

    (model_file,) = Path(folder).glob("source_*.model")
    (target_file,) = Path(folder).glob("target_*.model")
    source, target = (
        sentencepiece.SentencePieceProcessor(model_file=str(f)) for f in (model_file, target_file)
    )
    return (lambda text: source.encode(text, out_type=str)), target.decode_pieces


def use_threads(threads):
    """TensorFlow's thread pools, before it runs anything: `threads` for
    each op (intra) and between ops (inter), as TF Serving's
    `--tensorflow_intra_op_parallelism` and `--tensorflow_inter_op_parallelism`
    set them."""
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)


def run(run_dir, sentences, repeats, beam_sizes=(1, 4), batch_sizes=(1, 32), threads=1):
    import ctranslate2
    import tensorflow_text  # noqa: F401  (a subword export's SentencePiece ops, as the server links them)

    from keras_attention.run_files import RunFiles

    config = json.loads(RunFiles(run_dir).config.read_text())
    max_length = config["max_length"]
    with tempfile.TemporaryDirectory() as folder:
        served = our_exports(run_dir, Path(folder) / "serving", beam_sizes)
        translators = {
            name: ctranslate2.Translator(
                str(ctranslate2_model(run_dir, Path(folder) / name, quantization)),
                intra_threads=threads,
            )
            for name, quantization in (("float32", None), ("int8", "int8"))
        }
        split, join = pieces_of(config, Path(folder) / "float32")
        rows = []
        for beam_size in beam_sizes:
            for batch_size in batch_sizes:
                batches = [
                    sentences[i : i + batch_size] for i in range(0, len(sentences), batch_size)
                ]

                def ours(signature, batches=batches):
                    for batch in batches:
                        signature(text=tf.constant(batch))["translation"].numpy()

                def theirs(translator, batches=batches, beam_size=beam_size):
                    for batch in batches:
                        results = translator.translate_batch(
                            [split(text) for text in batch],
                            beam_size=beam_size,
                            length_penalty=LENGTH_PENALTY,
                            max_decoding_length=max_length,
                            min_decoding_length=0,
                        )
                        [join(result.hypotheses[0]) for result in results]

                contenders = {
                    "ours": lambda s=served[beam_size, False]: ours(s),
                    "ours_xla": lambda s=served[beam_size, True]: ours(s),
                } | {
                    f"ctranslate2_{name}": (lambda t=translator: theirs(t))
                    for name, translator in translators.items()
                }
                seconds = measure.race(contenders, repeats, warmup=1)
                row = {"decoding": "greedy" if beam_size == 1 else f"beam {beam_size}"}
                row["batch_size"] = batch_size
                row |= {name: len(sentences) / s for name, s in seconds.items()}
                row["xla_over_float32"] = row["ours_xla"] / row["ctranslate2_float32"]
                row["xla_over_int8"] = row["ours_xla"] / row["ctranslate2_int8"]
                row["ours_over_float32"] = row["ours"] / row["ctranslate2_float32"]
                rows.append(row)
    return rows


def test_sources(run_dir, count):
    lines = (Path(run_dir) / "test_translations.tsv").read_text(encoding="utf-8").splitlines()
    return [line.split("\t")[0] for line in lines[:count]]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", nargs="?", help="a finished translate run")
    parser.add_argument("--smoke", action="store_true", help="a tiny run, a few sentences")
    parser.add_argument("--sentences", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--threads", type=int, default=1, help="threads for each engine (default: %(default)s)"
    )
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    use_threads(args.threads)
    if args.smoke == (args.run_dir is not None):
        parser.error("give RUN_DIR or --smoke")
    with tempfile.TemporaryDirectory() as folder:
        run_dir = args.run_dir
        if args.smoke:
            from keras_attention.recipes import translate

            run_dir = Path(folder) / "run"
            translate.main(
                [
                    *("--data-dir", str(Path(folder) / "tfds")),
                    *("--output-dir", str(run_dir)),
                    *("--train-examples", "256", "--test-examples", "32", "--epochs", "1"),
                ]
            )
        sentences = test_sources(run_dir, 32 if args.smoke else args.sentences)
        rows = run(run_dir, sentences, 1 if args.smoke else args.repeats, threads=args.threads)
    machine = measure.machine()
    print(report.describe(machine))
    report.print_table(
        f"sentences per second, text in and out ({len(sentences)} test sources; "
        f"{args.threads} thread(s) for each engine)",
        rows,
        COLUMNS,
    )
    if args.json:
        results = {"machine": machine, "threads": args.threads, "rows": rows}
        Path(args.json).write_text(json.dumps(results, indent=1))
    return rows


if __name__ == "__main__":
    main()
