"""Service dependency resolution, as Coopr's `ServiceDependencyResolver` does it.

Two graphs per cluster: install (`install.requires ∪ install.uses`) and runtime
(`runtime.requires ∪ runtime.uses`). In both, a dependency on a name that services `provide` is
replaced by those services, and dependencies on services not on the cluster are dropped.
`direct(...)` answers "which services must do `action` right before this one", skipping services
that lack the action and keeping only the nearest ones (coopr-facts §2.3, §4.5).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from enum import Enum

from contracts.catalog import Action, Service

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
        self._providers: dict[str, list[str]] = {}
        for name in sorted(self.cluster):
            for provided in catalog[name].dependencies.provides:
                if provided != name:  # a service providing its own name is ignored
                    self._providers.setdefault(provided, []).append(name)
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

    def _resolve(self, service: str, name: str) -> set[str]:
        found = {name} if name in self.cluster else set()
        found.update(self._providers.get(name, ()))
        found.discard(service)
        return found

    def _build_graph(self, kind: Kind, reverse: bool) -> dict[str, frozenset[str]]:
        forward: dict[str, set[str]] = {}
        for name in self.cluster:
            stage = getattr(self.catalog[name].dependencies, kind.value)
            forward[name] = set()
            for dep in (*stage.requires, *stage.uses):
                forward[name] |= self._resolve(name, dep)
        if not reverse:
            return {k: frozenset(v) for k, v in forward.items()}
        backward: dict[str, set[str]] = {name: set() for name in self.cluster}
        for name, deps in forward.items():
            for dep in deps:
                backward[dep].add(name)
        return {k: frozenset(v) for k, v in backward.items()}

    def _build_closure(self, kind: Kind, reverse: bool) -> dict[str, frozenset[str]]:
        graph = self.graph(kind, reverse)
        done: dict[str, frozenset[str]] = {}
        for root in sorted(graph):
            self._close(root, graph, done, [], kind)
        return done

    def _close(self, name: str, graph: Graph, done: dict[str, frozenset[str]], path: list[str], kind: Kind) -> frozenset[str]:
        if name in done:
            return done[name]
        if name in path:
            cycle = [*path[path.index(name):], name]
            raise PlanError(f"{kind.value} dependency cycle between services: {' -> '.join(cycle)}")
        path.append(name)
        result: set[str] = set()
        for dep in sorted(graph[name]):
            result.add(dep)
            result |= self._close(dep, graph, done, path, kind)
        path.pop()
        done[name] = frozenset(result)
        return done[name]

    def _build_minimized(self, kind: Kind, reverse: bool) -> dict[str, frozenset[str]]:
        graph, closure = self.graph(kind, reverse), self.closure(kind, reverse)
        return {
            name: frozenset(d for d in deps if not any(d in closure[o] for o in deps if o != d))
            for name, deps in graph.items()
        }
