"""Sentence embeddings: our export (graph and XLA) against sentence-transformers
on CPU torch, the same weights, one thread each: texts per second, and
whether the vectors agree.

    python -m benchmarks embeddings                          # all-MiniLM-L6-v2's size (minutes)
    python -m benchmarks embeddings --smoke --hf-python ""   # the tiny fixture, no torch

A sentence-transformers folder at all-MiniLM-L6-v2's size and layout: a
`BertModel` (hidden 384, 6 layers, 12 heads, intermediate 1536, 512
positions), random weights drawn by transformers' own class, an uncased
WordPiece vocabulary of 30,522 tokens trained by `tokenizers` on the
gettext catalogues' English messages and the installed packages'
documentation, mean pooling, Normalize, `max_seq_length` 256, all written
as the Hub's folder has them. Ours: the run `python -m
keras_attention.convert` writes, its export's `embed` signature, text in
and vectors out (tokenisation, pooling and normalisation in the graph),
and the same exported with `--export-jit-compile` (XLA, padded to its
compiled shapes). sentence-transformers: `SentenceTransformer.encode` of
the same folder, text in and numpy vectors out, in the Python that has
torch (`--hf-python`), a worker process driven call by call over a pipe.
Batches of 1 and 32 texts, short texts (about 16 ids) and long ones
(about 128).

Every engine runs on one thread (TensorFlow's intra- and inter-op pools,
torch's). Each contender is called once to warm up, then `--repeats` times
in turns (`measure.race`); ratios are sentence-transformers' median time
over ours: above 1, ours is faster. Beside the race: each export's time
from a fresh process to its first answer, and that process's peak memory.
`--smoke` takes the committed tiny fixture
(`tests/convert/fixtures/st_minilm`) instead; without `--hf-python` it
skips sentence-transformers with a printed line.
"""

import json
import subprocess
import sys
from pathlib import Path

from benchmarks.pretrained import (
    FIXTURES,
    TorchWorker,
    add_torch_options,
    catalogue_pairs,
    command,
    documentation_lines,
    run_beside_torch,
    timed,
)

MINILM = dict(
    hidden_size=384,
    num_hidden_layers=6,
    num_attention_heads=12,
    intermediate_size=1536,
    max_position_embeddings=512,
)
VOCABULARY = 30522  # all-MiniLM-L6-v2's (bert-base-uncased's)
MAX_SEQ_LENGTH = 256  # all-MiniLM-L6-v2's sentence_bert_config.json
BATCH_SIZES, SMOKE_BATCH_SIZES = (1, 32), (1, 4)
# Texts of about this many ids, [CLS] and [SEP] included.
LENGTHS = (16, 128)
COLUMNS = [
    ("batch_size", "batch", "d"),
    ("ids", "ids a text", ".0f"),
    ("ours_texts_per_s", "graph, texts/s", ".1f"),
    ("xla_texts_per_s", "XLA, texts/s", ".1f"),
    ("sentence_transformers_texts_per_s", "sentence-transformers, texts/s", ".1f"),
    ("ours_over_sentence_transformers", "graph / s-t", ".2f"),
    ("xla_over_sentence_transformers", "XLA / s-t", ".2f"),
    ("largest_cosine_distance", "largest 1 - cos", ".1e"),
]
START_COLUMNS = [
    ("export", "export", "s"),
    ("seconds_to_first_answer", "fresh process to first answer, s", ".1f"),
    ("peak_memory_mib", "peak memory, MiB", ".0f"),
]


# --- The torch side: runs under --hf-python, which has no TensorFlow -------------


def torch_worker():
    """The sentence-transformers side of the worker process."""
    from benchmarks.pretrained import start_torch_worker

    torch, transformers, serve = start_torch_worker()
    loaded = {}

    def make_minilm(folder, lines_file):
        import tokenizers
        from transformers import BertConfig, BertModel, BertTokenizer

        lines = Path(lines_file).read_text("utf-8").splitlines()
        trained = tokenizers.BertWordPieceTokenizer(lowercase=True)
        trained.train_from_iterator(lines, vocab_size=VOCABULARY, show_progress=False)
        vocabulary = trained.get_vocab()
        Path(folder, "vocab.txt").write_text(
            "\n".join(sorted(vocabulary, key=vocabulary.get)) + "\n", "utf-8"
        )
        BertTokenizer(
            vocab=f"{folder}/vocab.txt", do_lower_case=True, model_max_length=512
        ).save_pretrained(folder)
        torch.manual_seed(0)
        model = BertModel(BertConfig(vocab_size=len(vocabulary), **MINILM))
        model.save_pretrained(folder)
        modules = [
            ("", "sentence_transformers.models.Transformer"),
            ("1_Pooling", "sentence_transformers.models.Pooling"),
            ("2_Normalize", "sentence_transformers.models.Normalize"),
        ]
        write = lambda name, value: Path(folder, name).write_text(json.dumps(value, indent=2))  # noqa: E731
        write(
            "modules.json",
            [{"idx": i, "name": str(i), "path": p, "type": t} for i, (p, t) in enumerate(modules)],
        )
        Path(folder, "1_Pooling").mkdir(exist_ok=True)
        write(
            "1_Pooling/config.json",
            {"word_embedding_dimension": MINILM["hidden_size"], "pooling_mode_mean_tokens": True},
        )
        write(
            "sentence_bert_config.json", {"max_seq_length": MAX_SEQ_LENGTH, "do_lower_case": False}
        )
        return {"vocabulary": len(vocabulary), "parameters": model.num_parameters()}

    def load(folder):
        import sentence_transformers

        loaded["model"] = sentence_transformers.SentenceTransformer(folder, device="cpu")
        return sentence_transformers.__version__

    def lengths(texts):
        return [len(ids) for ids in loaded["model"].tokenizer(texts)["input_ids"]]

    def encode(texts):
        vectors = loaded["model"].encode(texts, batch_size=len(texts), convert_to_numpy=True)
        return vectors.tolist()

    serve((make_minilm, load, lengths, encode))


class Worker(TorchWorker):
    """`benchmarks.pretrained`'s worker process, running this module's side."""

    module = "benchmarks.embeddings"


# --- Measuring -------------------------------------------------------------------


def texts_of_about(ids, count, tokenizer_lengths):
    """`count` English texts of about `ids` ids each (catalogue messages,
    joined where one is too short), in a fixed order; `tokenizer_lengths`
    gives each text's ids."""
    english = sorted({e.strip() for e, _ in catalogue_pairs() if "\n" not in e and len(e) > 8})
    texts, text = [], ""
    for message in english:
        text = f"{text} {message}".strip()
        if len(text.split()) * 1.3 >= ids - 2:
            texts.append(text)
            text = ""
        if len(texts) == 4 * count:
            break
    found = tokenizer_lengths(texts)
    near = sorted(range(len(texts)), key=lambda i: (abs(found[i] - ids), i))[:count]
    return [texts[i] for i in sorted(near)]


# (The peak is the kernel's VmHWM of the process: `ru_maxrss` would count
# the memory of the parent it was forked from.)
FIRST_ANSWER = """
import re, sys, time
start = time.perf_counter()
import tensorflow as tf, tensorflow_text
tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
embed = tf.saved_model.load(sys.argv[1]).signatures["embed"]
embed(text=tf.constant(["How old are you?"]))
seconds = time.perf_counter() - start
status = open("/proc/self/status").read()
print(seconds, int(re.search(r"VmHWM:\\s+(\\d+) kB", status)[1]) / 1024)
"""


def first_answer(export):
    """`(seconds, peak MiB)` of a fresh process that loads `export` and
    embeds one text."""
    output = subprocess.run(
        [sys.executable, "-c", FIRST_ANSWER, str(export)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return float(output[-2]), float(output[-1])


def race(smoke, repeats, worker, work):
    import numpy as np
    import tensorflow as tf

    result = {}
    sizes = SMOKE_BATCH_SIZES if smoke else BATCH_SIZES
    if smoke:
        checkpoint = FIXTURES / "st_minilm"
    else:
        checkpoint = work / "minilm"
        checkpoint.mkdir(parents=True, exist_ok=True)
        lines = [e for e, _ in catalogue_pairs()] + documentation_lines()
        (work / "lines.txt").write_text("\n".join(lines) + "\n", "utf-8")
        result["checkpoint"] = worker(
            "make_minilm", folder=str(checkpoint), lines_file=str(work / "lines.txt")
        )
    run = work / "minilm_run"
    command("keras_attention.convert", checkpoint, "--output-dir", run, "--overwrite")
    command(
        "keras_attention.export", run, "--export-name", "xla", "--export-jit-compile",
        "--overwrite-export", "--export-version", "1",
    )  # fmt: skip
    exports = {name: next(run.glob(f"serving/{name}/1")) for name in (run.name, "xla")}
    served, xla = (
        tf.saved_model.load(str(exports[name])).signatures["embed"] for name in (run.name, "xla")
    )
    if worker:
        result["sentence_transformers"] = worker("load", folder=str(checkpoint))

        def lengths(texts):
            return worker("lengths", texts=texts)
    else:
        from keras_attention.data.tokenizers import load_run_tokenizer
        from keras_attention.run_files import RunFiles, read_config

        files = RunFiles(run)
        tokenizer = load_run_tokenizer(files, read_config(files.config), "text")

        def lengths(texts):
            return [len(row) for row in tokenizer.tokenize(tf.constant(texts)).to_list()]

    rows = []
    for ids in LENGTHS:
        texts = texts_of_about(ids, max(sizes), lengths)
        for size in sizes:
            batch = texts[:size]

            def ours(batch=batch, signature=served):
                return signature(text=tf.constant(batch))["embeddings"].numpy()

            contenders = {"ours": ours, "xla": lambda batch=batch: ours(batch, xla)}
            if worker:
                contenders["sentence_transformers"] = lambda batch=batch: np.array(
                    worker("encode", texts=batch)
                )
            print(f"\nembeddings, batch {size}, about {ids} ids a text", flush=True)
            seconds, outputs = timed(contenders, repeats)
            row = {
                "batch_size": size,
                "ids": float(np.mean(lengths(batch))),
                "ours_texts_per_s": size / seconds["ours"],
                "xla_texts_per_s": size / seconds["xla"],
            }
            vectors = [outputs["ours"], outputs["xla"]]
            if worker:
                row["sentence_transformers_texts_per_s"] = size / seconds["sentence_transformers"]
                for name in ("ours", "xla"):
                    row[f"{name}_over_sentence_transformers"] = (
                        seconds["sentence_transformers"] / seconds[name]
                    )
                vectors.append(outputs["sentence_transformers"])
            reference = vectors[-1] / np.linalg.norm(vectors[-1], axis=1, keepdims=True)
            row["largest_cosine_distance"] = float(
                max(
                    (1 - (v / np.linalg.norm(v, axis=1, keepdims=True) * reference).sum(1)).max()
                    for v in vectors
                )
            )
            print(json.dumps(row), flush=True)
            rows.append(row)
    starts = []
    for name, export in (("graph", exports[run.name]), ("XLA", exports["xla"])):
        seconds, memory = first_answer(export)
        starts.append(
            {"export": name, "seconds_to_first_answer": seconds, "peak_memory_mib": memory}
        )
        print(json.dumps(starts[-1]), flush=True)
    return result | {"rows": rows, "starts": starts}


REPEATS = 5
ONE_THREAD = True
TABLES = [
    (
        "Sentence embeddings: sentence-transformers' time over our export's "
        "(above 1, ours is faster)",
        ("embeddings", "rows"),
        COLUMNS,
    ),
    ("Sentence embeddings: the exports' start", ("embeddings", "starts"), START_COLUMNS),
]


def add_options(parser):
    add_torch_options(parser, "checkpoint and run", "embeddings")


def run(smoke, repeats, hf_python, work_dir):
    return run_beside_torch(
        Worker, "embeddings", {"embeddings": race}, smoke, repeats, hf_python, work_dir
    )


if __name__ == "__main__":
    if sys.argv[1:] == ["--torch-worker"]:
        torch_worker()
    else:
        from benchmarks import section

        section.main("embeddings")
