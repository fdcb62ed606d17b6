"""Dependency cycles among services (pure): one cycle per strongly connected component of the
dependency graph, preferring a cycle of `requires` edges (never installable) over one that
goes through `uses` (only a warning)."""

from __future__ import annotations

from collections.abc import Mapping

Graph = Mapping[str, list[tuple[str, bool]]]
"""service -> [(dependency, is_required)]"""


def cycles(graph: Graph) -> list[tuple[list[str], bool]]:
    """One cycle per strongly connected component (Tarjan, iterative), with whether every edge
    on the reported cycle is a `requires`."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            edges = graph.get(node, [])
            if i < len(edges):
                work.append((node, i + 1))
                nxt = edges[i][0]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    components.append(comp)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    out = []
    for comp in components:
        members = set(comp)
        # Prefer a cycle of `requires` edges only; else any cycle.
        for required_only in (True, False):
            cycle = _find_cycle(graph, members, required_only)
            if cycle:
                out.append((cycle, required_only))
                break
    return out


def _find_cycle(graph: Graph, members: set[str], required_only: bool) -> list[str] | None:
    for start in sorted(members):
        # Shortest path back to start, by breadth-first search inside the component.
        parents: dict[str, str] = {}
        frontier = [start]
        while frontier:
            nxt: list[str] = []
            for node in frontier:
                for dep, required in graph.get(node, []):
                    if dep not in members or (required_only and not required):
                        continue
                    if dep == start:
                        path = [node]
                        while path[-1] != start:
                            path.append(parents[path[-1]])
                        return list(reversed(path))
                    if dep not in parents:
                        parents[dep] = node
                        nxt.append(dep)
            frontier = nxt
    return None
