"""Loaders for the data sets the recipes train on, all through TFDS.

Each works with a user's own `data_dir` (where TFDS keeps prepared data
sets; None uses TFDS's default). The offline `multilingual_dates` is
generated locally; the others are downloaded by TFDS the first time.
"""

import random

import tensorflow_datasets as tfds

import keras_attention.data.multilingual_dates  # noqa: F401  (registers the builder)

# name -> (source feature, target feature), in the order the data set stores them.
TRANSLATION = {
    "multilingual_dates": ("source", "target"),
    "ted_hrlr_translate/pt_to_en": ("pt", "en"),  # the tensorflow.org tutorial's
    "wmt14_translate/de-en": ("de", "en"),  # the paper's (it translates en -> de)
}
# name -> (text feature, label feature).
CLASSIFICATION = {
    "imdb_reviews": ("text", "label"),
    "multilingual_dates/language_id": ("source", "locale"),
}


class DataNotFound(RuntimeError):
    """A data set is not in `data_dir` and could not be prepared there."""


def _load(name, split, data_dir):
    # Preparing a data set draws from Python's global random numbers, from
    # which Keras seeds its initializers: keep them as they were, so weights
    # do not depend on whether the data set was already prepared.
    state = random.getstate()
    try:
        return tfds.load(name, split=split, data_dir=data_dir, shuffle_files=False)
    except Exception as error:
        if tfds.builder(name, data_dir=data_dir).is_prepared():
            raise  # the data is there: some other fault
        raise DataNotFound(
            f"The TFDS data set {name!r} is not in data_dir={data_dir or 'TFDS default'!r} "
            f"and preparing it failed ({type(error).__name__}: {error}). Prepare it where "
            f"the internet is reachable (tfds build {name} --data_dir DIR) and pass "
            "--data-dir DIR."
        ) from error
    finally:
        random.setstate(state)


def translation_pairs(name, split, data_dir=None, reverse=False):
    """`(source, target)` string pairs of a translation data set.

    Args:
        name: a key of `TRANSLATION`.
        split: `"train"`, `"validation"` or `"test"` (or a TFDS split slice).
        data_dir: TFDS data folder.
        reverse: swap the two languages (WMT14 de-en read as en -> de).
    """
    if name not in TRANSLATION:
        raise ValueError(f"Unknown translation data set {name!r}; one of {sorted(TRANSLATION)}")
    source, target = TRANSLATION[name][::-1] if reverse else TRANSLATION[name]
    return _load(name, split, data_dir).map(lambda example: (example[source], example[target]))


def labelled_texts(name, split, data_dir=None):
    """`(text, integer label)` pairs of a classification data set, and the
    label names."""
    if name not in CLASSIFICATION:
        raise ValueError(
            f"Unknown classification data set {name!r}; one of {sorted(CLASSIFICATION)}"
        )
    text, label = CLASSIFICATION[name]
    names = tfds.builder(name, data_dir=data_dir).info.features[label].names
    pairs = _load(name, split, data_dir).map(lambda example: (example[text], example[label]))
    return pairs, names


def plain_texts(name, split, data_dir=None):
    """Strings of any data set above, for a language model: the source side
    of a translation data set, the text of a classification one."""
    if name in TRANSLATION:
        feature = TRANSLATION[name][0]
    elif name in CLASSIFICATION:
        feature = CLASSIFICATION[name][0]
    else:
        raise ValueError(
            f"Unknown data set {name!r}; one of {sorted(TRANSLATION) + sorted(CLASSIFICATION)}"
        )
    return _load(name, split, data_dir).map(lambda example: example[feature])
