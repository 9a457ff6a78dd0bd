"""What a recipe chooses for the user's data when a flag is left unset:
the subword vocabulary's size and the number of epochs."""


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
