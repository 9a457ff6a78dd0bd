"""What a recipe chooses for the user's data when a flag is left unset:
the subword vocabulary's size, the number of epochs, and the precision."""

import re
from pathlib import Path


def vocabulary_size_for(texts):
    """A subword vocabulary size for a corpus: a quarter of its distinct
    words, rounded to 500, from 500 to 8,000 (the tensorflow.org Transformer
    tutorial's size for 50,000 sentence pairs)."""
    distinct_words = len({word for text in texts for word in text.split()})
    return min(8000, max(500, round(distinct_words / 4 / 500) * 500))


# Words of training text (both sides of a translation counted) that the
# tiny preset trains on in about 8 to 10 minutes on 2 CPU cores, measured on
# the English-French corpus of `examples/build_catalog_corpus.py` (860,000
# words an epoch): with batches of 64 sentences an epoch took 199 s (an
# Intel Xeon) to 227 s (an AMD EPYC); with batches of 1,024 tokens, 145 s
# (the AMD EPYC, validation included: fewer, less padded steps).
WORDS_IN_TEN_MINUTES = 2_000_000
WORDS_IN_TEN_MINUTES_BY_TOKENS = 3_500_000

# Batches by tokens (`--batch-tokens`), chosen for a translation corpus of
# at least `TOKEN_BATCHES_FROM` training pairs. Only full batches train, and
# a bucket's last, partial batch waits for the next epoch's shuffle: up to
# about 250 pairs an epoch, which a smaller corpus would miss too often.
BATCH_TOKENS = 1024
TOKEN_BATCHES_FROM = 10_000


def batch_tokens_for(pairs):
    """`--batch-tokens` for a translation corpus of `pairs` training pairs:
    `BATCH_TOKENS` from `TOKEN_BATCHES_FROM` pairs, else 0 (sentences)."""
    return BATCH_TOKENS if pairs >= TOKEN_BATCHES_FROM else 0


def epochs_for(texts, by_tokens=False):
    """Epochs for a corpus: as many as fit in about 10 minutes on 2 CPU
    cores (see `WORDS_IN_TEN_MINUTES`; `by_tokens`: batches by tokens),
    from 1 to 20."""
    words = sum(len(text.split()) for text in texts)
    in_ten_minutes = WORDS_IN_TEN_MINUTES_BY_TOKENS if by_tokens else WORDS_IN_TEN_MINUTES
    return min(20, max(1, round(in_ten_minutes / max(words, 1))))


def cpu_flags(cpuinfo="/proc/cpuinfo"):
    """The CPU's instruction-set flags, as lscpu lists them (a set; empty
    where /proc/cpuinfo cannot be read)."""
    text = Path(cpuinfo).read_text() if Path(cpuinfo).is_file() else ""
    flags = re.search(r"^flags\s*:\s*(.+)$", text, flags=re.MULTILINE)
    return set(flags.group(1).split()) if flags else set()


def bfloat16_flags(cpuinfo="/proc/cpuinfo"):
    """The CPU's bfloat16 instructions (`avx512_bf16`, `amx_bf16`); [] on
    CPUs that have none (TensorFlow then emulates bfloat16)."""
    return sorted(f for f in cpu_flags(cpuinfo) if f.endswith("bf16"))


def precision_note(precision, flags):
    """Why a run trains in float32 (`--precision`'s default), in one line,
    given the CPU's `bfloat16_flags`; None for another precision.
    `python -m benchmarks.bfloat16` measured both precisions on a CPU with
    AMX: for the `tiny` Transformer the recipe chooses for a corpus,
    mixed_bfloat16 trained no faster and decoded slower; the paper's `base`
    trained about twice as fast, at a BLEU not measured yet."""
    if precision != "float32":
        return None
    if not flags:
        return (
            "precision float32: this CPU has no bfloat16 instructions (AVX512_BF16, AMX), "
            "where mixed_bfloat16 would be emulated"
        )
    return (
        f"precision float32: this CPU has {', '.join(flags)}, but mixed_bfloat16 measured no "
        "faster for the tiny Transformer, and for larger ones its BLEU is not measured "
        "(python -m benchmarks.bfloat16); --precision mixed_bfloat16 uses it"
    )
