"""Service dependency resolution, as Coopr's `ServiceDependencyResolver` does it.

Two graphs per cluster: install (`install.requires ∪ install.uses`) and runtime
(`runtime.requires ∪ runtime.uses`), and their closures, are `muster/catalog/needs.py`'s (a
dependency on a name that services `provide` is those services, one on a service not on the
cluster is dropped): the read model says what a repair does with the same rule.
`direct(...)` answers "which services must do `action` right before this one", skipping services
that lack the action and keeping only the nearest ones (coopr-facts §2.3, §4.5).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from enum import Enum

from contracts.catalog import Action, Service
from muster.catalog import needs

from .errors import PlanError, services_named

Graph = Mapping[str, frozenset[str]]


class Kind(str, Enum):
    INSTALL = "install"
    RUNTIME = "runtime"


class DependencyResolver:
    """Dependencies among the services on one cluster. Pure; results are cached."""

    def __init__(self, catalog: Mapping[str, Service], cluster: Iterable[str]) -> None:
        self.catalog = catalog
        self.cluster = frozenset(cluster)
        unknown = sorted(self.cluster - set(catalog))
        if unknown:
            raise PlanError(f"{services_named(unknown)} not in the catalog")
        self._cache: dict[tuple[str, Kind, bool], dict[str, frozenset[str]]] = {}

    # -- graphs -------------------------------------------------------------------------

    def graph(self, kind: Kind, reverse: bool = False) -> Graph:
        """Each cluster service's dependencies (or, reversed, its dependents)."""
        return self._cached("graph", kind, reverse, self._build_graph)

    def closure(self, kind: Kind, reverse: bool = False) -> Graph:
        """Everything each service depends on (or, reversed, what depends on it), transitively.
        Raises PlanError naming the services of a cycle."""
        return self._cached("closure", kind, reverse, self._build_closure)

    def minimized(self, kind: Kind, reverse: bool = False) -> Graph:
        """Direct dependencies only: one reachable through another dependency is dropped."""
        return self._cached("minimized", kind, reverse, self._build_minimized)

    def direct(self, service: str, kind: Kind, action: Action, reverse: bool = False) -> frozenset[str]:
        """The nearest services (dependencies, or dependents when reversed) that have `action`;
        the search goes through services lacking it (coopr-facts §2.3)."""
        minimized, closure = self.minimized(kind, reverse), self.closure(kind, reverse)
        found: set[str] = set()
        seen: set[str] = set()
        stack = sorted(minimized.get(service, frozenset()), reverse=True)
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            if self.catalog[name].has_action(action):
                found.add(name)
            else:
                stack.extend(sorted(minimized[name], reverse=True))
        return frozenset(x for x in found if not any(x in closure[y] for y in found if y != x))

    # -- building -----------------------------------------------------------------------

    def _cached(self, what: str, kind: Kind, reverse: bool, build: Callable[[Kind, bool], dict[str, frozenset[str]]]) -> Graph:
        key = (what, kind, reverse)
        if key not in self._cache:
            self._cache[key] = build(kind, reverse)
        return self._cache[key]

    def _build_graph(self, kind: Kind, reverse: bool) -> dict[str, frozenset[str]]:
        forward = needs.graph(self.catalog, self.cluster, "install" if kind is Kind.INSTALL else "runtime")
        if not reverse:
            return forward
        backward: dict[str, set[str]] = {name: set() for name in self.cluster}
        for name, deps in forward.items():
            for dep in deps:
                backward[dep].add(name)
        return {k: frozenset(v) for k, v in backward.items()}

    def _build_closure(self, kind: Kind, reverse: bool) -> dict[str, frozenset[str]]:
        try:
            return needs.closure(self.graph(kind, reverse))
        except needs.Cycle as cycle:
            raise PlanError(f"{kind.value} dependency cycle between services: {cycle}") from None

    def _build_minimized(self, kind: Kind, reverse: bool) -> dict[str, frozenset[str]]:
        graph, closure = self.graph(kind, reverse), self.closure(kind, reverse)
        return {
            name: frozenset(d for d in deps if not any(d in closure[o] for o in deps if o != d))
            for name, deps in graph.items()
        }
