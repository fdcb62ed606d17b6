"""A plan's cost as people read it (pure): per hardware type, how many nodes at what price each
and their total, from a dry run's `cost` (`contracts.approvals.PlanCost` as JSON) and its layout."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from contracts.layout import Layout


def hardware_rates(cost: Mapping[str, Any], layout: Layout | None) -> list[str]:
    """`small 6 × 0.05/h = 0.30/h`, one per hardware type (a type the layout does not count: its total alone)."""
    counts: Counter[str] = Counter()
    for group in layout.layout if layout is not None else []:
        counts[group.hardwaretype] += group.count
    return [f"{h} {counts[h]} × {total / counts[h]:.2f}/h = {total:.2f}/h" if counts[h] else f"{h} {total:.2f}/h"
            for h, total in sorted(cost.get("by_hardware", {}).items())]
