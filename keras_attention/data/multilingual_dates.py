"""The offline dates task as a TFDS data set: `tfds.load("multilingual_dates")`.

Importing this module registers the builder. Preparing it generates the
examples locally (`keras_attention.data.dates`), so it needs no download.

Configs:
- `translate` (default): features `source` (the written date), `target`
  (ISO 8601), `locale`, `format`; supervised keys (source, target).
- `language_id`: which language wrote a date. Only the `full` format, which
  spells out the weekday and month, and only strings that no other locale
  writes the same way, so the language is always recoverable; supervised
  keys (source, locale).
"""

import contextlib
import dataclasses

import tensorflow_datasets as tfds
import tqdm

from keras_attention.data import dates

__all__ = ["MultilingualDates"]


@dataclasses.dataclass
class MultilingualDatesConfig(tfds.core.BuilderConfig):
    """The settings of one config of the data set (`translate`, `language_id`).

    @private: a TFDS detail, left out of the API reference.
    """

    sizes: dict = dataclasses.field(default_factory=dict)  # examples per split
    formats: tuple = ()  # CLDR widths to keep; empty keeps every usable one
    supervised_target: str = "target"  # the feature a model predicts
    unique_locale: bool = False  # skip strings that two locales write alike


class MultilingualDates(tfds.core.GeneratorBasedBuilder):
    """Written dates in 28 languages and 11 scripts, from Babel's CLDR data."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "First release."}
    BUILDER_CONFIGS = [
        MultilingualDatesConfig(
            name="translate",
            description="Written date -> ISO 8601.",
            sizes=dates.DEFAULT_SIZES,
        ),
        MultilingualDatesConfig(
            name="language_id",
            description="Written date (full format) -> the locale that wrote it.",
            sizes={"train": 20000, "validation": 2000, "test": 2000},
            formats=("full",),
            supervised_target="locale",
            unique_locale=True,
        ),
    ]

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            description=__doc__,
            features=tfds.features.FeaturesDict(
                {
                    "source": tfds.features.Text(),
                    "target": tfds.features.Text(),
                    "locale": tfds.features.ClassLabel(names=dates.LOCALES),
                    "format": tfds.features.ClassLabel(names=dates.FORMATS),
                }
            ),
            supervised_keys=("source", self.builder_config.supervised_target),
            homepage="https://cldr.unicode.org/",
            license="Unicode License v3 (CLDR data, through Babel)",
        )

    def _split_generators(self, dl_manager):
        del dl_manager  # nothing to download
        return {split: self._generate_examples(split) for split in self.builder_config.sizes}

    @contextlib.contextmanager
    def progress_bar(self):
        """One bar over every split's examples while they are generated
        (shown on a terminal only), in place of TFDS's nested ones."""
        total = sum(self.builder_config.sizes.values())
        with tqdm.tqdm(total=total, unit=" examples", disable=None, leave=False) as bar:
            self._progress = bar
            try:
                yield bar
            finally:
                self._progress = None

    _progress = None

    def _generate_examples(self, split):
        size = self.builder_config.sizes[split]
        for index, example in enumerate(
            dates.generate(
                split,
                size,
                formats=self.builder_config.formats or None,
                unique_locale=self.builder_config.unique_locale,
            )
        ):
            if self._progress is not None:
                self._progress.update()
            yield (
                index,
                {
                    "source": example.source,
                    "target": example.target,
                    "locale": example.locale,
                    "format": example.format,
                },
            )
