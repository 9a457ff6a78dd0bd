"""The guide's code runs, its pictures exist, and the script that makes them
still works (in its quick mode)."""

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
GUIDE = (DOCS / "guide.md").read_text()
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def make_figures_module():
    spec = importlib.util.spec_from_file_location("make_figures", DOCS / "make_figures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_guides_code_runs_in_order():
    namespace = {}
    blocks = re.findall(r"```python\n(.*?)```", GUIDE, flags=re.DOTALL)
    assert len(blocks) >= 8
    for block in blocks:
        exec(compile(block, "docs/guide.md", "exec"), namespace)  # noqa: S102
    assert tuple(namespace["scores"]["cross_attention"].shape) == (1, 4, 3, 5)


@pytest.mark.parametrize(
    "page",
    # (serving.md exports a model and calls each signature: most of a minute.)
    ["layers", "models", "training", pytest.param("serving", marks=pytest.mark.large)],
)
def test_each_pages_code_runs_in_order(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the examples write pictures and exports
    blocks = re.findall(r"```python\n(.*?)```", (DOCS / f"{page}.md").read_text(), re.DOTALL)
    assert blocks
    namespace = {}
    for block in blocks:
        exec(compile(block, f"docs/{page}.md", "exec"), namespace)  # noqa: S102


def test_every_page_is_linked_and_every_link_is_in_the_repository():
    readme = DOCS.parent / "README.md"
    pages = sorted(DOCS.glob("*.md"))
    for page in pages:
        assert f"(docs/{page.name})" in readme.read_text(), page.name
    for document in [readme, *pages]:
        prose = re.sub(r"```.*?```|`[^`]*`", "", document.read_text(), flags=re.DOTALL)
        for target in re.findall(r"\]\(([^)#]+)", prose):
            if not target.startswith("https://"):
                assert (document.parent / target).exists(), (document.name, target)


def test_every_picture_in_the_guide_is_made_by_the_script():
    pictures = re.findall(r"\]\(figures/([\w.]+)\)", GUIDE)
    assert sorted(pictures) == sorted(make_figures_module().FIGURES)
    for name in pictures:
        assert (DOCS / "figures" / name).read_bytes()[:8] == PNG_MAGIC


# Trains the guide's models: `pytest -m large`.
@pytest.mark.large
def test_the_script_makes_every_picture_from_scratch(tmp_path):
    """As its docstring runs it, in a process of its own: run in this
    worker, the two runs and exports it makes kept 2.8 GB of its memory
    after the test had ended."""
    module = make_figures_module()
    script = [sys.executable, str(DOCS / "make_figures.py")]
    output_dir = tmp_path / "figures"
    subprocess.run([*script, "--quick", "--output-dir", str(output_dir)], check=True, timeout=1200)
    for name in module.FIGURES:
        assert (output_dir / name).read_bytes()[:8] == PNG_MAGIC


def test_the_api_reference_builds_without_warnings(tmp_path):
    """`pdoc`, as the README's command runs it: every public layer, builder,
    decoding and export function, and every recipe flag, from the docstrings."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pdoc",
            "keras_attention",
            "keras_attention.recipes",
            "-o",
            str(tmp_path),
        ],
        env={**os.environ, "PDOC_ALLOW_EXEC": "1"},  # TensorFlow runs `uname` on import
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert [line for line in result.stderr.splitlines() if line.startswith("Warn")] == []
    pages = {
        "layers": ["MultiHeadSelfAttention", "BahdanauAttention", "TransformerDecoderBlock"],
        "models": ["build_transformer", "build_seq2seq_attention", "build_transformer_lm"],
        "decoding": ["beam_search", "greedy_search", "sample"],
        "export": ["export_model", "write_models_config"],
        "recipes/translate": ["--beam-size", "--export-version", "--deterministic"],
    }
    for page, names in pages.items():
        html = (tmp_path / "keras_attention" / f"{page}.html").read_text()
        for name in names:
            assert name in html, (page, name)


# One source for every number: each measured figure on a page is one that
# a results file holds.

ROOT = DOCS.parent
RESULT_FILES = {
    path.name: path
    for path in sorted((ROOT / "benchmarks").glob("results*.json"))
    + [ROOT / "benchmarks" / "translation_peer.json"]
}
FIGURE_PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md")), ROOT / "benchmarks" / "README.md"]

NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
SECONDS = {"us": 1e-6, "ms": 1e-3, "s": 1, "second": 1, "seconds": 1, "min": 60}
SECONDS |= {"minute": 60, "minutes": 60, "h": 3600, "hour": 3600, "hours": 3600}
MEMORY = ["KiB", "MiB", "GiB", "kB", "MB", "GB"]
RATES = r"GFLOP/s|(?:tokens|texts|sentences)(?:/s| a second| per second)"
FIGURE = re.compile(
    rf"(?<![\w.,])(?:(?P<minutes>{NUMBER}) min (?P<seconds>{NUMBER}) s\b"
    rf"|(?P<ratio>{NUMBER})x\b"
    rf"|(?P<value>{NUMBER}) ?(?P<unit>%|(?:{'|'.join(SECONDS)}|{'|'.join(MEMORY)})\b|{RATES}))"
    rf"|\b(?:sacreBLEU|BLEU|chrF|perplexity)(?: of| at| was| is|:)? (?P<score>{NUMBER})\b"
    rf"|(?<![\w.,])(?P<points>{NUMBER}) (?:BLEU|chrF)\b"
)
# A bound (a target, a limit, a default) is a setting, not a measurement.
BOUND = re.compile(r"\b(?:at least|at most|within|under|up to|default|limit of)\s+$")
CELL_OF_NUMBERS = re.compile(rf"(?:{NUMBER})(?:(?:, | / )(?:{NUMBER}))*")
CITATION = re.compile(r"\b(?:results\w*|translation_peer)\.json\b")

# Numbers with a figure's unit that are settings of the project, not
# measurements; each is removed from its page (however its lines are
# wrapped) before figures are read.
NOT_FIGURES = {
    # The recipe's held-out share and its time budget for a corpus:
    "README.md": ["5% of the pairs for validation and 5%", "about 10 minutes"],
    "docs/training.md": ["(`--held-out-share`, 5% each)", "in about 10 minutes"],
    # A property of the shapes: one [B, H, T, T] tensor's size.
    "docs/layers.md": ["one such tensor is 16 GiB"],
}


# What a results file says about its run, not what it measured.
PROVENANCE = {"command", "date", "commit", "machine", "filled_from_git", "what"}


def wrapped(phrase):
    """A pattern for `phrase` with its lines wrapped anywhere."""
    return r"\s+".join(re.escape(word) for word in phrase.split())


def result_values(value):
    """Every number a results file measured, numbers written inside its
    strings included (`"rounds": "1.21, 1.30"`)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key not in PROVENANCE:
                yield from result_values(item)
    elif isinstance(value, list):
        for item in value:
            yield from result_values(item)
    elif isinstance(value, str):
        for number in re.findall(NUMBER, value):
            yield float(number.replace(",", ""))
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield float(value)


def figures(text):
    """(figure as written, [numbers in the page's unit it may be], decimals)
    for every measured figure of a page's prose and tables: code, fenced
    and inline, and link targets are not prose."""

    def number(written):
        return float(written.replace(",", "")), len(written.partition(".")[2])

    def found(match):
        written = match.group(0)
        if match["minutes"]:
            minutes, seconds = float(match["minutes"]), float(match["seconds"])
            return written, [lambda j: j], minutes * 60 + seconds, 0
        if match["ratio"]:
            return written, [lambda j: j], *number(match["ratio"])
        if match["score"] or match["points"]:
            return written, [lambda j: j], *number(match["score"] or match["points"])
        unit = match["unit"]
        if unit == "%":  # stored as a share or as a percentage
            scales = [lambda j: j * 100, lambda j: j]
        elif unit in SECONDS:  # stored in seconds or in milliseconds
            factor = SECONDS[unit]
            scales = [lambda j: j / factor, lambda j: j / 1000 / factor]
        elif unit in MEMORY:  # stored in the page's unit, or MiB against GiB
            scales = [lambda j: j, lambda j: j / 1024, lambda j: j * 1024]
        else:
            scales = [lambda j: j]
        return written, scales, *number(match["value"])

    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    text = re.sub(r"`[^`]*`", "", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    for line in text.splitlines():
        if line.startswith("|") and not set(line) <= set("|-: "):
            for cell in line.strip().strip("|").split("|"):
                cell = cell.strip().strip("*")
                if CELL_OF_NUMBERS.fullmatch(cell):
                    for written in re.split(r", | / ", cell):
                        yield written, [lambda j: j], *number(written)
                    continue
                for match in FIGURE.finditer(cell):
                    if not BOUND.search(cell[: match.start()]):
                        yield found(match)
        else:
            for match in FIGURE.finditer(line):
                if not BOUND.search(line[: match.start()]):
                    yield found(match)


def sections(text):
    """(heading, text, results files it cites) for each part of a page
    under one heading (a `#` line in a fenced block is no heading). A part
    that cites none quotes those of the nearest heading above it that does."""
    parts, fenced = [["", []]], False
    for line in text.splitlines():
        fenced ^= line.startswith("```")
        if not fenced and re.match(r"#{1,6} ", line):
            parts.append([line, []])
        else:
            parts[-1][1].append(line)
    above = []  # (level, names cited) of the headings above this part
    for heading, lines in parts:
        body = "\n".join(lines)
        level = len(heading) - len(heading.lstrip("#"))
        while above and above[-1][0] >= level:
            above.pop()
        own = set(CITATION.findall(body))
        above.append((level, own))
        yield heading, body, own or next((n for _, n in reversed(above) if n), set())


def unsourced_figures(page_name, text):
    """Each figure of a page that no results file its part cites holds, at
    the page's precision. Returns ["page, heading: figure (why)"]."""
    for phrase in NOT_FIGURES.get(page_name, []):
        text = re.sub(wrapped(phrase), "", text)
    problems = []
    values = {name: None for name in RESULT_FILES}
    for heading, body, cited in sections(text):
        for written, scales, page_value, decimals in figures(body):
            where = f"{page_name}, {heading or 'top'}: {written!r}"
            if not cited:
                problems.append(f"{where} (its part cites no results file)")
                continue
            tolerance = 0.5 * 10**-decimals + 1e-9
            found = False
            for name in cited:
                if name not in RESULT_FILES:
                    problems.append(f"{where} ({name} is not a results file)")
                    continue
                if values[name] is None:
                    values[name] = list(result_values(json.loads(RESULT_FILES[name].read_text())))
                found = found or any(
                    abs(scale(value) - page_value) <= tolerance
                    for value in values[name]
                    for scale in scales
                )
            if not found:
                problems.append(f"{where} (in none of {sorted(cited)})")
    return problems


def test_every_figure_on_a_page_is_in_the_results_file_it_cites():
    """One source for every number. A figure is what a page says was
    measured, recognised by its form (code, fenced or inline, is not read):

    - a time: `8 min 59 s`, `35 ms`, `26.7 s`, `12 us`, `6 minutes`;
    - a share: `63%`; a ratio: `1.33x`;
    - memory: `90 MiB`, `2 GiB`, `17 GB`;
    - a rate: `321.8 GFLOP/s`, `9,554 tokens/s`, `320.4 sentences a second`;
    - a score: `sacreBLEU 17.20`, `chrF 42.93`, `perplexity 13.1`, `0.01 BLEU`;
    - every table cell that is a number, or numbers joined by ", " or " / ".

    A figure right after "at least", "at most", "within", "under", "up
    to", "default" or "limit of" is a bound (a target, a limit), not a
    measurement; the few settings written with a unit are in NOT_FIGURES.
    Version numbers, model sizes, counts and hyperparameters carry none of
    these forms. Nor does a bare number in prose, which is not read: a
    measured figure gets its unit, or a table cell.

    Each part of a page (the text under one heading) names the results
    files it quotes (`benchmarks/results.json`, a link to one, ...), or
    quotes those of the nearest heading above it that names some. Each
    figure must be a number of one of them, compared at the page's
    precision: the file's value rounded to the figure's decimals, a time
    converted from seconds or milliseconds, a share from a fraction or a
    percentage, memory in MiB or GiB."""
    problems = []
    for page in FIGURE_PAGES:
        name = str(page.relative_to(ROOT))
        problems += unsourced_figures(name, page.read_text())
    for page, phrases in NOT_FIGURES.items():
        for phrase in phrases:
            assert re.search(wrapped(phrase), (ROOT / page).read_text()), (page, phrase)
    assert problems == [], "\n".join(problems)


def test_the_figure_check_catches_a_figure_no_results_file_holds():
    quoted = "## English -> French\n\nFrom `benchmarks/translation_peer.json`:"
    assert unsourced_figures("page", f"{quoted} sacreBLEU 17.20, chrF 42.93, 8 min 59 s.") == []
    (problem,) = unsourced_figures("page", f"{quoted} sacreBLEU 17.46, chrF 42.93.")
    assert "sacreBLEU 17.46" in problem
    (problem,) = unsourced_figures("page", f"{quoted}\n\n| ours | 17.20 | 42.95 |\n")
    assert "42.95" in problem
    # At the page's precision: the file's 539.4 s is "9 min" and "539 s",
    # not "538 s"; its 17.2 is "17", not "17.21".
    assert unsourced_figures("page", f"{quoted} 9 min, 539 s, sacreBLEU 17 of training.") == []
    assert len(unsourced_figures("page", f"{quoted} 538 s, sacreBLEU 17.21")) == 2
    (problem,) = unsourced_figures("page", "## Speed\n\nTwice as fast: 2.00x.")
    assert "cites no results file" in problem
    problems = unsourced_figures("page", "## Speed\n\nFrom `results_none.json`: 2.00x.")
    assert "results_none.json is not a results file" in problems[0]
    assert unsourced_figures("page", "## Goal\n\nat least 1.15x KerasHub's, `max_length` 48") == []


# The pages are guides: what is true of the package now, not a log of how it
# got there or of the machine it was measured on.
LAB_LOG = {
    "a commit hash": re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b"),
    "a bare issue number": re.compile(r"\bissues? #?\d+|(?<![\w/&])#\d+\b", re.IGNORECASE),
    "a remark about one machine or day": re.compile(
        r"\b(?:this|that|the same) (?:machine|CPU|day|morning|evening|hour|session)\b"
        r"|\bthe next day\b|\b(?:this|the previous|the last) round\b|\bruns today\b",
        re.IGNORECASE,
    ),
}


def lab_log_remarks(text):
    """Commit hashes, issue numbers without a link, and remarks about one
    machine or one day ("this machine cannot run the model server", "the
    next day the same machine was fast again"). A link's text may name an
    issue: `[pytest-xdist's issue 1323](https://...)`."""
    text = re.sub(r"\[[^\]]*\]\(https://[^)]*\)", "", text)
    return [
        f"{what}: {match.group(0)!r}"
        for what, pattern in LAB_LOG.items()
        for match in pattern.finditer(text)
    ]


def test_the_pages_have_no_hashes_issue_numbers_or_remarks_about_one_machine():
    problems = []
    for page in FIGURE_PAGES:
        problems += [f"{page.relative_to(ROOT)}: {p}" for p in lab_log_remarks(page.read_text())]
    assert problems == [], "\n".join(problems)


def test_the_lab_log_check_catches_each_kind():
    assert lab_log_remarks("Measured at 59eb9de, after issue #6 (#14).") == [
        "a commit hash: '59eb9de'",
        "a bare issue number: 'issue #6'",
        "a bare issue number: '#14'",
    ]
    assert lab_log_remarks("This machine cannot run the model server.") != []
    assert lab_log_remarks("The next day the same machine was fast again.") != []
    assert lab_log_remarks("[pytest-xdist issue 1323](https://github.com/x/y/issues/1323)") == []
    assert lab_log_remarks("ids 0-3, 2,048 tokens, `decade`, [docs](#commands)") == []
