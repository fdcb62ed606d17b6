"""Which services of a cluster need which (pure), by the tenant's catalog: the one rule the
planner plans with (`services/planner/domain/dependencies.py` builds its resolver on it) and the
read model says what a repair does with (`muster/readmodel/observed.py` `as_repaired`).

Per stage (install, or runtime: what must run), a service needs the services its `requires` and
`uses` name: a name that services `provide` is those services plus the service of that name, a
service not on the cluster is dropped, a service never needs itself and one providing its own
name is ignored (coopr-facts §2.3).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

from contracts.catalog import Service

Stage = Literal["install", "runtime"]
Graph = Mapping[str, frozenset[str]]


class Cycle(ValueError):
    """Services that need each other, in a cycle: `path` ends with its first service."""

    def __init__(self, path: list[str]) -> None:
        super().__init__(" -> ".join(path))
        self.path = path


def graph(catalog: Mapping[str, Service], cluster: Iterable[str], stage: Stage) -> dict[str, frozenset[str]]:
    """Each service of `cluster` (all in `catalog`) -> the services of the cluster it needs
    directly at `stage`."""
    on = frozenset(cluster)
    providers: dict[str, set[str]] = {}
    for name in on:
        for provided in catalog[name].dependencies.provides:
            if provided != name:
                providers.setdefault(provided, set()).add(name)
    out: dict[str, frozenset[str]] = {}
    for name in on:
        deps = getattr(catalog[name].dependencies, stage)
        found: set[str] = set()
        for dep in (*deps.requires, *deps.uses):
            found |= ({dep} if dep in on else set()) | providers.get(dep, set())
        found.discard(name)
        out[name] = frozenset(found)
    return out


def closure(direct: Graph) -> dict[str, frozenset[str]]:
    """Everything each service needs, transitively. Raises Cycle (the first found, roots in name
    order)."""
    done: dict[str, frozenset[str]] = {}
    for root in sorted(direct):
        _close(root, direct, done, [])
    return done


def runtime_needs(catalog: Mapping[str, Service], on_cluster: Iterable[str]) -> dict[str, frozenset[str]] | None:
    """Each service of the cluster -> every service of the cluster it needs running. None when
    the planner could not plan with it either (a service the catalog no longer has, a cycle)."""
    cluster = frozenset(on_cluster)
    if not cluster <= catalog.keys():
        return None
    try:
        return closure(graph(catalog, cluster, "runtime"))
    except Cycle:
        return None


def _close(name: str, direct: Graph, done: dict[str, frozenset[str]], path: list[str]) -> frozenset[str]:
    if name in done:
        return done[name]
    if name in path:
        raise Cycle([*path[path.index(name):], name])
    path.append(name)
    out: set[str] = set()
    for dep in sorted(direct[name]):
        out |= {dep, *_close(dep, direct, done, path)}
    path.pop()
    done[name] = frozenset(out)
    return done[name]
