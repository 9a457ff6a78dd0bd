"""A converted BERT classifier's TF Serving export against transformers on CPU
torch, one thread each: texts per second, and whether the probabilities agree.

    python -m benchmarks bert_classifier                    # BERT-base size (about 10 minutes)
    python -m benchmarks bert_classifier --smoke --hf-python ""   # the tiny fixture, no torch

A `BertForSequenceClassification` at BERT-base's size (hidden 768, 12
layers, 12 heads, intermediate 3072, 512 positions, 2 labels), random
weights drawn by transformers' own class, with a WordPiece `vocab.txt` of
30,522 tokens trained by `tokenizers` on the gettext catalogues' English
messages and the installed packages' documentation, `model_max_length` 128.
Every text is longer than 128 pieces, so every row is 128 ids, `[CLS]` and
`[SEP]` included. Ours: the run `python -m keras_attention.convert` writes,
its export's `serving_default`, text in and probabilities out (tokenisation
in the graph). transformers: `BertTokenizer` (Rust) then the model and a
softmax, in the Python that has torch (`--hf-python`), a worker process
driven call by call over a pipe (as `benchmarks.pretrained`'s). Batches of 1
and 32 texts.

Every engine runs on one thread (TensorFlow's intra- and inter-op pools,
torch's). Each contender is called once to warm up, then `--repeats` times in
turns (`measure.race`); ratios are transformers' median time over ours:
above 1, ours is faster. `--smoke` takes the committed tiny fixture
(`tests/convert/fixtures/bert`) instead; without `--hf-python` it skips
transformers with a printed line.
"""

import json
import sys
from pathlib import Path

from benchmarks.pretrained import (
    FIXTURES,
    TorchWorker,
    add_torch_options,
    catalogue_pairs,
    command,
    documentation_lines,
    load_export,
    run_beside_torch,
    start_torch_worker,
    timed,
)

BERT = dict(
    hidden_size=768,
    num_hidden_layers=12,
    num_attention_heads=12,
    intermediate_size=3072,
    max_position_embeddings=512,
)
VOCABULARY = 30522  # bert-base-uncased's
SEQUENCE_LENGTH = 128
BATCH_SIZES, SMOKE_BATCH_SIZES = (1, 32), (1, 4)
COLUMNS = [
    ("batch_size", "batch", "d"),
    ("sequence_length", "ids a row", "d"),
    ("ours_texts_per_s", "ours, texts/s", ".2f"),
    ("transformers_texts_per_s", "transformers, texts/s", ".2f"),
    ("ours_over_transformers", "export / transformers", ".2f"),
    ("largest_probability_difference", "largest |p - p_HF|", ".1e"),
]


# --- The torch side: runs under --hf-python, which has no TensorFlow -------------


def torch_worker():
    """The BERT side of the worker process (`start_torch_worker`)."""
    torch, transformers, serve = start_torch_worker()
    loaded = {}

    def make_bert(folder, lines_file):
        import tokenizers
        from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

        lines = Path(lines_file).read_text("utf-8").splitlines()
        trained = tokenizers.BertWordPieceTokenizer(lowercase=True)
        trained.train_from_iterator(lines, vocab_size=VOCABULARY, show_progress=False)
        vocabulary = trained.get_vocab()
        Path(folder, "vocab.txt").write_text(
            "\n".join(sorted(vocabulary, key=vocabulary.get)) + "\n", "utf-8"
        )
        tokenizer = BertTokenizer(
            vocab=f"{folder}/vocab.txt", do_lower_case=True, model_max_length=SEQUENCE_LENGTH
        )
        tokenizer.save_pretrained(folder)
        torch.manual_seed(0)
        labels = {0: "negative", 1: "positive"}
        config = BertConfig(vocab_size=len(vocabulary), id2label=labels, **BERT)
        model = BertForSequenceClassification(config)
        model.save_pretrained(folder)
        return {"vocabulary": len(vocabulary), "parameters": model.num_parameters()}

    def load(folder):
        loaded["model"] = transformers.BertForSequenceClassification.from_pretrained(folder).eval()
        loaded["tokenizer"] = transformers.BertTokenizer.from_pretrained(folder)
        return loaded["model"].config._attn_implementation

    @torch.inference_mode()
    def classify(texts):
        inputs = loaded["tokenizer"](texts, truncation=True, padding=True, return_tensors="pt")
        probabilities = torch.softmax(loaded["model"](**inputs).logits, -1)
        return {"lengths": inputs["input_ids"].shape[1], "probabilities": probabilities.tolist()}

    serve((make_bert, load, classify))


class Worker(TorchWorker):
    """`benchmarks.pretrained`'s worker process, running this module's side."""

    module = "benchmarks.bert_classifier"


# --- Measuring -------------------------------------------------------------------


def long_texts(count):
    """`count` English texts of several catalogue messages each, far longer
    than 128 pieces, in a fixed order."""
    english = sorted({e for e, _ in catalogue_pairs() if "\n" not in e and len(e) > 20})
    texts, text = [], ""
    for message in english:
        text = f"{text} {message}".strip()
        if len(text) > 1500:
            texts.append(text)
            text = ""
        if len(texts) == count:
            return texts
    raise RuntimeError(f"only {len(texts)} long texts in the catalogues")


def race(smoke, repeats, worker, work):
    import numpy as np
    import tensorflow as tf

    result = {}
    sizes = SMOKE_BATCH_SIZES if smoke else BATCH_SIZES
    if smoke:
        checkpoint = FIXTURES / "bert"
        texts = json.loads((checkpoint / "reference.json").read_text())["texts"]
        texts = [text for text in texts if len(text) > 100] * max(sizes)
    else:
        checkpoint = work / "bert"
        checkpoint.mkdir(parents=True, exist_ok=True)
        lines = [e for e, _ in catalogue_pairs()] + documentation_lines()
        (work / "lines.txt").write_text("\n".join(lines) + "\n", "utf-8")
        result["checkpoint"] = worker(
            "make_bert", folder=str(checkpoint), lines_file=str(work / "lines.txt")
        )
        texts = long_texts(max(sizes))
    run = work / "bert_run"
    command("keras_attention.convert", checkpoint, "--output-dir", run, "--overwrite")
    served = load_export(run, "serving_default")
    if worker:
        result["transformers_attention"] = worker("load", folder=str(checkpoint))
    rows = []
    for size in sizes:
        batch = texts[:size]

        def ours(batch=batch):
            return served(text=tf.constant(batch))["probabilities"].numpy().tolist()

        def transformers(batch=batch):
            return worker("classify", texts=batch)

        contenders = {"ours": ours, "transformers": transformers} if worker else {"ours": ours}
        print(f"\nBERT classifier, batch {size}", flush=True)
        seconds, outputs = timed(contenders, repeats)
        row = {"batch_size": size, "ours_texts_per_s": size / seconds["ours"]}
        if worker:
            theirs = outputs["transformers"]
            row["sequence_length"] = theirs["lengths"]
            row["transformers_texts_per_s"] = size / seconds["transformers"]
            row["ours_over_transformers"] = seconds["transformers"] / seconds["ours"]
            difference = np.abs(np.array(outputs["ours"]) - np.array(theirs["probabilities"]))
            row["largest_probability_difference"] = float(difference.max())
        print(json.dumps(row), flush=True)
        rows.append(row)
    return result | {"rows": rows}


REPEATS = 5
ONE_THREAD = True
TABLES = [
    (
        "BERT classifier: transformers' time over our export's (above 1, ours is faster)",
        ("bert", "rows"),
        COLUMNS,
    )
]


def add_options(parser):
    add_torch_options(parser, "checkpoint and run", "bert")


def run(smoke, repeats, hf_python, work_dir):
    return run_beside_torch(Worker, "bert", {"bert": race}, smoke, repeats, hf_python, work_dir)


if __name__ == "__main__":
    if sys.argv[1:] == ["--torch-worker"]:
        torch_worker()
    else:
        from benchmarks import section

        section.main("bert_classifier")
