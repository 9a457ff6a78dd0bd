"""Loaders for the data sets the recipes train on, all through TFDS.

Each works with a user's own `data_dir` (where TFDS keeps prepared data
sets; None uses TFDS's default). The offline `multilingual_dates` is
generated locally; the others are downloaded by TFDS the first time.

Besides the data sets named below, any TFDS data set can be named as
`"tfds:NAME"` with the keys of its features (`keys`): for example
`translation_pairs("tfds:opus/medical", "train", keys=("en", "de"))`.
"""

import contextlib
import io
import logging
import random
import time

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


TFDS_PREFIX = "tfds:"


class DataNotFound(RuntimeError):
    """A data set is not in `data_dir` and could not be prepared there."""


def check_name(flag, name, known):
    """Raises a ValueError naming `flag` unless `name` is a key of `known`
    or `tfds:NAME`."""
    if name not in known and not (name.startswith(TFDS_PREFIX) and len(name) > len(TFDS_PREFIX)):
        raise ValueError(
            f"{flag} must be one of {', '.join(sorted(known))}, or tfds:NAME for any "
            f"TFDS data set; got {name!r}"
        )


def feature_keys(name, known, keys, flags):
    """The feature keys to read of data set `name`: those of `known[name]`
    for a data set named here, else `keys`, which `tfds:NAME` needs (a
    ValueError names `flags` when they are missing)."""
    check_name("--dataset", name, known)
    if not name.startswith(TFDS_PREFIX):
        return known[name]
    if any(key is None for key in keys):
        raise ValueError(f"--dataset {name} needs {' and '.join(flags)}: the names of its features")
    return tuple(keys)


def _load(name, split, data_dir):
    name = name.removeprefix(TFDS_PREFIX)
    # Preparing a data set draws from Python's global random numbers, from
    # which Keras seeds its initializers: keep them as they were, so weights
    # do not depend on whether the data set was already prepared.
    state = random.getstate()
    try:
        if name.split("/")[0] == "multilingual_dates":
            prepare_offline(name, data_dir)
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


def prepare_offline(name, data_dir=None):
    """Generates the package's offline data set `name` (`multilingual_dates`,
    a config of it) in `data_dir` the first time, saying so in one line and
    showing one progress bar (on a terminal). TFDS's own messages would speak
    of a download of unknown size that does not happen, warn about the
    folder it is about to fill, and draw nested bars as raw control lines in
    a log."""
    absl_logger = logging.getLogger("absl")
    level = absl_logger.level
    absl_logger.setLevel(logging.ERROR)
    try:
        builder = tfds.builder(name, data_dir=data_dir)
        if builder.is_prepared():
            return
        sizes = builder.builder_config.sizes
        print(
            f"Generating the offline {name} data set ({sum(sizes.values()):,} examples, "
            f"once) in {builder.data_dir}",
            flush=True,
        )
        start = time.perf_counter()
        tfds.disable_progress_bar()
        try:
            with contextlib.redirect_stdout(io.StringIO()), builder.progress_bar():
                builder.download_and_prepare()
        finally:
            tfds.display_progress_bar(True)
    finally:
        absl_logger.setLevel(level)
    print(f"Generated in {time.perf_counter() - start:.0f} s", flush=True)


def translation_pairs(name, split, data_dir=None, reverse=False, keys=(None, None)):
    """`(source, target)` string pairs of a translation data set.

    Args:
        name: a key of `TRANSLATION`, or `"tfds:NAME"`.
        split: `"train"`, `"validation"` or `"test"` (or a TFDS split slice).
        data_dir: TFDS data folder.
        reverse: swap the two languages (WMT14 de-en read as en -> de).
        keys: `(source feature, target feature)`, for `"tfds:NAME"`.
    """
    keys = feature_keys(name, TRANSLATION, keys, ("--source-key", "--target-key"))
    source, target = keys[::-1] if reverse else keys
    return _load(name, split, data_dir).map(lambda example: (example[source], example[target]))


def labelled_texts(name, split, data_dir=None, keys=(None, None)):
    """`(text, integer label)` pairs of a classification data set, and the
    label names; `keys` are `(text feature, label feature)` for
    `"tfds:NAME"`, whose label feature must be a `ClassLabel`."""
    text, label = feature_keys(name, CLASSIFICATION, keys, ("--text-key", "--label-key"))
    feature = tfds.builder(name.removeprefix(TFDS_PREFIX), data_dir=data_dir).info.features[label]
    if not isinstance(feature, tfds.features.ClassLabel):
        raise ValueError(
            f"the feature {label!r} of {name} is a {type(feature).__name__}, not a ClassLabel"
        )
    pairs = _load(name, split, data_dir).map(lambda example: (example[text], example[label]))
    return pairs, feature.names


def plain_texts(name, split, data_dir=None, key=None):
    """Strings of a data set, for a language model: the source side of a
    translation data set, the text of a classification one, or feature
    `key` of `"tfds:NAME"`."""
    known = {known_name: keys[:1] for known_name, keys in {**TRANSLATION, **CLASSIFICATION}.items()}
    (feature,) = feature_keys(name, known, (key,), ("--text-key",))
    return _load(name, split, data_dir).map(lambda example: example[feature])
