"""What each service of a cluster needs running (pure): its runtime dependencies in the tenant's
catalog, transitively, as the planner's dependency resolver reads them.

A dependency on a name that services `provide` is those services, one on a service not on the
cluster is dropped, a service never needs itself (coopr-facts §2.3).

The drift's repair depends on it (`observed.as_repaired`): a service found failed while
something it needs is down too is only started by a repair, after that. The read model has no
planner, so the rule is written here once more; `tests/unit/readmodel/test_needs.py` checks it
against the planner's `DependencyResolver` on random catalogs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from contracts.catalog import Service


def runtime_needs(catalog: Mapping[str, Service], on_cluster: Iterable[str]) -> dict[str, frozenset[str]] | None:
    """Each service of the cluster -> every service of the cluster it needs running. None when
    the planner could not say either (a service the catalog no longer has, a cycle): a repair
    is refused then, and the drift says each pair's own repair."""
    cluster = frozenset(on_cluster)
    if not cluster <= catalog.keys():
        return None
    providers: dict[str, set[str]] = {}
    for name in cluster:
        for provided in catalog[name].dependencies.provides:
            if provided != name:
                providers.setdefault(provided, set()).add(name)
    direct: dict[str, set[str]] = {}
    for name in cluster:
        stage = catalog[name].dependencies.runtime
        found: set[str] = set()
        for dep in (*stage.requires, *stage.uses):
            found |= ({dep} if dep in cluster else set()) | providers.get(dep, set())
        found.discard(name)
        direct[name] = found
    closed: dict[str, frozenset[str]] = {}
    for root in sorted(direct):
        if _close(root, direct, closed, []) is None:
            return None
    return closed


def _close(name: str, direct: Mapping[str, set[str]], closed: dict[str, frozenset[str]], path: list[str]) -> frozenset[str] | None:
    if name in closed:
        return closed[name]
    if name in path:
        return None  # a cycle
    path.append(name)
    out: set[str] = set()
    for dep in sorted(direct[name]):
        below = _close(dep, direct, closed, path)
        if below is None:
            return None
        out |= {dep, *below}
    path.pop()
    closed[name] = frozenset(out)
    return closed[name]
