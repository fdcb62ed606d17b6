"""Stage 3: how many nodes of each node layout.

The problem: counts x_0..x_{n-1} >= 0, one per node layout in preference order, and rows,
each `lo <= sum of x_j over its members <= hi` (a service's min/max/ratio, the cluster's size,
an existing group's size). The answer is the lexicographically greatest solution: as many of
the most preferred layout as possible, then as many of the next, and so on.

Coopr walks candidate vectors in that order and tests each one; that takes astronomically
long on big clusters and its skip-ahead cut-offs miss valid vectors. Here the counts are fixed
one at a time, each to the largest value for which the remaining counts can still satisfy every
row. We keep a witness, a whole solution that agrees with the counts fixed so far: where the
witness already gives a count its largest possible value nothing needs asking. Otherwise the
question "can this count be larger?" is answered exactly by `feasibility.max_first` over a
model in which the remaining layouts are merged by the rows they belong to.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from .feasibility import Effort, LocalRow, max_first
from .probes import complete, cover, needs_first

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
    i = 0
    while True:
        if i < n:
            value = search.best(i, limit[i])
            if value is not None:
                search.fix(i, value)
                x[i] = value
                i += 1
                if i < n:
                    limit[i] = UNBOUNDED
                continue
        else:
            yield tuple(x)
        # Back up to the nearest count that can still be lowered.
        i -= 1
        while i >= 0 and x[i] == 0:
            i -= 1
        if i < 0:
            return
        search.fix(i, -x[i])
        limit[i] = x[i] - 1
        x[i] = 0
        search.witness = None


def lex_max(n: int, rows: Sequence[Row]) -> tuple[int, ...] | None:
    return next(iter(solutions(n, rows)), None)


def feasible(n: int, rows: Sequence[Row], effort: Effort | None = None) -> bool:
    """Whether any solution exists; raises OutOfEffort when `effort` runs out first."""
    if n == 0:
        return all(r.lo <= 0 <= r.hi for r in rows)
    # One question suffices: can the first count take any value at all?
    return _Search(n, rows, effort).best(0, UNBOUNDED) is not None


class _Search:
    """Residual rows for a growing prefix of fixed counts, a witness, and the question: what
    is the largest value the next count can take?"""

    def __init__(self, n: int, rows: Sequence[Row], effort: Effort | None = None) -> None:
        self.n = n
        self.effort = effort
        self.members = [r.members for r in rows]
        self.lo = [r.lo for r in rows]
        self.hi = [r.hi for r in rows]
        self.rows_of: list[list[int]] = [[] for _ in range(n)]
        for k, row in enumerate(rows):
            for j in row.members:
                self.rows_of[j].append(k)
        unbounded = [j for j in range(n) if self.cap(j) >= UNBOUNDED]
        if unbounded:
            raise ValueError(f"counts {unbounded} are in no row with an upper bound")
        self.witness: list[int] | None = self._greedy_witness()

    def fix(self, j: int, delta: int) -> None:
        for k in self.rows_of[j]:
            self.lo[k] -= delta
            self.hi[k] -= delta

    def cap(self, j: int) -> int:
        return max(0, min(map(self.hi.__getitem__, self.rows_of[j])))

    def best(self, i: int, limit: int) -> int | None:
        top = min(self.cap(i), limit)
        if top < 0:
            return None
        witness = self.witness
        if witness is not None and witness[i] == top:
            return top  # the witness already has it as large as it can be
        found = self._max_feasible(i, top, witness[i] + 1 if witness is not None else 0)
        if found is None:
            return witness[i] if witness is not None else None
        return found

    def _greedy_witness(self) -> list[int] | None:
        # Most inputs have an obvious solution, and starting from one saves the widest
        # question. Three tries: fill layouts in preference order (rows in their order, the
        # node total first); else first cover every minimum, each time with the layout that
        # meets the most unmet minima, then fill; else meet the largest minima first.
        rows = list(zip(self.members, self.lo, self.hi, strict=True))
        caps = [self.cap(j) for j in range(self.n)]
        found = complete([0] * self.n, caps, rows, self.rows_of)
        if found is not None:
            return found
        covered = cover(self.rows_of, self.lo, self.hi, caps)
        if covered is not None:
            found = complete(covered, caps, rows, self.rows_of)
        return found or complete([0] * self.n, caps, rows, self.rows_of, needs_first(rows))

    def _max_feasible(self, i: int, top: int, at_least: int) -> int | None:
        """The largest value >= at_least of count i that the rest can complete, with a new
        witness; None when there is none."""
        caps = [0] * i + [self.cap(j) for j in range(i, self.n)]
        active: list[int] = []
        for k, members in enumerate(self.members):
            rest = members[bisect_left(members, i) :]
            if not rest:
                if not self.lo[k] <= 0 <= self.hi[k]:
                    return None  # a row whose counts are all fixed is violated
            elif self.lo[k] > 0 or self.hi[k] < sum(caps[j] for j in rest):
                active.append(k)
        # Counts in the same active rows are interchangeable: merge them into one class.
        active_set = set(active)
        classes: dict[tuple[int, ...], list[int]] = {}
        for j in range(i + 1, self.n):
            if caps[j]:
                signature = tuple(k for k in self.rows_of[j] if k in active_set)
                classes.setdefault(signature, []).append(j)
        own = tuple(k for k in self.rows_of[i] if k in active_set)
        signatures = [own, *classes]
        upper = [top] + [
            min(sum(caps[j] for j in group), *(self.hi[k] for k in sig)) for sig, group in classes.items()
        ]
        local = []
        for k in active:
            members = tuple(c for c, sig in enumerate(signatures) if k in sig)
            if members:
                local.append(LocalRow(members, self.lo[k], self.hi[k]))
            elif self.lo[k] > 0:
                return None  # every count that could meet this minimum is capped at 0
        values = max_first(upper, local, at_least, self.effort)
        if values is None:
            return None
        self.witness = self._spread(i, values, list(classes.values()), caps)
        return values[0]

    def _spread(self, i: int, values: list[int], groups: list[list[int]], caps: list[int]) -> list[int]:
        """Class totals back to counts, earliest layout first: inactive rows hold for any
        counts within their caps, active rows only see the totals."""
        witness = [0] * self.n
        witness[i] = values[0]
        for total, group in zip(values[1:], groups, strict=False):
            for j in group:
                take = min(total, caps[j])
                witness[j] = take
                total -= take
        return witness
