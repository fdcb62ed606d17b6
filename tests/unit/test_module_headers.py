"""Every module of muster/, services/ and contracts/ opens by saying what it is for, in a
sentence or two; and its comments quote no benchmark figure or issue number (those go stale:
they live in docs/benchmarks.md and the issue tracker). Files are read, nothing is imported."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TREES = ("muster", "contracts", "services")
OPENING_LINES = 3
"""The docstring's first paragraph, at most this many lines (wrapped at 100 columns): what the
module is for; the how and why come after a blank line."""

FIGURE = re.compile(
    r"#\d+\b"  # an issue number: a hash and digits
    r"|\bissue \d+"
    r"|\b\d[\d,.]*\s?(ms|µs|us|MB|GB|KB|kB)\b"  # a time or a size measured
    r"|\b\d[\d,.]*\s?x\b(?! \d)"  # a speed-up ("3.2x"), not a product ("3 x 4")
    r"|x the raw"
    r"|\b\d[\d,.]*\s?(\w+\s?)?(/s|a second|per second)\b",  # a rate
    re.IGNORECASE)


def _modules() -> list[Path]:
    return sorted(p for top in TREES for p in (ROOT / top).rglob("*.py") if p.read_text().strip())


def test_every_module_opens_with_a_sentence_or_two_on_what_it_is_for() -> None:
    missing, long = [], []
    for path in _modules():
        doc = ast.get_docstring(ast.parse(path.read_text()))
        name = str(path.relative_to(ROOT))
        if not doc:
            missing.append(name)
        elif len(doc.split("\n\n")[0].splitlines()) > OPENING_LINES:
            long.append(name)
    assert missing == [], f"modules without a docstring: {missing}"
    assert long == [], f"docstrings whose opening paragraph runs past {OPENING_LINES} lines: {long}"


def test_no_comment_quotes_a_benchmark_figure_or_an_issue_number() -> None:
    found = []
    for path in _modules():
        text = path.read_text()
        if not FIGURE.search(text):  # (tokenizing is slow: only files with a candidate at all)
            continue
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT and FIGURE.search(tok.string):
                found.append(f"{path.relative_to(ROOT)}:{tok.start[0]}: {tok.string.strip()}")
    assert found == []


ISSUE = re.compile(r"#\d+\b|\bissue #?\d+", re.IGNORECASE)


def test_no_test_comment_names_an_issue_number() -> None:
    """Tests may explain a timing in a comment, but the issue a test came from is in its history."""
    found = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        text = path.read_text()
        if not ISSUE.search(text):
            continue
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT and ISSUE.search(tok.string):
                found.append(f"{path.relative_to(ROOT)}:{tok.start[0]}: {tok.string.strip()}")
    assert found == []


def test_the_figure_pattern_tells_figures_from_other_numbers() -> None:
    for figure in ("# was 12.5 ms", "# 3.2x faster", "# issue #27", "# see #18.6", "# 4,000 events/s", "# ~20 MB",
                   "# 0.36x the raw"):
        assert FIGURE.search(figure), figure
    for plain in ("# 3 x 4 nodes", "# retry after 2 s", "# the 10,000-node plan", "# noqa: BLE001", "# type: ignore[arg-type]",
                  "# decision 12", "# RFC 7230"):
        assert not FIGURE.search(plain), plain
