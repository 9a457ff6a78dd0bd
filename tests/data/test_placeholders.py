"""Placeholders found in messages, kept or lost by a translation, and the
ones a subword vocabulary keeps whole."""

import pytest

from keras_attention.data.placeholders import (
    frequent_placeholders,
    keeps_placeholders,
    placeholder_survival,
    placeholders,
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Cannot open %s: %d errors", ["%s", "%d"]),
        ("%-5d %lu %1$s %.2f %ld", ["%-5d", "%lu", "%1$s", "%.2f", "%ld"]),
        ("Copy %1 to %2", ["%1", "%2"]),
        ("%(name)s was saved", ["%(name)s"]),
        ("Delete {count} files from {0} ({0:.2f})", ["{count}", "{0}", "{0:.2f}"]),
        (
            '<b>Warning:</b> see <a href="x">this</a><br/>',
            ["<b>", "</b>", '<a href="x">', "</a>", "<br/>"],
        ),
        ("&quot;x&quot; &#160;", ["&quot;", "&quot;", "&#160;"]),
        ("100%% done, 50 % off, a < b > c & more", []),
        ("{} files", ["{}"]),  # Python's field numbered in order
    ],
)
def test_placeholders_are_found_in_order(text, expected):
    assert placeholders(text) == expected


def test_a_translation_keeps_them_in_any_order_each_as_many_times():
    assert keeps_placeholders("Copy %1 to %2", "Copier vers %2 depuis %1")
    assert keeps_placeholders("Plain", "Simple")
    assert not keeps_placeholders("%s and %s", "%s et")
    assert not keeps_placeholders("%s", "%d")
    assert not keeps_placeholders("Plain", "Simple %s")  # one made up counts too


def test_survival_counts_only_the_sources_with_placeholders():
    sources = ["Open %s", "Close", "<b>%d</b> files", "{n} left"]
    translations = ["Ouvrir %s", "Fermer", "<b>fichiers</b>", "{n} restants"]
    assert placeholder_survival(sources, translations) == {"pairs": 3, "kept": 2}


def test_the_frequent_ones_without_a_space_are_kept_whole():
    texts = ["%s %s", "%s <b>", '<a href="x"> %d', '<a href="x"> <a href="x">', "<b> <b>", "%d"]
    assert frequent_placeholders(texts, at_least=2) == ["%s", "<b>", "%d"]
    assert frequent_placeholders(texts, at_least=3) == ["%s", "<b>"]
