"""docs/faults.md against tests/fault/: every scenario the suite runs (a module marked `fault` or
`soak`) is in the guide, and every `MUSTER_SOAK_*` setting the guide names is one the soak
reads. Scenario 7 (`test_pools.py`) and the trace scenario (`test_traces.py`) ran in every
`make test` without a line in the guide's table (found walking it, session 17)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
FAULT = ROOT / "tests" / "fault"
GUIDE = ROOT / "docs" / "faults.md"
MARKED = re.compile(r"pytest\.mark\.(fault|soak)\b")
SETTING = re.compile(r"\bMUSTER_SOAK_[A-Z_]*[A-Z]")


def _scenarios() -> list[str]:
    return sorted(p.name for p in FAULT.glob("test_*.py") if MARKED.search(p.read_text()))


def test_every_scenario_is_in_the_guide() -> None:
    scenarios = _scenarios()
    assert len(scenarios) > 10 and "test_soak.py" in scenarios
    guide = GUIDE.read_text()
    assert [name for name in scenarios if not re.search(rf"[`/]{re.escape(name)}`", guide)] == []


def test_every_soak_setting_the_guide_names_is_read_by_the_soak() -> None:
    read = set(SETTING.findall((FAULT / "test_soak.py").read_text()))
    named = set(SETTING.findall(GUIDE.read_text()))
    assert {"MUSTER_SOAK_SECONDS", "MUSTER_SOAK_OPS"} <= named
    assert sorted(named - read) == []
