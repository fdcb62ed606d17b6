"""Which hosts fit which nodes.

A hardware type asks for host properties with a small language, in the catalog's
`providermap.<pool provider>.requires`:

    cpu >= 8, memory >= 16G, labels contains ssd, labels !contains gpu, arch == x86_64

Clauses are joined by commas and must all hold; an empty text fits every host. Names are `cpu`,
`memory` (MiB; values take M, G, T), `labels` (only `contains` / `!contains`) or any extra
property of the host (numbers compare as numbers, words with `==` / `!=`). A host without the
named extra property does not fit.

`fit` finds hosts for a whole request at once: hosts with equal properties are
interchangeable, so it works on counts per property set (a max flow from node groups to
property sets), never on single hosts: a decision costs the same with 10 or 10,000 hosts.
"""

from __future__ import annotations

import operator
import re
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from contracts.pools import HostProperties, parse_memory

Signature = tuple[int, int, frozenset[str], tuple[tuple[str, Any], ...]]
"""Hosts with the same signature are interchangeable for matching."""

_CLAUSE = re.compile(r"^\s*([a-z][a-z0-9_]*)\s*(>=|<=|==|!=|=|>|<|!contains|contains)\s*(\S+)\s*$")
_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    ">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt, "==": operator.eq, "=": operator.eq,
    "!=": operator.ne,
}
OPERATORS = ">=, <=, >, <, ==, !=, contains, !contains"


class RequirementError(ValueError):
    pass


def signature(props: HostProperties) -> Signature:
    return (props.cpu, props.memory, frozenset(props.labels), tuple(sorted(props.extra.items())))


def sig_key(sig: Signature) -> tuple[Any, ...]:
    """A total order on signatures (frozensets and mixed-type extras do not sort by
    themselves), so every decision is the same whatever order hosts were added in."""
    cpu, memory, labels, extra = sig
    return (cpu, memory, tuple(sorted(labels)), tuple((k, type(v).__name__, str(v)) for k, v in extra))


@dataclass(frozen=True)
class Clause:
    name: str
    op: str
    value: Any

    def holds(self, sig: Signature) -> bool:
        cpu, memory, labels, extra = sig
        if self.name == "labels":
            return (self.value in labels) == (self.op == "contains")
        if self.name == "cpu":
            have: Any = cpu
        elif self.name == "memory":
            have = memory
        else:
            found = dict(extra)
            if self.name not in found:
                return False
            have = found[self.name]
            if isinstance(self.value, str) or isinstance(have, str):
                return _COMPARE[self.op](str(have), str(self.value))
        return _COMPARE[self.op](have, self.value)


@dataclass(frozen=True)
class Requirement:
    clauses: tuple[Clause, ...]
    text: str

    def fits(self, sig: Signature) -> bool:
        return all(c.holds(sig) for c in self.clauses)


def _number(text: str) -> float | int:
    value = float(text)
    return int(value) if value.is_integer() else value


def _clause(i: int, raw: str) -> Clause:
    m = _CLAUSE.match(raw)
    if m is None:
        raise RequirementError(
            f"clause {i} {raw.strip()!r} is not '<property> <operator> <value>' (operators: {OPERATORS})"
        )
    name, op, text = m.groups()
    op = "==" if op == "=" else op
    where = f"clause {i} {raw.strip()!r}"
    if name == "labels":
        if op not in ("contains", "!contains"):
            raise RequirementError(f"{where}: labels take only 'contains' or '!contains'")
        return Clause(name, op, text)
    if op in ("contains", "!contains"):
        raise RequirementError(f"{where}: only labels take '{op}'")
    if name == "memory":
        try:
            return Clause(name, op, parse_memory(text))
        except ValueError as err:
            raise RequirementError(f"{where}: {err}") from None
    try:
        return Clause(name, op, _number(text))
    except ValueError:
        if name == "cpu":
            raise RequirementError(f"{where}: cpu is compared with a number") from None
        if op not in ("==", "!="):
            raise RequirementError(f"{where}: a word is compared only with == or !=") from None
        return Clause(name, op, text)


@lru_cache(maxsize=4096)
def parse_requirement(text: str) -> Requirement:
    """Parse once (cached: requests repeat a handful of hardware types)."""
    stripped = text.strip()
    if not stripped:
        return Requirement((), "")
    clauses = tuple(_clause(i, raw) for i, raw in enumerate(stripped.split(","), start=1))
    return Requirement(clauses, ", ".join(f"{c.name} {c.op} {c.value}" for c in clauses))


def describe(sig: Signature) -> str:
    cpu, memory, labels, extra = sig
    parts = [f"cpu {cpu}", f"memory {memory}M"]
    if labels:
        parts.append("labels " + "+".join(sorted(labels)))
    parts += [f"{k} {v}" for k, v in extra]
    return ", ".join(parts)


def fit(needs: Mapping[str, int], free: Mapping[Signature, int]) -> dict[str, dict[Signature, int]] | None:
    """How many hosts of each signature each requirement gets, so that every requirement gets
    all it needs; None if no such assignment exists. `needs`: requirement text -> count.

    A max flow (source -> requirement -> signature -> sink) by shortest augmenting paths;
    requirement and signature counts are small, so this is cheap whatever the host count."""
    reqs = sorted(needs)
    sigs = sorted((s for s, n in free.items() if n > 0), key=sig_key)
    total = sum(needs.values())
    if total == 0:
        return {}
    if total > sum(free[s] for s in sigs):
        return None
    edges = {r: [s for s in sigs if parse_requirement(r).fits(s)] for r in reqs}
    flow: dict[tuple[str, Signature], int] = {}
    left_need = dict(needs)
    left_free = {s: free[s] for s in sigs}
    # Greedy first (most constrained requirement first): usually all of the work.
    for r in sorted(reqs, key=lambda r: (len(edges[r]), r)):
        for s in edges[r]:
            take = min(left_need[r], left_free[s])
            if take:
                flow[(r, s)] = flow.get((r, s), 0) + take
                left_need[r] -= take
                left_free[s] -= take
    while any(left_need.values()):
        path = _augmenting_path(reqs, edges, flow, left_need, left_free)
        if path is None:
            return None
        _push(path, flow, left_need, left_free)
    out: dict[str, dict[Signature, int]] = {r: {} for r in reqs}
    for (r, s), n in flow.items():
        if n:
            out[r][s] = n
    return out


def _augmenting_path(
    reqs: Sequence[str], edges: Mapping[str, list[Signature]], flow: Mapping[tuple[str, Signature], int],
    left_need: Mapping[str, int], left_free: Mapping[Signature, int],
) -> list[tuple[str, Signature]] | None:
    """BFS in the residual graph from a requirement still short to a signature with hosts
    left; the path alternates forward edges (r -> s) and backward ones (s -> r')."""
    start = [r for r in reqs if left_need[r] > 0]
    parent: dict[Any, Any] = {("r", r): None for r in start}
    queue: deque[tuple[str, Any]] = deque(("r", r) for r in start)
    while queue:
        kind, node = queue.popleft()
        if kind == "r":
            for s in edges[node]:
                if ("s", s) not in parent:
                    parent[("s", s)] = ("r", node)
                    if left_free[s] > 0:
                        return _unwind(parent, ("s", s))
                    queue.append(("s", s))
        else:
            for r in reqs:
                if flow.get((r, node), 0) > 0 and ("r", r) not in parent:
                    parent[("r", r)] = ("s", node)
                    queue.append(("r", r))
    return None


def _unwind(parent: Mapping[Any, Any], end: Any) -> list[tuple[str, Signature]]:
    steps = []
    node = end
    while parent[node] is not None:
        steps.append((parent[node], node))
        node = parent[node]
    return [(a[1], b[1]) if a[0] == "r" else (b[1], a[1]) for a, b in reversed(steps)]


def _push(path: list[tuple[str, Signature]], flow: dict[tuple[str, Signature], int],
          left_need: dict[str, int], left_free: dict[Signature, int]) -> None:
    # Forward edges are the odd positions of the r -> s -> r' -> s' chain; one unit moves.
    first_r = path[0][0]
    last_s = path[-1][1]
    for i, (r, s) in enumerate(path):
        flow[(r, s)] = flow.get((r, s), 0) + (1 if i % 2 == 0 else -1)
    left_need[first_r] -= 1
    left_free[last_s] -= 1
