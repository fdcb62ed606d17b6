"""What a plan's machines cost, from the catalog's hardware types (pure).

Each hardware type's `providermap.<provider>.cost` is a price per hour of one node (Coopr's
field, a number or a numeric string). The cost of a plan is the cluster's per-hour cost once the
job is done, next to its cost before, both in total and per hardware type; a hardware type
without a cost for the provider counts as 0 and is named in `unknown`, so that a preview never
shows a made-up figure as complete.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from contracts.approvals import PlanCost
from contracts.catalog import HardwareType
from contracts.layout import NodeSpec
from muster.readmodel.cost import rate


def _each(hardware: Mapping[str, HardwareType], provider: str, nodes: Sequence[NodeSpec],
          unknown: set[str]) -> dict[str, float]:
    out = {}
    for node in nodes:
        found = hardware.get(node.hardwaretype)
        price = found.cost(provider) if found is not None else None
        if price is None:
            unknown.add(node.hardwaretype)
        out[node.id] = round(price or 0.0, 6)
    return out


def plan_cost(hardware: Mapping[str, HardwareType], provider: str, target: Sequence[NodeSpec],
              before: Sequence[NodeSpec] = ()) -> PlanCost:
    unknown: set[str] = set()
    per_node = _each(hardware, provider, target, unknown)
    previous = _each(hardware, provider, before, unknown)
    return PlanCost(per_hour=round(sum(per_node.values()), 6), before_per_hour=round(sum(previous.values()), 6),
                    per_node=per_node, by_hardware=_by_type(target, per_node),
                    before_by_hardware=_by_type(before, previous), unknown=sorted(unknown))


def _by_type(nodes: Sequence[NodeSpec], price: Mapping[str, float]) -> dict[str, float]:
    """What each hardware type's nodes cost an hour (`price`: node id -> its price)."""
    out: dict[str, float] = {}
    for node in nodes:
        out[node.hardwaretype] = round(out.get(node.hardwaretype, 0.0) + price[node.id], 6)
    return out


def per_hour(hardware: Mapping[str, HardwareType], provider: str, nodes: Iterable[NodeSpec]) -> float:
    """What nodes cost an hour (a hardware type without a price counts as 0), counted by
    hardware type: a tenant's clusters may hold many nodes, and only their types have prices."""
    total = 0.0
    for name, count in Counter(n.hardwaretype for n in nodes).items():
        found = hardware.get(name)
        total += (found.cost(provider) or 0.0) * count if found is not None else 0.0
    return round(total, 6)


def describe(cost: PlanCost) -> str:
    """One line for people: `0.45/h for 5 nodes (was 0.00/h)`."""
    text = f"{rate(cost.per_hour)}/h for {len(cost.per_node)} nodes (was {rate(cost.before_per_hour)}/h)"
    if cost.unknown:
        text += f"; no cost given for {', '.join(cost.unknown)}"
    return text
