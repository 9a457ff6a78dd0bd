import datetime

import pytest
from babel.dates import format_date

from keras_attention.data import dates


def test_at_least_20_locales_in_several_scripts():
    assert len(dates.LOCALES) >= 20
    sources = {
        loc: format_date(datetime.date(2026, 11, 29), "full", locale=loc) for loc in dates.LOCALES
    }
    assert sources["fr"] == "dimanche 29 novembre 2026"
    scripts = {
        "Latin": "fr",
        "Cyrillic": "ru",
        "Greek": "el",
        "Arabic": "ar",
        "Hebrew": "he",
        "Devanagari": "hi",
        "Thai": "th",
        "Han": "zh",
        "Hangul": "ko",
    }
    ranges = {
        "Cyrillic": (0x400, 0x4FF),
        "Greek": (0x370, 0x3FF),
        "Arabic": (0x600, 0x6FF),
        "Hebrew": (0x590, 0x5FF),
        "Devanagari": (0x900, 0x97F),
        "Thai": (0xE00, 0xE7F),
        "Han": (0x4E00, 0x9FFF),
        "Hangul": (0xAC00, 0xD7AF),
    }
    for script, (low, high) in ranges.items():
        assert any(low <= ord(c) <= high for c in sources[scripts[script]]), script


def test_every_usable_format_is_unambiguous_over_two_whole_years():
    """Exhaustive over every locale and usable format for 730 consecutive
    dates: each string names one date (day/month order included)."""
    examples = [
        dates.Example(format_date(day, width, locale=locale), day.isoformat(), locale, width)
        for locale in dates.LOCALES
        for width in dates.usable_formats(locale)
        for day in (datetime.date(2025, 1, 1) + datetime.timedelta(n) for n in range(730))
    ]
    dates.check_unambiguous(examples)


def test_the_rules_leave_out_two_digit_years_and_month_first_numbers():
    assert "short" not in dates.usable_formats("en")  # M/d/yy
    assert "short" not in dates.usable_formats("de")  # dd.MM.yy
    assert "short" in dates.usable_formats("fr")  # dd/MM/y
    assert "short" in dates.usable_formats("ja")  # y/MM/dd: year first
    ambiguous = [
        dates.Example("01/02/2026", "2026-01-02", "en", "short"),
        dates.Example("01/02/2026", "2026-02-01", "fr", "short"),
    ]
    with pytest.raises(ValueError, match="01/02/2026"):
        dates.check_unambiguous(ambiguous)


def test_language_id_strings_name_one_language():
    examples = list(dates.generate("test", 1500, formats=("full",), unique_locale=True))
    for example in examples:
        day = datetime.date.fromisoformat(example.target)
        others = {
            loc for loc in dates.LOCALES if format_date(day, "full", locale=loc) == example.source
        }
        assert others == {example.locale}, example
    # Without the filter, some strings are shared (Spanish and Portuguese).
    shared = dates.Example("sábado, 4 de abril de 2026", "2026-04-04", "es", "full")
    assert format_date(datetime.date(2026, 4, 4), "full", locale="pt") == shared.source


def test_splits_share_no_date_and_generation_is_deterministic():
    splits = {split: list(dates.generate(split, 3000)) for split in dates.SPLIT_FRACTIONS}
    days = {split: {e.target for e in examples} for split, examples in splits.items()}
    assert not days["train"] & days["test"]
    assert not days["train"] & days["validation"]
    assert not days["validation"] & days["test"]
    assert list(dates.generate("test", 3000)) == splits["test"]
    assert list(dates.generate("test", 3000, seed=1)) != splits["test"]
    for example in splits["train"][:200]:
        assert example.target == datetime.date.fromisoformat(example.target).isoformat()
        assert example.format in dates.usable_formats(example.locale)
    assert len({e.locale for e in splits["train"]}) == len(dates.LOCALES)


def test_bad_split():
    with pytest.raises(ValueError, match="'dev'"):
        next(dates.generate("dev", 1))
