"""The built-in offline task: written dates in many languages -> ISO 8601.

Every example is made on this machine from Babel's copy of the Unicode CLDR
data, so nothing is downloaded: "dimanche 29 novembre 2026",
"29. November 2026", "2026年11月29日" all translate to "2026-11-29".

Rules that keep the task well posed:

- every source string means exactly one date: formats with two-digit years
  are left out, and so are numeric formats that put the month before the day
  after a day-first locale could read them the other way (en's "11/29/26");
  `check_unambiguous` verifies it on the generated strings;
- train, validation and test share no date: each date belongs to one split,
  by a fixed hash of the date;
- the same seed gives the same examples, in the same order.
"""

import dataclasses
import datetime
import hashlib
import random
import re

from babel.dates import format_date, get_date_format

from keras_attention.utils import check_choice

# 28 locales, 11 scripts: Latin, Cyrillic, Greek, Arabic, Hebrew, Devanagari,
# Bengali, Tamil, Thai, Han (with kana), Hangul.
LOCALES = (
    "en",
    "fr",
    "de",
    "es",
    "it",
    "pt",
    "nl",
    "pl",
    "tr",
    "vi",
    "sv",
    "fi",
    "cs",
    "hu",
    "id",
    "ru",
    "uk",
    "el",
    "ar",
    "fa",
    "he",
    "hi",
    "bn",
    "ta",
    "th",
    "ja",
    "zh",
    "ko",
)
FORMATS = ("full", "long", "medium", "short")
FIRST_DATE = datetime.date(1900, 1, 1)
LAST_DATE = datetime.date(2099, 12, 31)
# Fraction of the dates that belong to each split.
SPLIT_FRACTIONS = {"train": 0.9, "validation": 0.05, "test": 0.05}
DEFAULT_SIZES = {"train": 60000, "validation": 2000, "test": 2000}


@dataclasses.dataclass(frozen=True)
class Example:
    source: str  # the written date, e.g. "29 novembre 2026"
    target: str  # ISO 8601, e.g. "2026-11-29"
    locale: str  # the CLDR locale that wrote it, e.g. "fr"
    format: str  # CLDR width: full, long, medium or short


def usable_formats(locale):
    """The CLDR formats of `locale` whose strings name one date only."""
    usable = []
    for width in FORMATS:
        pattern = _fields(get_date_format(width, locale=locale).pattern)
        year = re.search(r"y+", pattern).group()
        if year == "yy":
            continue  # two-digit year: 1926 or 2026?
        month = re.search(r"M+|L+", pattern).group()
        numeric_month = len(month) <= 2
        month_before_day = pattern.index(month) < pattern.index("d")
        year_first = pattern.index(year) < pattern.index(month)
        if numeric_month and month_before_day and not year_first:
            continue  # M/d/y: "01/02/2026" reads as 1 February elsewhere
        usable.append(width)
    return tuple(usable)


def _fields(pattern):
    """The pattern without its quoted literals (CLDR quotes text with ')."""
    return re.sub(r"'[^']*'", "", pattern)


def split_of(date):
    """Which split a date belongs to: a fixed hash, so splits share no date."""
    digest = hashlib.sha256(date.isoformat().encode()).digest()
    fraction = int.from_bytes(digest[:8], "big") / 2**64
    cumulative = 0.0
    for split, share in SPLIT_FRACTIONS.items():
        cumulative += share
        if fraction < cumulative:
            return split
    return split


def generate(split, size, seed=0, locales=LOCALES, formats=None, unique_locale=False):
    """Yields `size` examples of `split`, deterministically from `seed`.

    Each example: a date of the split, a locale and one of its usable
    formats (only those in `formats`, when given), all drawn uniformly.
    With `unique_locale`, a string that another locale would write the same
    way is skipped (Spanish and Portuguese share "sábado, 4 de abril de
    2026"), so the locale can be told from the string.
    """
    check_choice("split", split, SPLIT_FRACTIONS)
    rng = random.Random(f"{seed}-{split}")
    formats = {
        locale: tuple(w for w in usable_formats(locale) if formats is None or w in formats)
        for locale in locales
    }
    span = (LAST_DATE - FIRST_DATE).days
    produced = 0
    while produced < size:
        date = FIRST_DATE + datetime.timedelta(days=rng.randrange(span + 1))
        if split_of(date) != split:
            continue
        locale = rng.choice(locales)
        width = rng.choice(formats[locale])
        source = format_date(date, format=width, locale=locale)
        if unique_locale and any(
            format_date(date, format=width, locale=other) == source
            for other in locales
            if other != locale and width in formats[other]
        ):
            continue
        yield Example(source, date.isoformat(), locale, width)
        produced += 1


def check_unambiguous(examples, label="target"):
    """Raises `ValueError` if one source string has two different labels
    (`"target"`: two dates; `"locale"`: two languages)."""
    seen = {}
    for example in examples:
        previous = seen.setdefault(example.source, example)
        if getattr(previous, label) != getattr(example, label):
            raise ValueError(f"{example.source!r} has two {label}s: {previous} and {example}")
