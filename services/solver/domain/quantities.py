"""How many nodes a service may run on: min/max, the ratio extension (a share of the
cluster's nodes, see contracts.catalog.Ratio), and muster's rule that a service on the
cluster runs on at least one node. Each bound carries the words that explain it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from contracts.catalog import ClusterTemplate

from .counts import UNBOUNDED


@dataclass(frozen=True)
class Bound:
    value: int
    text: str
    # Explanations prefer limits a person wrote down over the implied "at least 1 node".
    implied: bool = False
    # A ratio bound changes with the node count: "at most M nodes" reasoning must not use it.
    scales: bool = False


def _percent(value: float) -> Fraction:
    # Through the shortest repr so that 33.3 means 333/1000, not the binary float.
    return Fraction(repr(value)) / 100


def _show(value: float) -> str:
    return f"{value:g}%"


def lower_bound(template: ClusterTemplate, service: str, nodes: int) -> Bound:
    best = Bound(1, f"{service} at least 1 (it is on the cluster)", implied=True)
    constraint = template.constraints.services.get(service)
    if constraint is None:
        return best
    quantities = constraint.quantities
    if quantities.ratio is not None and quantities.ratio.min is not None:
        needed = math.ceil(_percent(quantities.ratio.min) * nodes)
        if needed >= best.value:
            text = f"{service} ratio min {_show(quantities.ratio.min)} (= {needed} of {nodes} nodes)"
            best = Bound(needed, text, scales=True)
    if quantities.min >= best.value:
        best = Bound(quantities.min, f"{service} min {quantities.min}")
    return best


def upper_bound(template: ClusterTemplate, service: str, nodes: int) -> Bound:
    best = Bound(UNBOUNDED, f"{service} has no maximum")
    constraint = template.constraints.services.get(service)
    if constraint is None:
        return best
    quantities = constraint.quantities
    if quantities.max is not None:
        best = Bound(quantities.max, f"{service} max {quantities.max}")
    if quantities.ratio is not None and quantities.ratio.max is not None:
        allowed = math.floor(_percent(quantities.ratio.max) * nodes)
        if allowed < best.value:
            text = f"{service} ratio max {_show(quantities.ratio.max)} (= {allowed} of {nodes} nodes)"
            best = Bound(allowed, text, scales=True)
    return best
