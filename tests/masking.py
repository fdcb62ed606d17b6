"""Tokens kept out of the suite's output: a failing test's report (its traceback shows a helper's
arguments, a token among them: `token = 'mst_blind-..._<secret>'` in a browser test's failure,
session 37) and its captured output, with each muster token's secret cut as the auth service
shows a token (`mst_<principal>_<id>_…`). tests/conftest.py applies it to every report."""

from __future__ import annotations

import re
from typing import Any

_SECRET = re.compile(r"(mst_[^\s'\"`]*_)[0-9a-f]{32,}")


def masked(text: str) -> str:
    """`text` with each muster token's secret replaced by `…`."""
    return _SECRET.sub(r"\1…", text)


def mask_report(report: Any) -> None:
    """A test report's failure text and captured sections, masked (in place)."""
    if report.longrepr is not None:
        text = str(report.longrepr)
        if masked(text) != text:
            report.longrepr = masked(text)
    report.sections = [(title, masked(body)) for title, body in report.sections]
