"""Byte-level BPE throughput: our in-graph tokenizer against Hugging Face's
`tokenizers` (Rust), texts per second, one thread each.

    python -m benchmarks bpe_tokenizer              # about 3 minutes here
    python -m benchmarks bpe_tokenizer --smoke      # a few seconds

Both read one `tokenizer.json`: a byte-level BPE of `--vocabulary-size`
tokens trained here with `tokenizers` on the French gettext catalogues'
English and French messages and the installed packages' documentation
(nothing is downloaded), once with GPT-2's pre-tokenizer (`ByteLevel`, its
regex built in) and once with Llama 3's (`Split` with its regex, then
`ByteLevel`). Ours is what `python -m keras_attention.convert` makes of
that file (`ByteLevelBPETokenizer`), its `tokenize` in a `tf.function`,
TensorFlow's intra- and inter-op pools at one thread; the peer is
`Tokenizer.encode_batch` with `RAYON_NUM_THREADS=1`. Each is given the same
batches of texts (held-out lines, of the lengths the corpus has) and must
return the same ids (checked on the first round); the times are medians of
calls taken in turns (`measure.race`). The ratio is ours over the peer's
texts per second: above 1, ours is faster.

torch is not needed.
"""

import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # before tokenizers starts its pool
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def corpus(smoke):
    """Training lines and held-out texts."""
    from benchmarks.pretrained import catalogue_pairs, documentation_lines

    lines = [text for pair in catalogue_pairs() for text in pair] + documentation_lines()
    lines = [line for line in lines if line.strip()]
    held_out = lines[7::50]  # one line in 50, spread over the corpus
    training = [line for index, line in enumerate(lines) if index % 50 != 7]
    if smoke:
        return training[:2000], held_out[:64]
    return training, held_out


def train(lines, pre_tokenizer, size):
    """A `tokenizers.Tokenizer`: byte-level BPE of `size` tokens trained on `lines`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizer
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|endoftext|>"],
        show_progress=False,
    )
    tokenizer.train_from_iterator(lines, trainer)
    return tokenizer


def ours(tokenizer, folder):
    """Our tokenizer of `tokenizer`'s `tokenizer.json`, as the converter makes
    it, and its id of each of the file's ids."""
    from keras_attention.convert.byte_level_bpe import make_tokenizer, read_byte_level_bpe
    from keras_attention.convert.checkpoint import Checkpoint
    from keras_attention.convert.ids import make_id_map

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    size = tokenizer.get_vocab_size()
    (folder / "config.json").write_text(json.dumps({"vocab_size": size}))
    read = read_byte_level_bpe(Checkpoint(folder), size)
    id_map = make_id_map(size, None, None, tokenizer.token_to_id("<|endoftext|>"), None)
    return make_tokenizer(read, id_map), id_map


def part(name, pre_tokenizer, lines, texts, vocabulary_size, batch_size, repeats, work):
    import tensorflow as tf

    from benchmarks import measure

    start = time.perf_counter()
    theirs = train(lines, pre_tokenizer, vocabulary_size)
    print(
        f"{name}: trained {theirs.get_vocab_size()} tokens in {time.perf_counter() - start:.0f} s"
    )
    tokenizer, id_map = ours(theirs, work / name)
    tokenize = tf.function(tokenizer.tokenize, input_signature=[tf.TensorSpec([None], tf.string)])
    batches = [texts[i : i + batch_size] for i in range(0, len(texts), batch_size)]
    tensors = [tf.constant(batch) for batch in batches]
    outputs = {}

    def run_ours():
        outputs.setdefault("ours", [tokenize(t).to_list() for t in tensors])

    def run_theirs():
        answers = [
            [e.ids for e in theirs.encode_batch(b, add_special_tokens=False)] for b in batches
        ]
        outputs.setdefault("tokenizers", answers)

    times = measure.race({"ours": run_ours, "tokenizers": run_theirs}, repeats, warmup=1)
    mine = [[id_map[i] for i in row] for batch in outputs["ours"] for row in batch]
    flat = [row for batch in outputs["tokenizers"] for row in batch]
    equal = sum(a == b for a, b in zip(mine, flat, strict=True))
    row = {
        "pre_tokenizer": name,
        "texts": len(texts),
        "batch_size": batch_size,
        "ours_texts_per_second": len(texts) / times["ours"],
        "tokenizers_texts_per_second": len(texts) / times["tokenizers"],
        "ratio": times["tokenizers"] / times["ours"],
        "ids_equal": f"{equal} of {len(texts)}",
    }
    print(json.dumps(row), flush=True)
    return row


REPEATS = 5
ONE_THREAD = True
SMOKE_VOCABULARY_SIZE = 1000


def add_options(parser):
    parser.add_argument(
        "--vocabulary-size", type=int, default=32000, help="(at most 1,000 with --smoke)"
    )
    parser.add_argument("--batch-size", type=int, default=64, help="texts per call of each")


def run(smoke, repeats, vocabulary_size, batch_size):
    import tokenizers
    from tokenizers import Regex, pre_tokenizers

    if smoke:
        vocabulary_size = min(vocabulary_size, SMOKE_VOCABULARY_SIZE)
    lines, texts = corpus(smoke)
    results = {
        "tokenizers": tokenizers.__version__,
        "mean_characters_per_text": sum(map(len, texts)) / len(texts),
    }
    llama3 = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    gpt2 = pre_tokenizers.ByteLevel(add_prefix_space=False)
    with tempfile.TemporaryDirectory() as work:
        results["rows"] = [
            part(name, pre, lines, texts, vocabulary_size, batch_size, repeats, Path(work))
            for name, pre in (("gpt2", gpt2), ("llama3", llama3))
        ]
    return results


TABLES = [
    (
        "Byte-level BPE: texts per second",
        "rows",
        [
            ("pre_tokenizer", "pre-tokenizer", ""),
            ("ours_texts_per_second", "ours, texts/s", ".0f"),
            ("tokenizers_texts_per_second", "tokenizers, texts/s", ".0f"),
            ("ratio", "ours / tokenizers", ".3f"),
            ("ids_equal", "ids equal", ""),
        ],
    )
]


if __name__ == "__main__":
    from benchmarks import section

    section.main("bpe_tokenizer")
