"""Builds an English -> French (or -> another language) corpus of sentences
written by people: the message catalogs that Debian packages ship, read
pair by pair.

    python examples/build_catalog_corpus.py --output data/en_fr.tsv
    python examples/build_catalog_corpus.py --language es --output data/en_es.tsv

Every program translated with gettext carries, for each language, a catalog
(`/usr/share/locale/fr/LC_MESSAGES/NAME.mo`) of its English messages and the
translators' French. This script downloads the packages with
`apt-get download` (no install, no root needed beyond reading apt's lists),
unpacks them with `dpkg-deb -x`, reads every catalog of `--language`
(`fr` unless given: the folder name under `locale/`), keeps the
pairs that are plain text (no format placeholders, markup, paths or
untranslated entries; with `--keep-placeholders`, messages whose
placeholders the translation keeps, `%s`, `{name}`, `<b>` and the like,
are kept too), and writes one `english<TAB>french` line per English
message (`english<TAB>spanish` with `--language es`). It needs a Debian or
Ubuntu machine that can reach its package mirror; the output depends on
the mirror's package versions, which are listed in `<output>.sources.tsv`.

The catalogs are under their programs' licences (mostly the GPL and the
LGPL), so the corpus is rebuilt by this script, not kept in the repository.
Train on it with the recipe, which holds out validation and test pairs by a
hash of the English text:

    python -m keras_attention.recipes.translate --train-file data/en_fr.tsv
"""

import argparse
import collections
import re
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

from keras_attention.data.placeholders import PLACEHOLDER, keeps_placeholders, placeholders
from keras_attention.files import write_atomically

# Desktop programs and command-line tools with large French catalogs, all in
# Debian 12 (bookworm); most also have large Spanish ones. LibreOffice's
# catalogs come one language a package: `packages_for` names the one.
PACKAGES = """
    abiword-common apt audacity-data binutils-common coreutils deja-dup diffutils
    digikam-data dolphin dpkg e2fsprogs evince-common evolution-common
    filezilla-common findutils gcc-12-locales gdb geany-common gedit-common
    gettext gimp-data git gnome-control-center-data gnome-shell-common
    gnome-software-common gnucash-common gnumeric-common gnupg-l10n gparted grep
    inkscape kate kdenlive-data konsole krita-data libc-l10n libgtk-3-common
    libreoffice-l10n-{language} mousepad nautilus-data okular parted pidgin-data
    plasma-workspace rhythmbox-data scribus-data sed shotwell-common synaptic tar
    thunar-data totem-common transmission-common util-linux-locales vlc-l10n wget
    xfce4-panel
""".split()

MO_MAGIC = 0x950412DE
LANGUAGE = re.compile(r"[a-z]{2,3}(?:_[A-Z]{2})?(?:@\w+)?")  # gettext's: fr, pt_BR, sr@latin

# What marks a message as a template or markup rather than plain text:
# printf and Qt placeholders, Python and brace fields, shell variables,
# XML/HTML tags and entities, URLs, paths, command-line options.
NOT_PLAIN_TEXT = re.compile(
    r"%[-+ #0'*]*\d*(?:\.\d+)?[hlLqjzt]*[a-zA-Z%]"  # %s, %-5d, %lu, %%
    r"|%\d|%\(|\{[\w.:]*\}|\$[{(]?\w"  # %1, %(name)s, {0} {name}, $HOME ${x} $(x)
    r"|<[^>]*>|&\w+;|https?:|www\.|\w/\w|^/|\s/\w|(?:^|\s)--?\w|\\"
    r"|[@|=\[\]{}<>#~^*]"
)
# A keyboard accelerator: GTK's `_Open`, Qt's `&Open`.
ACCELERATOR = re.compile(r"[_&](?=\w)")
LETTER = re.compile(r"[^\W\d_]")


def read_mo(data):
    """`(message, translation)` pairs of a compiled gettext catalog (bytes).

    A message with a context (`context\\x04message`) keeps only the message;
    a plural entry (`singular\\x00plural`) keeps only its singular and first
    translation. The header (empty message) is left out.
    """
    for order in "<>":
        magic, _, count, originals, translations = struct.unpack_from(order + "5I", data)
        if magic == MO_MAGIC:
            break
    else:
        raise ValueError("not a gettext .mo catalog")

    def string(table, index):
        length, offset = struct.unpack_from(order + "2I", data, table + 8 * index)
        return data[offset : offset + length].decode("utf-8", errors="strict")

    for index in range(count):
        try:
            message, translation = string(originals, index), string(translations, index)
        except UnicodeDecodeError:
            continue  # a catalog in another encoding: rare, and not worth guessing
        message = message.split("\x04")[-1].split("\x00")[0]
        translation = translation.split("\x00")[0]
        if message:
            yield message, translation


def plain(text, keep_placeholders=False):
    """The text without accelerator marks and with single spaces, or None if
    it is not a plain one-line text with a letter in it. With
    `keep_placeholders`, its placeholders (`keras_attention.data.placeholders`:
    `%s`, `{name}`, `<b>`, ...) are kept as they are and the rest must be plain."""
    if "\n" in text.strip() or "\t" in text or "\0" in text:
        return None
    kept = placeholders(text) if keep_placeholders else []
    if kept:
        text = PLACEHOLDER.sub("\0", text)  # out of the checks' way, put back below
    if NOT_PLAIN_TEXT.search(text) or len(ACCELERATOR.findall(text)) > 1:
        return None  # two marks: more likely an identifier than an accelerator
    text = " ".join(ACCELERATOR.sub("", text, count=1).split())
    if not LETTER.search(text) or len(text) > 200:
        return None
    parts = text.split("\0")
    return parts[0] + "".join(p + part for p, part in zip(kept, parts[1:], strict=True))


def clean(message, translation, keep_placeholders=False):
    """The pair as two plain texts, or None: untranslated, empty, not plain,
    or (`keep_placeholders`) without the same placeholders on both sides."""
    english, translated = plain(message, keep_placeholders), plain(translation, keep_placeholders)
    if not english or not translated or english == translated:
        return None
    if not keeps_placeholders(english, translated):
        return None
    return english, translated


def corpus(catalogs, keep_placeholders=False):
    """One `(english, translation)` pair per English text: when catalogs
    translate it differently, the most frequent translation (then the first
    in sorted order), so the result does not depend on reading order."""
    translations = collections.defaultdict(collections.Counter)
    for data in catalogs:
        for message, translation in read_mo(data):
            pair = clean(message, translation, keep_placeholders)
            if pair:
                translations[pair[0]][pair[1]] += 1
    return [
        (english, min(counts, key=lambda text: (-counts[text], text)))
        for english, counts in sorted(translations.items())
    ]


def packages_for(language, packages=PACKAGES):
    """`packages` with `{language}` (LibreOffice's catalog package) filled in."""
    return [package.format(language=language.lower().replace("_", "-")) for package in packages]


def catalogs_of(root, language):
    """The gettext catalogs of `language` under the unpacked packages' `root`."""
    return sorted(Path(root).rglob(f"{language}/LC_MESSAGES/*.mo"))


def download(packages, folder):
    """Downloads and unpacks each package into `folder`; returns the
    `(package, version)` of those that were found."""
    found = []
    for package in packages:
        result = subprocess.run(
            ["apt-get", "download", package], cwd=folder, capture_output=True, text=True
        )
        if result.returncode != 0:
            print(f"skipped {package}: {result.stderr.strip().splitlines()[-1]}", file=sys.stderr)
            continue
        deb = sorted(Path(folder).glob(f"{package}_*.deb"))[-1]
        subprocess.run(["dpkg-deb", "-x", str(deb), str(Path(folder) / "root")], check=True)
        found.append((package, deb.name.split("_")[1].replace("%3a", ":")))
        deb.unlink()
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", required=True, help="the TSV file to write")
    parser.add_argument(
        "--language",
        default="fr",
        help="the catalogs' language, as gettext names their folder (fr, es, de, pt_BR, ...)",
    )
    parser.add_argument(
        "--packages",
        nargs="+",
        default=PACKAGES,
        help="Debian packages to read ({language} is filled in)",
    )
    parser.add_argument(
        "--keep-placeholders",
        action="store_true",
        help="keep messages with placeholders (%%s, {name}, <b>, ...) whose translation has "
        "the same ones",
    )
    args = parser.parse_args(argv)
    if not LANGUAGE.fullmatch(args.language):
        parser.error(f"--language must name a catalog folder (fr, pt_BR); got {args.language!r}")
    output = Path(args.output)
    with tempfile.TemporaryDirectory() as folder:
        sources = download(packages_for(args.language, args.packages), folder)
        catalogs = catalogs_of(Path(folder) / "root", args.language)
        if not catalogs:
            sys.exit(f"no catalog of --language {args.language} in the packages read")
        pairs = corpus((path.read_bytes() for path in catalogs), args.keep_placeholders)
    write_atomically(output, "".join(f"{e}\t{f}\n" for e, f in pairs))
    write_atomically(
        f"{output}.sources.tsv", "".join(f"{package}\t{version}\n" for package, version in sources)
    )
    print(f"{len(pairs):,} pairs from {len(catalogs)} catalogs of {len(sources)} packages")
    print(f"written to {output}")


if __name__ == "__main__":
    main()
