"""A plan's cost as people read it (pure): per hardware type, how many nodes at what price each
and their total, from a dry run's `cost` (`contracts.approvals.PlanCost` as JSON) and its layout,
and what a change does to each (`type_changes`); and what a tenant's clusters cost now (`spend`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from contracts.catalog import HardwareType
from contracts.layout import Layout


def rate(value: float) -> str:
    """A price per hour as people read it: two decimals, more only where two would misstate it
    (`0.004` is not `0.00`, free; `0.125` is not `0.12`, and 3 × 0.12 is not 0.38)."""
    shown = f"{value:.2f}"
    return shown if abs(float(shown) - value) < 5e-7 else f"{value:.6f}".rstrip("0")


def hardware_rates(cost: Mapping[str, Any], layout: Layout | None) -> list[str]:
    """`small 6 × 0.05/h = 0.30/h`, one per hardware type (a type the layout does not count: its total
    alone); a type without a price (`unknown`: none in the catalog, or one its reader may not read)
    `large 2 × no price`, as `muster cluster cost` says it (`0.00/h` read as free)."""
    counts: Counter[str] = Counter()
    for group in layout.layout if layout is not None else []:
        counts[group.hardwaretype] += group.count
    unknown = set(cost.get("unknown") or ())

    def each(h: str, total: float) -> str:
        if h in unknown:
            return f"{h} {counts[h]} × no price" if counts[h] else f"{h} no price"
        return f"{h} {counts[h]} × {rate(total / counts[h])}/h = {rate(total)}/h" if counts[h] else f"{h} {rate(total)}/h"

    return [each(h, total) for h, total in sorted(cost.get("by_hardware", {}).items())]


def type_changes(cost: Mapping[str, Any]) -> list[str]:
    """What a change does to each hardware type's cost, before -> once done, from a cost with
    `before_by_hardware` (`PlanCost` v2; `priced.masked` masks it): `small 0.10/h → 0.30/h`, a type added or removed whole from or to
    `0.00/h`, one without a price (`unknown`: none in the catalog, or one its reader may not
    read) `large no price`. [] for a cost without figures before per type, or one that moves none."""
    before, after = cost.get("before_by_hardware") or {}, cost.get("by_hardware") or {}
    if not before:
        return []
    unknown = set(cost.get("unknown") or ())
    types = sorted({*before, *after})
    was, now = ({h: rate(figures.get(h, 0.0)) for h in types} for figures in (before, after))
    moved = [h for h in types if h not in unknown and was[h] != now[h]]
    if not moved:
        return []
    return [f"{h} no price" if h in unknown else f"{h} {was[h]}/h → {now[h]}/h" for h in types if h in unknown or h in moved]


def approval_cost(approval: Mapping[str, Any]) -> Mapping[str, Any]:
    """The cost an approval speaks of: at today's prices while it waits, when its planner said
    (`cost_now`), at its approval's once approved (`approved_cost`), else the request's."""
    return approval.get("cost_now") or approval.get("approved_cost") or approval.get("cost") or {}


def unpriced(cost: Mapping[str, Any], layout: Mapping[str, Any] | None) -> str:
    """What a cost without every price adds for people: each hardware type's nodes and price or
    `no price` (one its reader may not read, or none in the catalog: `muster cluster cost`'s
    words), so that a partial total is not read as the whole. '' when every price is in it."""
    unknown = cost.get("unknown") or []
    if not unknown:
        return ""
    rates = hardware_rates(cost, Layout.model_validate(layout) if layout else None)
    gone = [h for h in unknown if h not in (cost.get("by_hardware") or {})]  # priced before the job only
    return " · " + " · ".join(rates + ([f"no price for {', '.join(gone)} (before)"] if gone else []))


def waiting_cost(approval: Mapping[str, Any]) -> str:
    """What a job that waits for approval costs, for its approver: at today's prices when its
    planner said (`cost_now`), with the figure of the request when prices moved since; else the
    request's, said to be that (an approval is judged at today's prices, decision 42). '' when
    no cost was recorded."""
    asked, now = approval.get("cost") or {}, approval.get("cost_now") or {}
    if now:
        then = f"; {rate(asked['per_hour'])}/h at the prices when it was requested" if asked and rate(asked["per_hour"]) != rate(now["per_hour"]) else ""
        return (f"costs {rate(now['per_hour'])}/h once done at today's prices (now {rate(now.get('before_per_hour', 0))}/h{then})"
                + unpriced(now, approval.get("layout")))
    if asked:
        return (f"costs {rate(asked['per_hour'])}/h once done at the prices when it was requested (now "
                f"{rate(asked.get('before_per_hour', 0))}/h; Check first, or `muster job approve --dry-run`, for today's)"
                + unpriced(asked, approval.get("layout")))
    return ""


def spend(clusters: Iterable[tuple[str, str, str, Iterable[str]]], hardware: Mapping[str, HardwareType]) -> dict[str, Any]:
    """What a tenant's clusters cost an hour at today's prices, for `muster cluster cost`: each
    cluster (name, id, provider, its nodes' hardware types) with its nodes, its price per hardware
    type and its total, and their sum. A hardware type without a price for the provider counts
    as 0 and is named in `unknown`, as in a preview: the figure is not claimed complete."""
    rows, total, nodes, unknown = [], 0.0, 0, set()
    for name, cluster_id, provider, types in clusters:
        counts = Counter(types)
        by_hardware, missing = {}, []
        for hardwaretype, count in sorted(counts.items()):
            found = hardware.get(hardwaretype)
            each = found.cost(provider) if found is not None else None
            if each is None:
                missing.append(hardwaretype)
            by_hardware[hardwaretype] = {"nodes": count, "each": each or 0.0, "per_hour": round((each or 0.0) * count, 6)}
        per_hour = round(sum(h["per_hour"] for h in by_hardware.values()), 6)
        rows.append({"name": name, "id": cluster_id, "provider": provider, "nodes": sum(counts.values()),
                     "per_hour": per_hour, "by_hardware": by_hardware, "unknown": missing})
        total, nodes = total + per_hour, nodes + sum(counts.values())
        unknown.update(missing)
    return {"clusters": rows, "nodes": nodes, "per_hour": round(total, 6), "unknown": sorted(unknown)}


def hidden_prices_note(principal: str | None, hidden: Iterable[str]) -> str | None:
    """Which grant shows the prices of `hidden`, the hardware types `spend` counted as 0 because
    the reader may not read them (not those the catalog gives no price): `GET /v1/cost`'s note,
    `muster cluster cost`'s and the console's. Until session 36 it was the catalog's note (`13 of
    the catalog's entities are not shown ...; a cluster is made only from a template its creator
    may read`), which named neither the prices nor their types."""
    types = sorted(set(hidden))
    if not types:
        return None
    who = principal or "the reader"
    grant = f" (a tenant admin can give it: muster grant {principal} read --scope 'catalog:*')" if principal else ""
    return (f"{who} may not read the price of {', '.join(types)}: prices need read on each hardware type "
            f"(catalog:hardwaretypes/<name>) or catalog:*{grant}")
