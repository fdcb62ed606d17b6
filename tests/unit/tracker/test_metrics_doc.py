"""Every metric the tracker serves is in docs/tracker.md's "Metrics" (the dashboard charts the
concurrency limits, which the list left out), so a scrape config or a query can be written from
the guide alone."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[3]
DEFINED = re.compile(r'(?:Counter|Gauge|Histogram|CounterMetricFamily|GaugeMetricFamily)\("(muster_[a-z0-9_]+)"')


def _served() -> dict[str, str]:
    """name -> how a query names it (a counter's samples end in `_total`)."""
    out: dict[str, str] = {}
    for path in (ROOT / "services" / "tracker").glob("*.py"):
        for found in DEFINED.finditer(path.read_text()):
            counter = found.group(0).startswith("Counter")
            out[found.group(1)] = found.group(1) + ("_total" if counter else "")
    return out


def test_every_metric_served_is_documented() -> None:
    doc = (ROOT / "docs" / "tracker.md").read_text()
    section = doc[doc.index("## Metrics"):doc.index("## Operator commands")]
    served = _served()
    assert len(served) > 25 and served["muster_planner_tasks_finished"] == "muster_planner_tasks_finished_total"
    assert sorted(q for q in served.values() if f"`{q}" not in section) == []
