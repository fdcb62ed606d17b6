"""Every file of the repository that the README or a guide in docs/ names exists: a test moved
or a module folded into another left guides pointing at nothing (found in session 15:
tests/e2e/test_up_scaling.py, tests/unit/tracker/test_locations.py, muster/tracing.py).
Decision records (docs/decisions/) are history and may name what has gone since."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
PATH = re.compile(r"(?<![\w/.-])((?:contracts|muster|services|tests|bench|deploy|examples)/[\w/.-]*\w\.(?:py|md|json|yaml|sh|txt))")


def _guides() -> list[Path]:
    return [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md"))]


def test_every_file_a_guide_names_exists() -> None:
    missing = sorted({(guide.name, path) for guide in _guides() for path in PATH.findall(guide.read_text())
                      if not (ROOT / path).exists()})
    assert missing == []


def test_the_check_sees_what_it_checks() -> None:
    """The pattern finds paths in the guides (a pattern that found nothing would pass above)."""
    found = {path for guide in _guides() for path in PATH.findall(guide.read_text())}
    assert "tests/e2e/test_up.py" in found and "muster/runtime/supervisor.py" in found and len(found) > 50
