"""Stage 3: how many nodes of each node layout.

The problem: counts x_0..x_{n-1} >= 0, one per node layout in preference order, and rows,
each `lo <= sum of x_j over its members <= hi` (a service's min/max/ratio, the cluster's size,
an existing group's size). The answer is the lexicographically greatest solution: as many of
the most preferred layout as possible, then as many of the next, and so on.

Coopr walks candidate vectors in that order and tests each one; that takes astronomically
long on big clusters and its skip-ahead cut-offs miss valid vectors. Here the counts are fixed
one at a time, each to the largest value for which the remaining counts can still satisfy every
row. That question is answered exactly by `feasibility.max_first`, a branch-and-prune search
over a model in which the remaining layouts are merged by the rows they belong to: it runs
over a handful of classes, whatever the node count.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from .feasibility import LocalRow, max_first

UNBOUNDED = 1 << 62


@dataclass(frozen=True)
class Row:
    """`lo <= sum(x[j] for j in members) <= hi`; `members` sorted, `hi` may be UNBOUNDED."""

    members: tuple[int, ...]
    lo: int
    hi: int


def solutions(n: int, rows: Sequence[Row]) -> Iterator[tuple[int, ...]]:
    """Every solution, in lexicographically descending order (lazily: take what you need)."""
    if n == 0:
        if all(r.lo <= 0 <= r.hi for r in rows):
            yield ()
        return
    search = _Search(n, rows)
    x = [0] * n
    limit = [UNBOUNDED] * n
    known_extendable = False
    i = 0
    while True:
        if i < n:
            value = search.best(i, limit[i], known_extendable)
            if value is not None:
                search.assign(i, value)
                x[i] = value
                i += 1
                if i < n:
                    limit[i] = UNBOUNDED
                known_extendable = True
                continue
        else:
            yield tuple(x)
        # Back up to the nearest count that can still be lowered.
        i -= 1
        while i >= 0 and x[i] == 0:
            i -= 1
        if i < 0:
            return
        search.assign(i, -x[i])
        limit[i] = x[i] - 1
        x[i] = 0
        known_extendable = False


def lex_max(n: int, rows: Sequence[Row]) -> tuple[int, ...] | None:
    return next(iter(solutions(n, rows)), None)


def feasible(n: int, rows: Sequence[Row]) -> bool:
    if n == 0:
        return all(r.lo <= 0 <= r.hi for r in rows)
    # One question suffices: can the first count take any value at all?
    return _Search(n, rows).best(0, UNBOUNDED, False) is not None


class _Search:
    """Residual rows for a growing prefix of fixed counts, and the question: what is the
    largest value the next count can take?"""

    def __init__(self, n: int, rows: Sequence[Row]) -> None:
        self.n = n
        self.members = [r.members for r in rows]
        self.lo = [r.lo for r in rows]
        self.hi = [r.hi for r in rows]
        self.rows_of: list[list[int]] = [[] for _ in range(n)]
        for k, row in enumerate(rows):
            for j in row.members:
                self.rows_of[j].append(k)
        unbounded = [j for j in range(n) if all(self.hi[k] >= UNBOUNDED for k in self.rows_of[j])]
        if unbounded:
            raise ValueError(f"counts {unbounded} are in no row with an upper bound")

    def assign(self, j: int, delta: int) -> None:
        for k in self.rows_of[j]:
            self.lo[k] -= delta
            self.hi[k] -= delta

    def cap(self, j: int) -> int:
        return max(0, min(self.hi[k] for k in self.rows_of[j]))

    def best(self, i: int, limit: int, known_extendable: bool) -> int | None:
        top = min(self.cap(i), limit)
        if top < 0:
            return None
        if top == 0 and known_extendable:
            return 0  # a completion exists and this count can only be 0 in it
        return self._max_feasible(i, top)

    def _max_feasible(self, i: int, top: int) -> int | None:
        caps = {j: self.cap(j) for j in range(i, self.n)}
        active: list[int] = []
        for k, members in enumerate(self.members):
            rest = members[bisect_left(members, i):]
            if not rest:
                if not self.lo[k] <= 0 <= self.hi[k]:
                    return None  # a row whose counts are all fixed is violated
            elif self.lo[k] > 0 or self.hi[k] < sum(caps[j] for j in rest):
                active.append(k)
        # Counts in the same active rows are interchangeable: merge them into one class.
        classes: dict[tuple[int, ...], int] = {}
        active_set = set(active)
        for j in range(i + 1, self.n):
            signature = tuple(k for k in self.rows_of[j] if k in active_set)
            if signature:
                classes[signature] = classes.get(signature, 0) + caps[j]
        own = tuple(k for k in self.rows_of[i] if k in active_set)
        signatures = [own, *classes]
        upper = [top] + [min(total, *(self.hi[k] for k in sig)) for sig, total in classes.items()]
        local = []
        for k in active:
            local_members = tuple(c for c, sig in enumerate(signatures) if k in sig)
            local.append(LocalRow(local_members, self.lo[k], self.hi[k]))
        return max_first(upper, local)
