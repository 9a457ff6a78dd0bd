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
# tiny preset trains on in about 8 minutes on 2 CPU cores, leaving 2 for the
# rest of a 10-minute run: measured, 860,000 words of the English-French
# corpus of `examples/build_french_corpus.py` an epoch, in 199 s.
WORDS_IN_TEN_MINUTES = 2_000_000


def epochs_for(texts):
    """Epochs for a corpus: as many as fit in about 10 minutes on 2 CPU
    cores (see `WORDS_IN_TEN_MINUTES`), from 1 to 20."""
    words = sum(len(text.split()) for text in texts)
    return min(20, max(1, round(WORDS_IN_TEN_MINUTES / max(words, 1))))


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
