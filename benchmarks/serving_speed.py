"""Our TF Serving export against CTranslate2 on the same weights, through
CTranslate2's own API on both sides: `translate_batch`, text in and text
out, one thread each.

    python -m benchmarks serving_speed RUN_DIR     # a finished translate run (a Transformer)
    python -m benchmarks serving_speed --smoke     # trains a tiny run first: checks it runs

A section (`benchmarks/section.py`): `--smoke`, `--repeats` and `--json`
as every section takes them; it writes its figures only where `--json`
says, and runs alone (it sets TensorFlow's threads).

Three measures:
1. **Throughput**: sentences per second over the test split's first
   sources, greedy and beam 4, at batch 1 and 32 (`--beam-sizes`,
   `--batch-sizes`). Ours: the run exported as a plain graph and with
   `--export-jit-compile` (each request's search compiled by XLA), each loaded
   in this process as TF Serving loads it, and called through its
   `translate_batch` signature with every option given per row, as a
   service calls it. CTranslate2: the same weights
   written by `python -m keras_attention.export RUN --format ctranslate2`
   in float32 and int8, its `translate_batch` with the same options, its
   tokenisation in Python beside it (the run's SentencePiece models, or
   characters). Both searches are the same (CTranslate2's options, held
   equal in tests/export/test_translate_batch.py): the share of identical
   answers is printed beside the speeds.
2. **Latency**: one sentence of ten words, greedy, batch 1, called 200
   times in turns (ours, then CTranslate2's, ...), the median (p50) and
   the 99th percentile (p99) of each.
3. **Token batching**: a `Translator` over the XLA export translating a
   file of the test sources (shuffled) with `translate_file`, batches cut
   by tokens (`batch_type="tokens"`) against batches of 32 sentences with
   as many tokens on average.

Both engines get the same threads (`--threads`, 1 by default:
TensorFlow's intra- and inter-op pools, and CTranslate2's
`intra_threads`); on a busy 2-core machine two threads' timings swing
widely. Sources are cut to the run's `--max-input-length` tokens on both sides.
Each throughput figure is the median of a few passes, all contenders in
turn.
"""

import contextlib
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

from benchmarks import measure

# A sentence of ten words, as one user sends it.
SENTENCE = "The file could not be opened because the folder does not exist."
LATENCY_CALLS = 200
QUICK_LATENCY_CALLS = 5  # with --repeats 1 (a smoke run)
# The throughput race's searches and batches (`--beam-sizes`, `--batch-sizes`).
BEAM_SIZES = (1, 4)
BATCH_SIZES = (1, 32)
COLUMNS = [
    ("decoding", "decoding", "s"),
    ("batch_size", "batch", "d"),
    ("ours", "ours (graph)", ".1f"),
    ("ours_xla", "ours (XLA)", ".1f"),
    ("ctranslate2_float32", "CTranslate2 fp32", ".1f"),
    ("ours_xla_int8", "ours (XLA int8)", ".1f"),
    ("ctranslate2_int8", "CTranslate2 int8", ".1f"),
    ("xla_over_float32", "XLA / fp32", ".3f"),
    ("xla_int8_over_int8", "XLA int8 / int8", ".3f"),
    ("ours_over_float32", "graph / fp32", ".3f"),
    ("same_answers", "XLA = fp32", ".3f"),
    ("int8_same_answers", "XLA int8 = XLA", ".3f"),
    ("their_int8_same_answers", "CT2 int8 = fp32", ".3f"),
]
BLEU_BEAM_SIZE = 4  # the recipe's, for its test BLEU
BLEU_COLUMNS = [
    ("contender", "contender", "s"),
    ("sentences", "sentences", "d"),
    ("sacrebleu", "sacreBLEU", ".2f"),
]
OPUS_MT_DECODING_LENGTH = 32
BATCHING_COLUMNS = [
    ("sentences", "sentences", "d"),
    ("sentences_per_batch", "sentences a batch", "d"),
    ("tokens_per_batch", "tokens a batch", "d"),
    ("examples_per_second", "by sentences /s", ".1f"),
    ("tokens_per_second", "by tokens /s", ".1f"),
    ("tokens_over_examples", "tokens / sentences", ".3f"),
    ("same_translations", "same translations", ""),
]
LATENCY_COLUMNS = [
    ("contender", "contender", "s"),
    ("p50_ms", "p50 (ms)", ".2f"),
    ("p99_ms", "p99 (ms)", ".2f"),
    ("p50_over_ctranslate2", "p50 / CTranslate2 fp32's", ".2f"),
]


# Our exports: a plain graph, its searches compiled by XLA, and the same
# with int8 weights (`--quantization int8`).
EXPORTS = {
    "ours": {},
    "ours_xla": {"export_jit_compile": True},
    "ours_xla_int8": {"export_jit_compile": True, "quantization": "int8"},
}


def our_exports(run_dir, folder):
    """`{name: export folder}` for each of `EXPORTS`, written as
    `python -m keras_attention.export RUN` writes them (or as an earlier
    part wrote them in `folder`: an export's version folder appears whole)."""
    from keras_attention.export.run import export_run

    exports = {}
    for name, settings in EXPORTS.items():
        written = Path(folder) / name / "1"
        if not (written / "saved_model.pb").is_file():
            written = export_run(run_dir, {"export_dir": folder, "export_name": name, **settings})
        exports[name] = written
    return exports


def ctranslate2_model(run_dir, folder, quantization):
    """The run as a CTranslate2 model in `folder` (or the one an earlier part
    wrote there: the command writes the folder whole or not at all)."""
    if (Path(folder) / "model.bin").is_file():
        return folder
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


def request(texts, beam_size, options):
    """A `translate_batch` request as numpy arrays: `texts`, no target
    prefix or suppressed sequence, and every option per row, CTranslate2's
    default unless `options` or `beam_size` give it."""
    from keras_attention.export.servers import translation

    size = len(texts)
    inputs = {"text": np.array(texts, object), "target_prefix": np.array([""] * size, object)}
    inputs["suppress_sequences"] = np.array([[""]] * size, object)
    for name, (dtype, default) in translation.signature_options().items():
        value = beam_size if name == "beam_size" else options.get(name, default)
        inputs[name] = np.full([size], value, dtype.as_numpy_dtype)
    return inputs


def our_translate_batch(export, **options):
    """`translate(texts, beam_size)` through the export's `translate_batch`
    signature, every option given per row: CTranslate2's defaults, or
    `options`."""
    signature = tf.saved_model.load(str(export)).signatures["translate_batch"]

    def translate(texts, beam_size):
        inputs = request(texts, beam_size, options)
        inputs = {name: tf.constant(value) for name, value in inputs.items()}
        return [h.decode() for h in signature(**inputs)["hypotheses"].numpy()[:, 0]]

    return translate


def served_translate_batch(export, threads):
    """`translate(texts, beam_size)` as TF Serving runs the export: the TF1
    loader into a session of its own (`threads` in its pools), the
    request's tensors fed to the SignatureDef's input names. Python's
    `loaded.signatures[...]` adds its own cost to each call (converting
    the inputs, an eager function call) that the model server does not
    pay."""
    import tensorflow_text  # noqa: F401  (the SentencePiece ops, as the server links them)

    graph = tf.Graph()
    config = tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=threads, inter_op_parallelism_threads=threads
    )
    session = tf.compat.v1.Session(graph=graph, config=config)
    with graph.as_default():
        meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], str(export))
    signature = meta_graph.signature_def["translate_batch"]
    fetch = signature.outputs["hypotheses"].name

    def translate(texts, beam_size):
        inputs = request(texts, beam_size, {})
        feeds = {signature.inputs[name].name: value for name, value in inputs.items()}
        return [h.decode() for h in session.run(fetch, feeds)[:, 0]]

    return translate


def their_translate_batch(translator, split, join, max_input_length, **options):
    def translate(texts, beam_size):
        results = translator.translate_batch(
            [split(text) for text in texts],
            beam_size=beam_size,
            max_input_length=max_input_length,
            **options,
        )
        return [join(result.hypotheses[0]) for result in results]

    return translate


def throughput(contenders, sentences, repeats, beam_sizes, batch_sizes):
    rows = []
    for beam_size in beam_sizes:
        for batch_size in batch_sizes:
            batches = [sentences[i : i + batch_size] for i in range(0, len(sentences), batch_size)]
            answers = {}

            def timed(name, translate, batches=batches, beam_size=beam_size, answers=answers):
                def run():
                    answers[name] = [a for b in batches for a in translate(b, beam_size)]

                return run

            functions = {name: timed(name, f) for name, f in contenders.items()}
            seconds = measure.race(functions, repeats, warmup=1)
            row = {"decoding": "greedy" if beam_size == 1 else f"beam {beam_size}"}
            row["batch_size"] = batch_size
            row |= {name: len(sentences) / s for name, s in seconds.items()}
            row["xla_over_float32"] = row["ours_xla"] / row["ctranslate2_float32"]
            row["xla_int8_over_int8"] = row["ours_xla_int8"] / row["ctranslate2_int8"]
            row["ours_over_float32"] = row["ours"] / row["ctranslate2_float32"]
            row["same_answers"] = same_share(answers["ours_xla"], answers["ctranslate2_float32"])
            row["int8_same_answers"] = same_share(answers["ours_xla_int8"], answers["ours_xla"])
            row["their_int8_same_answers"] = same_share(
                answers["ctranslate2_int8"], answers["ctranslate2_float32"]
            )
            rows.append(row)
    return rows


def same_share(answers, reference):
    """The share of `answers` equal to `reference`'s, row by row."""
    return sum(a == b for a, b in zip(answers, reference, strict=True)) / len(reference)


def latency(contenders, calls=LATENCY_CALLS):
    """p50 and p99 of one sentence, greedy, batch 1, each contender called
    in turn."""
    times = {name: [] for name in contenders}
    for translate in contenders.values():
        translate([SENTENCE], 1)  # warm up (XLA compiles this shape)
    for _ in range(calls):
        for name, translate in contenders.items():
            start = time.perf_counter()
            translate([SENTENCE], 1)
            times[name].append(time.perf_counter() - start)
    rows = []
    for name, values in times.items():
        values.sort()
        rows.append(
            {
                "contender": name,
                "p50_ms": 1000 * statistics.median(values),
                "p99_ms": 1000 * values[round(0.99 * (len(values) - 1))],
            }
        )
    reference = next(r["p50_ms"] for r in rows if r["contender"] == "ctranslate2_float32")
    for row in rows:
        row["p50_over_ctranslate2"] = row["p50_ms"] / reference
    return rows


def token_batching(export, sentences, folder, repeats, batch_size=32):
    """Sentences per second of `Translator.translate_file` over the test
    sources shuffled, batches cut by sentences and by as many tokens."""
    from keras_attention import Translator

    translator = Translator(export)
    shuffled = list(sentences)
    random.Random(0).shuffle(shuffled)
    source = Path(folder) / "shuffled.txt"
    source.write_text("".join(line + "\n" for line in shuffled), encoding="utf-8")
    lengths = translator._lengths(shuffled, 1, "tokens")
    tokens = round(batch_size * sum(lengths) / len(lengths))
    cuts = {"examples": batch_size, "tokens": tokens}
    seconds = measure.race(
        {
            kind: (
                lambda kind=kind, size=size: translator.translate_file(
                    source, Path(folder) / f"{kind}.txt", max_batch_size=size, batch_type=kind
                )
            )
            for kind, size in cuts.items()
        },
        repeats,
        warmup=1,
    )
    same = (Path(folder) / "examples.txt").read_text() == (Path(folder) / "tokens.txt").read_text()
    return {
        "sentences": len(shuffled),
        "sentences_per_batch": batch_size,
        "tokens_per_batch": tokens,
        "examples_per_second": len(shuffled) / seconds["examples"],
        "tokens_per_second": len(shuffled) / seconds["tokens"],
        "tokens_over_examples": seconds["examples"] / seconds["tokens"],
        "same_translations": same,
    }


def run_races(
    run_dir,
    sentences,
    repeats,
    beam_sizes=BEAM_SIZES,
    batch_sizes=BATCH_SIZES,
    threads=1,
    bleu_sentences=0,
    contenders_dir=None,
):
    """The throughput rows, the latency rows, the token batching's
    figures and the BLEU rows (over `bleu_sentences` of the test split,
    None: all of it), on the run's model (its contenders in
    `contenders_dir`, or in a temporary folder)."""
    with contenders_folder(contenders_dir, run_dir) as folder:
        contenders, exports = all_contenders(run_dir, folder, threads)
        rows = throughput(contenders, sentences, repeats, beam_sizes, batch_sizes)
        served = {"ours_xla_served": served_translate_batch(exports["ours_xla"], threads)}
        calls = LATENCY_CALLS if repeats > 1 else QUICK_LATENCY_CALLS
        latency_rows = latency(contenders | served, calls=calls)
        batching = token_batching(exports["ours_xla"], sentences, folder, repeats)
        bleu_rows = bleu(contenders, run_dir, bleu_sentences) if bleu_sentences != 0 else []
    return rows, latency_rows, batching, bleu_rows


def opus_mt_throughput(run_dir, sentences, repeats, threads):
    """The throughput race on a model of OPUS-MT's sizes with random
    weights: every answer is `OPUS_MT_DECODING_LENGTH` tokens long (random
    weights rarely end a sentence), the same work on each side."""
    with tempfile.TemporaryDirectory() as folder:
        opus_run = opus_mt_sized_run(run_dir, Path(folder) / "run")
        options = {
            "max_decoding_length": OPUS_MT_DECODING_LENGTH,
            "min_decoding_length": OPUS_MT_DECODING_LENGTH,
        }
        contenders, _ = all_contenders(opus_run, folder, threads, **options)
        return throughput(contenders, sentences, repeats, BEAM_SIZES, BATCH_SIZES)


def contenders_folder(contenders_dir, run_dir):
    """A context giving the folder of the contenders' files: `contenders_dir`
    (kept, so that the next part finds them; it records `run_dir`, and
    refuses another run's), or a temporary one."""
    if contenders_dir is None:
        return tempfile.TemporaryDirectory()
    marker, run = Path(contenders_dir) / "run_dir.txt", str(Path(run_dir).resolve())
    if marker.is_file() and marker.read_text() != run:
        raise SystemExit(
            f"error: --contenders-dir {contenders_dir} holds the contenders of "
            f"{marker.read_text()}, not of {run}"
        )
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(run)
    return contextlib.nullcontext(contenders_dir)


def all_contenders(run_dir, folder, threads, **options):
    """`({name: translate(texts, beam_size)}, {name: our export})`: our
    exports (`EXPORTS`) and CTranslate2's float32 and int8 models of the
    run, with CTranslate2's defaults or `options`."""
    import ctranslate2
    import tensorflow_text  # noqa: F401  (a subword export's SentencePiece ops, as the server links them)

    from keras_attention.run_files import RunFiles, read_config

    config = read_config(RunFiles(run_dir).config)
    exports = our_exports(run_dir, Path(folder) / "serving")
    contenders = {name: our_translate_batch(path, **options) for name, path in exports.items()}
    split, join = None, None
    for name, quantization in (("float32", None), ("int8", "int8")):
        model = ctranslate2_model(run_dir, Path(folder) / name, quantization)
        split, join = pieces_of(config, model) if split is None else (split, join)
        translator = ctranslate2.Translator(str(model), intra_threads=threads)
        contenders[f"ctranslate2_{name}"] = their_translate_batch(
            translator, split, join, config["max_input_length"], **options
        )
    return contenders, exports


def bleu(contenders, run_dir, count=None, batch_size=32):
    """sacreBLEU of each contender on the first `count` sentences of the
    run's test split (None: all of it), beam search, batches of
    `batch_size`."""
    import sacrebleu

    sources, references = map(list, zip(*test_pairs(run_dir, count), strict=True))
    rows = []
    for name, translate in contenders.items():
        answers = [
            answer
            for i in range(0, len(sources), batch_size)
            for answer in translate(sources[i : i + batch_size], BLEU_BEAM_SIZE)
        ]
        score = sacrebleu.corpus_bleu(answers, [list(references)]).score
        rows.append({"contender": name, "sentences": len(sources), "sacrebleu": score})
    return rows


def opus_mt_sized_run(run_dir, folder):
    """A run folder with OPUS-MT's sizes (6 + 6 layers, d_model 512, 8
    heads, FF 2048: the `base` preset) and random weights, over
    `run_dir`'s vocabularies and config."""
    import shutil

    import keras

    from keras_attention.data.tokenizers import load_run_tokenizer
    from keras_attention.models import build_transformer
    from keras_attention.run_files import RunFiles

    files, copy = RunFiles(run_dir), RunFiles(folder)
    Path(folder).mkdir(parents=True)
    config = json.loads(files.config.read_text())
    sizes = []
    for side in ("source", "target"):
        shutil.copy(files.vocabulary(side, config["tokenizer"]), folder)
        sizes.append(load_run_tokenizer(files, config, side).vocabulary_size)
    keras.utils.set_random_seed(0)
    model = build_transformer(*sizes, preset="base", share_embeddings=sizes[0] == sizes[1])
    ids = np.ones([1, 4], "int32")
    model({"source_ids": ids, "target_ids": ids})  # builds every weight
    model.save(copy.model)
    copy.config.write_text(json.dumps(config))
    return Path(folder)


def test_pairs(run_dir, count=None):
    """The first `count` (source, reference) pairs of the run's test split
    (None: all), from its `test_translations.tsv` (after the header)."""
    from keras_attention.run_files import RunFiles

    lines = RunFiles(run_dir).test_translations.read_text(encoding="utf-8").splitlines()
    rows = [line.split("\t") for line in lines[1:]][:count]
    return [(row[0], row[1]) for row in rows]


def test_sources(run_dir, count):
    return [source for source, _ in test_pairs(run_dir, count)]


# The benchmark's parts. XLA keeps every program it compiles, and each maps
# some hundreds of memory regions: one process that compiled them all ran
# past Linux's limit (`vm.max_map_count`, 65,530) and aborted, so each part
# runs in a fresh process of its own.
PARTS = ("speed", "bleu", "opus_mt")


def measure_part(part, run_dir, options):
    """The figures of one part, a dict for the JSON file (`options`: the
    section's flags, by name)."""
    sentences = test_sources(run_dir, options["sentences"])
    repeats, threads = options["repeats"], options["threads"]
    if part == "speed":
        rows, latency_rows, batching, _ = run_races(
            run_dir,
            sentences,
            repeats,
            beam_sizes=options["beam_sizes"],
            batch_sizes=options["batch_sizes"],
            threads=threads,
            contenders_dir=options["contenders_dir"],
        )
        return {"rows": rows, "latency": latency_rows, "token_batching": batching}
    if part == "bleu":
        with contenders_folder(options["contenders_dir"], run_dir) as folder:
            contenders, _ = all_contenders(run_dir, folder, threads)
            return {"bleu": bleu(contenders, run_dir, options["bleu_sentences"])}
    opus_sentences = sentences[: options["opus_mt_sentences"]]
    return {"opus_mt_size": opus_mt_throughput(run_dir, opus_sentences, repeats, threads)}


# The section's tables (`benchmarks/section.py`), from whichever parts ran.
REPEATS = 3
# Its figures go only where --json says: a run of some parts must not
# replace the file of a whole run that the docs quote.
RESULTS_FILE = None
RUNS_ALONE = True  # it sets TensorFlow's threads (--threads) before TensorFlow starts
TABLES = [
    (
        "sentences per second through translate_batch, text in and out (the test "
        "split's first sources, the same threads for each engine)",
        "rows",
        COLUMNS,
    ),
    (
        f"one sentence, greedy, batch 1: milliseconds per call ({LATENCY_CALLS} calls; "
        f"{QUICK_LATENCY_CALLS} with --repeats 1)",
        "latency",
        LATENCY_COLUMNS,
    ),
    (
        "token batching: sentences per second of Translator.translate_file (the XLA export)",
        "token_batching",
        BATCHING_COLUMNS,
    ),
    (f"sacreBLEU on the test split, beam {BLEU_BEAM_SIZE}", "bleu", BLEU_COLUMNS),
    (
        "OPUS-MT's sizes (6 + 6 layers, d_model 512, random weights): sentences per second "
        f"({OPUS_MT_DECODING_LENGTH} tokens each)",
        "opus_mt_size",
        COLUMNS,
    ),
]
FIGURES = ("rows", "latency", "token_batching", "bleu", "opus_mt_size")  # the parts' keys
# A smoke run's sizes: sentences raced, at OPUS-MT's sizes, and for BLEU.
SMOKE_SIZES = {"sentences": 32, "opus_mt_sentences": 8, "bleu_sentences": 32}


def add_options(parser):
    parser.add_argument(
        "run_dir", nargs="?", help="a finished translate run (a Transformer); none with --smoke"
    )
    parser.add_argument("--sentences", type=int, default=256, help="(default: %(default)s)")
    parser.add_argument(
        "--threads", type=int, default=1, help="threads for each engine (default: %(default)s)"
    )
    parser.add_argument(
        "--part",
        choices=PARTS,
        action="append",
        help="speed (throughput, latency, token batching), bleu (on the test split), or "
        "opus_mt (throughput at OPUS-MT's sizes); repeat for several (default: all, each in "
        "a process of its own)",
    )
    parser.add_argument(
        "--beam-sizes",
        type=int,
        nargs="+",
        default=list(BEAM_SIZES),
        help="beam sizes of the throughput race (default: %(default)s)",
    )
    parser.add_argument(
        "--batch-sizes",
        type=int,
        nargs="+",
        default=list(BATCH_SIZES),
        help="sentences per call in the throughput race (default: %(default)s)",
    )
    parser.add_argument(
        "--opus-mt-sentences",
        type=int,
        default=64,
        help="sentences for the race at OPUS-MT's sizes (default: %(default)s)",
    )
    parser.add_argument(
        "--bleu-sentences",
        type=int,
        default=None,
        help="test sentences for BLEU (default: the whole test split)",
    )
    parser.add_argument(
        "--contenders-dir",
        default=None,
        help="where the speed and bleu parts write our exports and CTranslate2's models of "
        "RUN_DIR, or find them written by the part before (default: a temporary folder; "
        "several parts in their processes share one)",
    )


def run(smoke, repeats, run_dir=None, part=None, **options):
    """The figures of the parts asked for (`part`: a list, None: all) on
    `run_dir`, or with `smoke` on a tiny run trained first; one part runs
    here, several each in a process of its own."""
    if smoke == (run_dir is not None):
        raise SystemExit("error: give RUN_DIR or --smoke")
    measure.use_threads(options["threads"])
    options = {**options, **(SMOKE_SIZES if smoke else {}), "repeats": repeats}
    parts = part or list(PARTS)
    results = {key: options[key] for key in ("threads", "sentences", "opus_mt_sentences")}
    with tempfile.TemporaryDirectory() as folder:
        if smoke:
            from keras_attention.recipes import translate

            run_dir = Path(folder) / "run"
            translate.main(
                [
                    *("--data-dir", str(Path(folder) / "tfds")),
                    *("--output-dir", str(run_dir)),
                    *("--train-examples", "256", "--test-examples", "32", "--epochs", "1"),
                ]
            )
        if len(parts) == 1:
            return results | measure_part(parts[0], run_dir, options)
        # The flags again, for each part's process.
        flags = [
            *("--sentences", str(options["sentences"]), "--repeats", str(repeats)),
            *("--threads", str(options["threads"])),
            *("--beam-sizes", *map(str, options["beam_sizes"])),
            *("--batch-sizes", *map(str, options["batch_sizes"])),
            *("--opus-mt-sentences", str(options["opus_mt_sentences"])),
            *(["--bleu-sentences", str(b)] if (b := options["bleu_sentences"]) else []),
            *("--contenders-dir", options["contenders_dir"] or str(Path(folder) / "contenders")),
        ]
        for name in parts:
            print(f"serving_speed: the {name} part, in a process of its own", flush=True)
            output = Path(folder) / f"{name}.json"
            command = [sys.executable, "-m", "benchmarks.serving_speed", str(run_dir)]
            # Its tables are printed with the others' at the end.
            process = subprocess.run(
                [*command, *flags, "--part", name, "--json", str(output)],
                stdout=subprocess.PIPE,
                text=True,
            )
            if process.returncode != 0:
                print(process.stdout)
                raise SystemExit(
                    f"error: the {name} part failed (exit status {process.returncode})"
                )
            figures = json.loads(output.read_text())
            results |= {key: figures[key] for key in FIGURES if key in figures}
    return results


if __name__ == "__main__":
    from benchmarks import section

    section.main("serving_speed")
