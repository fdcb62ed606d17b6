"""Exact feasibility of a small integer model: classes of counts with bounds, and rows that
bound sums of classes. Used by `counts` to ask "how large can this count be?".

Branch and prune: bounds propagation narrows every domain as far as the rows allow (plus the
rows `implied` adds, which catch "these nodes are reserved for that service"); a cheap
`probes` completion is tried at each node; when propagation stalls the narrowest open domain
is split in two. Every split keeps all integer points, so the search
is complete: it says no only when there is no solution. Variable 0 is split first, upper
half first, so the first solution found has the largest possible value of variable 0.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter, sub

from . import relaxation
from .implied import LocalRow, implied, merged
from .probes import needs_first, probe

__all__ = ["Effort", "LocalRow", "OutOfEffort", "max_first"]

# Propagation on wide domains can creep (each pass tightens a bound by one); past this many
# passes splitting a domain is cheaper.
_PASSES = 12
# Most questions are settled within a few nodes. Past this many, a search is on a hard input
# and the linear relaxation (milliseconds per node) pays for itself by cutting whole subtrees.
_RELAX_AFTER = 24
# A minimum short by at most this many nodes is met by branching on which class covers it.
_COVER_SHORT = 8


class OutOfEffort(Exception):
    """An `Effort` ran out before the search had an answer."""


class Effort:
    """A budget of work (class-visits by the search) shared by several questions. Counting
    work, not time, keeps the outcome the same on every machine. The solver's own search has
    none (it must be complete); explanations, which ask many side questions, do."""

    def __init__(self, units: int) -> None:
        self.left = units

    def spend(self, units: int) -> None:
        self.left -= units
        if self.left < 0:
            raise OutOfEffort


def max_first(upper: list[int], rows: list[LocalRow], lower0: int = 0, effort: Effort | None = None) -> list[int] | None:
    """A solution with 0 <= v_c <= upper[c] (and v_0 >= lower0) satisfying every row whose
    variable 0 is as large as possible, or None when there is none."""
    if lower0 > upper[0]:
        return None
    rows = merged(rows)
    if any(row.lo > row.hi for row in rows):
        return None
    base = [(r.members, r.lo, r.hi) for r in rows]
    all_rows = base + implied(rows)
    rows_of: list[list[int]] = [[] for _ in upper]
    for k, (members, _, _) in enumerate(all_rows):
        for c in members:
            rows_of[c].append(k)
    order = needs_first(all_rows)
    stack: list[tuple[list[int], list[int], bool]] = [([lower0] + [0] * (len(upper) - 1), list(upper), True)]
    visited = 0
    while stack:
        if effort is not None:
            effort.spend(len(upper) * _PASSES)
        lb, ub, at_root = stack.pop()
        visited += 1
        # A cheap completion first: when it works, propagation is not needed at all.
        found = probe(lb, ub, all_rows, rows_of, order) if lb[0] == ub[0] else None
        if found is not None:
            return found
        if not _propagate(lb, ub, all_rows):
            continue
        # Implied rows are sums of base rows: they add nothing to a linear relaxation.
        if visited > _RELAX_AFTER and not relaxation.feasible(lb, ub, base):
            continue
        if lb[0] < ub[0]:
            if at_root:
                # The upper bound itself is the usual answer: try it alone first.
                stack.append((lb[:], [ub[0] - 1, *ub[1:]], False))
                stack.append(([ub[0], *lb[1:]], ub[:], False))
            else:
                _split(stack, lb, ub, 0)
            continue
        found = probe(lb, ub, all_rows, rows_of, order)
        if found is not None:
            return found
        if not _cover_branch(stack, lb, ub, all_rows):
            # First fail: split the narrowest open domain. The wide ones are bulk that the
            # probe fills once the few small, tightly bounded counts are settled.
            open_ = [c for c in range(len(ub)) if ub[c] > lb[c]]
            if open_:
                _split(stack, lb, ub, min(open_, key=lambda c: ub[c] - lb[c]))
    return None


def _cover_branch(
    stack: list[tuple[list[int], list[int], bool]], lb: list[int], ub: list[int], rows: list[tuple[tuple[int, ...], int, int]]
) -> bool:
    """Branch on which class first gives one more node to a minimum still short by a few
    nodes: child k raises class k and holds the classes before it at their lower bounds.
    The children split the solutions without overlap, and with few nodes left (a tight
    exact cover) this finds solutions far sooner than splitting domains blindly."""
    best: tuple[int, int, list[int]] | None = None
    for members, lo, _ in rows:
        short = lo - sum(lb[c] for c in members)
        if 0 < short <= _COVER_SHORT:
            open_ = [c for c in members if ub[c] > lb[c]]
            if best is None or (len(open_), short) < best[:2]:
                best = (len(open_), short, open_)
    if best is None or not best[2]:
        return False
    children = []
    held = ub[:]
    for c in best[2]:
        child_lb = lb[:]
        child_lb[c] += 1
        children.append((child_lb, held[:], False))
        held[c] = lb[c]
    stack.extend(reversed(children))  # the first class is tried first
    return True


def _split(stack: list[tuple[list[int], list[int], bool]], lb: list[int], ub: list[int], c: int) -> None:
    mid = (lb[c] + ub[c]) // 2
    low_ub = ub[:]
    low_ub[c] = mid
    high_lb = lb[:]
    high_lb[c] = mid + 1
    stack.append((lb[:], low_ub, False))
    stack.append((high_lb, ub[:], False))  # popped first: upper half first


def _propagate(lb: list[int], ub: list[int], rows: list[tuple[tuple[int, ...], int, int]]) -> bool:
    """Narrow the domains to what each row allows given the others; False when a row cannot
    be met. Sums run in C (itemgetter); members are visited one by one only when some
    domain is wider than the row's slack, i.e. when something can actually be narrowed."""
    getters = [(itemgetter(*members) if len(members) > 1 else _single(members[0]), members, lo, hi) for members, lo, hi in rows]
    for _ in range(_PASSES):
        changed = False
        for get, members, lo, hi in getters:
            lows, ups = get(lb), get(ub)
            smin, smax = sum(lows), sum(ups)
            if smin > hi or smax < lo:
                return False
            if (smin >= lo and smax <= hi) or max(map(sub, ups, lows)) <= min(hi - smin, smax - lo):
                continue
            for c in members:
                low, up = lb[c], ub[c]
                new_up = hi - smin + low
                if new_up < up:
                    smax -= up - new_up
                    ub[c] = up = new_up
                    changed = True
                new_low = lo - smax + up
                if new_low > low:
                    smin += new_low - low
                    lb[c] = new_low
                    changed = True
                if lb[c] > ub[c]:
                    return False
        if not changed:
            return True
    return True


def _single(c: int) -> Callable[[list[int]], tuple[int]]:
    return lambda values: (values[c],)


