"""The example scripts' own logic (what needs no network): reading gettext
catalogs and keeping only plain-text pairs for the English-French corpus."""

import importlib.util
import struct
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "build_catalog_corpus.py"
spec = importlib.util.spec_from_file_location("build_catalog_corpus", SCRIPT)
corpus_script = importlib.util.module_from_spec(spec)
spec.loader.exec_module(corpus_script)


def compiled_catalog(entries, order="<"):
    """A gettext .mo file of `(message, translation)` string pairs, laid out
    as GNU msgfmt does: header, two tables of (length, offset), strings."""
    entries = sorted(entries)
    count = len(entries)
    originals, translations = 28, 28 + 8 * count
    strings_start = 28 + 16 * count
    data, tables = b"", {0: [], 1: []}
    for side in (0, 1):
        for entry in entries:
            text = entry[side].encode()
            tables[side].append((len(text), strings_start + len(data)))
            data += text + b"\0"
    header = struct.pack(order + "7I", 0x950412DE, 0, count, originals, translations, 0, 0)
    table_bytes = b"".join(
        struct.pack(order + "2I", *row) for side in (0, 1) for row in tables[side]
    )
    return header + table_bytes + data


@pytest.mark.parametrize("order", ["<", ">"])
def test_read_mo_of_either_byte_order(order):
    catalog = compiled_catalog(
        [
            ("", "Content-Type: text/plain; charset=UTF-8\n"),  # the header: left out
            ("Open", "Ouvrir"),
            ("menu\x04Quit", "Quitter"),  # a context: kept without it
            ("%d file\x00%d files", "%d fichier\x00%d fichiers"),  # plural: the singular
        ],
        order,
    )
    assert sorted(corpus_script.read_mo(catalog)) == [
        ("%d file", "%d fichier"),
        ("Open", "Ouvrir"),
        ("Quit", "Quitter"),
    ]


@pytest.mark.parametrize(
    "message,translation,expected",
    [
        ("_Open the file", "_Ouvrir le fichier", ("Open the file", "Ouvrir le fichier")),
        ("&Save  as…", "Enregistrer &sous…", ("Save as…", "Enregistrer sous…")),
        ("Well-known e-mail", "Courriel bien connu", ("Well-known e-mail", "Courriel bien connu")),
        ("Deleted %s", "%s supprimé", None),  # printf placeholder
        ("Page {0} of {1}", "Page {0} sur {1}", None),  # brace fields
        ("Size: $(SIZE)", "Taille : $(SIZE)", None),  # variables
        ("<b>Bold</b>", "<b>Gras</b>", None),  # markup
        ("See https://example.org", "Voir https://example.org", None),
        ("Use --force", "Utiliser --force", None),  # a command-line option
        ("Two\nlines", "Deux\nlignes", None),
        ("Network", "Network", None),  # untranslated
        ("Network", "", None),
        ("1024", "1 024", None),  # no letter
        ("a_b_c", "a_b_c ok", None),  # identifiers, not accelerators
    ],
)
def test_only_plain_text_pairs_are_kept(message, translation, expected):
    assert corpus_script.clean(message, translation) == expected


@pytest.mark.parametrize(
    "message,translation,expected",
    [
        ("Deleted %s", "%s supprimé", ("Deleted %s", "%s supprimé")),
        ("Page {0} of {1}", "Page {1} sur {0}", ("Page {0} of {1}", "Page {1} sur {0}")),
        ("<b>_Bold</b> %d", "<b>_Gras</b> %d", ("<b>Bold</b> %d", "<b>Gras</b> %d")),
        ("Copy {file_name}", "Copier {file_name}", ("Copy {file_name}", "Copier {file_name}")),
        ("Deleted %s", "Supprimé", None),  # the translation lost it
        ("Deleted %s", "%d supprimé", None),  # or changed it
        ("%s and %s", "%s et", None),  # or has it fewer times
        ("Size: $(SIZE) %s", "Taille : $(SIZE) %s", None),  # the rest must be plain
        ("Two\nlines %s", "Deux\nlignes %s", None),
        ("Network", "Network", None),
    ],
)
def test_with_placeholders_the_pairs_that_keep_theirs_are_kept(message, translation, expected):
    assert corpus_script.clean(message, translation, keep_placeholders=True) == expected


def test_one_translation_per_english_text_the_most_frequent():
    catalogs = [
        compiled_catalog([("File", "Fichier"), ("Open", "Ouvrir")]),
        compiled_catalog([("File", "Fichier"), ("Close", "Fermer")]),
        compiled_catalog([("File", "Dossier")]),
    ]
    assert corpus_script.corpus(catalogs) == [
        ("Close", "Fermer"),
        ("File", "Fichier"),
        ("Open", "Ouvrir"),
    ]
    # The reading order does not change the result.
    assert corpus_script.corpus(catalogs[::-1]) == corpus_script.corpus(catalogs)


def test_another_language_reads_its_own_catalogs(tmp_path):
    assert "libreoffice-l10n-fr" in corpus_script.packages_for("fr")
    spanish = corpus_script.packages_for("es")
    assert "libreoffice-l10n-es" in spanish and "libreoffice-l10n-fr" not in spanish
    assert "libreoffice-l10n-pt-br" in corpus_script.packages_for("pt_BR")  # Debian's spelling
    for language in ("fr", "es", "es_MX"):
        folder = tmp_path / "usr/share/locale" / language / "LC_MESSAGES"
        folder.mkdir(parents=True)
        (folder / "gedit.mo").write_bytes(compiled_catalog([("Open", "Abrir")]))
    (found,) = corpus_script.catalogs_of(tmp_path, "es")
    assert found.parent.parent.name == "es"


@pytest.mark.parametrize("language", ["Spanish", "es-ES", "../fr", ""])
def test_a_language_that_names_no_catalog_folder_is_refused(language, tmp_path, capsys):
    with pytest.raises(SystemExit):
        corpus_script.main(["--language", language, "--output", str(tmp_path / "out.tsv")])
    assert f"--language must name a catalog folder (fr, pt_BR); got {language!r}" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "out.tsv").exists()
