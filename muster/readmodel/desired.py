"""The desired state of each service on each node (pure): running, or stopped by a stop job.

Recorded compactly (`ServicesDesired`): `stopped` lists the services meant to be stopped on every
node that has them (all a v1 event could say), `stopped_on` the services meant to be stopped on
some of their nodes only. Every other (node, service) of the layout is meant to run. The planner's
Cluster aggregate and the read model's fold both keep the two and ask this module.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

Pair = tuple[str, str]
"""(node, service)."""
Layout = Mapping[str, Iterable[str]]
"""node -> its services."""


def stopped_pairs(nodes: Layout, stopped: Iterable[str], stopped_on: Mapping[str, Iterable[str]]) -> set[Pair]:
    """Every (node, service) of the layout meant to be stopped."""
    everywhere = set(stopped)
    some = {s: set(on) for s, on in stopped_on.items()}
    if not everywhere and not some:
        return set()
    return {(n, s) for n, services in nodes.items() for s in services if s in everywhere or n in some.get(s, ())}


def hosts(nodes: Layout) -> dict[str, set[str]]:
    """service -> the nodes that have it."""
    out: dict[str, set[str]] = {}
    for n, services in nodes.items():
        for s in services:
            out.setdefault(s, set()).add(n)
    return out


def by_service(pairs: Iterable[Pair]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for n, s in pairs:
        out.setdefault(s, set()).add(n)
    return out


def compact(nodes: Layout, pairs: Iterable[Pair]) -> tuple[list[str], dict[str, list[str]]]:
    """The (node, service) pairs of the layout meant to be stopped as `(stopped, stopped_on)`: a
    service stopped on every node that has it is cluster-wide; pairs not in the layout drop."""
    wanted = by_service(pairs)
    if not wanted:
        return [], {}
    have = hosts(nodes)
    on = {s: ns & have.get(s, set()) for s, ns in wanted.items()}
    everywhere = sorted(s for s, ns in on.items() if ns and ns == have[s])
    return everywhere, {s: sorted(ns) for s, ns in sorted(on.items()) if ns and s not in everywhere}


def per_node(node: str, services: Iterable[str], stopped: set[Pair]) -> dict[str, str]:
    """One node's desired state: service -> running or stopped."""
    return {s: "stopped" if (node, s) in stopped else "running" for s in sorted(set(services))}
