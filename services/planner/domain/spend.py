"""A tenant's spend as one shard holds it (pure).

Its clusters not deleted and their nodes by provider and hardware type: the unit that planners share so that a policy's tenant totals
(`input.tenant.clusters|nodes|per_hour`) count every planner's clusters, not the admitting
planner's alone (docs/decisions/0044-a-tenant-s-spend-is-shared-by-shard.md).

Counts, not prices: the prices are the catalog's at the moment a policy is evaluated (a price
raised since the nodes were made counts at the new price, as the request's own cost does).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from contracts.catalog import HardwareType

Spend = dict[str, Any]
"""`{"clusters": n, "nodes": {"<provider>": {"<hardwaretype>": count}}}` (JSON, as stored)."""
NONE: Spend = {"clusters": 0, "nodes": {}}


def key(tenant: str, shard: int) -> str:
    """`<tenant>.<shard>`: a tenant name is a subject token (no dots)."""
    return f"{tenant}.{shard}"


def parse_key(name: str) -> tuple[str, int] | None:
    tenant, _, shard = name.rpartition(".")
    return (tenant, int(shard)) if tenant and shard.isdigit() else None


def of_clusters(clusters: Iterable[tuple[str, Iterable[str]]]) -> Spend:
    """The spend of clusters given as (provider, the hardware type of each node)."""
    nodes: dict[str, Counter[str]] = {}
    count = 0
    for provider, hardware in clusters:
        count += 1
        nodes.setdefault(provider, Counter()).update(hardware)
    return {"clusters": count, "nodes": {p: dict(sorted(c.items())) for p, c in sorted(nodes.items()) if c}}


def total(spends: Iterable[Mapping[str, Any]]) -> Spend:
    """Several shards' spends added up; an entry that is not a spend counts as nothing."""
    count = 0
    nodes: dict[str, Counter[str]] = {}
    for s in spends:
        clusters, by_provider = s.get("clusters"), s.get("nodes")
        if not isinstance(clusters, int) or not isinstance(by_provider, dict):
            continue
        count += clusters
        for provider, hardware in by_provider.items():
            if isinstance(hardware, dict):
                nodes.setdefault(str(provider), Counter()).update(
                    {str(h): n for h, n in hardware.items() if isinstance(n, int) and n > 0})
    return {"clusters": count, "nodes": {p: dict(sorted(c.items())) for p, c in sorted(nodes.items()) if c}}


def at_least(counted: Mapping[str, Any], held: Mapping[str, Any]) -> Spend:
    """A cluster's spend while a job on it is admitted and not ended: the larger of what it
    counts and what the job makes of it, each count on its own (decision 44, "Strict"). A
    reservation never lowers a count (a shrink holds nothing), and once the cluster counts its
    new nodes the reservation adds nothing more: too much for a moment, never too little."""
    nodes: dict[str, dict[str, int]] = {}
    for source in (counted, held):
        for provider, hardware in source.get("nodes", {}).items():
            mine = nodes.setdefault(str(provider), {})
            for name, n in hardware.items():
                mine[str(name)] = max(mine.get(str(name), 0), int(n))
    return {"clusters": max(int(counted.get("clusters", 0)), int(held.get("clusters", 0))),
            "nodes": {p: dict(sorted(c.items())) for p, c in sorted(nodes.items()) if c}}


def node_count(spend: Mapping[str, Any]) -> int:
    return sum(n for hardware in spend.get("nodes", {}).values() for n in hardware.values())


def per_hour(spend: Mapping[str, Any], hardware: Mapping[str, HardwareType]) -> float:
    """What the spend's nodes cost an hour at these prices (a type without one counts as 0)."""
    out = 0.0
    for provider, counts in spend.get("nodes", {}).items():
        for name, n in counts.items():
            found = hardware.get(name)
            out += (found.cost(provider) or 0.0) * n if found is not None else 0.0
    return round(out, 6)
