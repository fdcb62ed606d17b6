"""The linear relaxation of a count model: can real (not only whole) numbers within the
domains meet every row? If not, no integer solution exists either, and the search may drop
the branch.

Propagation reads one row at a time. This test weighs all rows together, so it sees "these three
minima overlap pairwise but no layout holds all three" that no single or pairwise row shows.

Phase 1 of the bounded-variable simplex method on a dense tableau. Floating point; it answers "infeasible" only when the best it can reach
misses by a clear margin, so rounding can only make it keep a branch, never lose one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

_EPS = 1e-9
_MARGIN = 1e-6
_DEGENERATE_RUN = 50


def feasible(lb: Sequence[int], ub: Sequence[int], rows: Sequence[tuple[tuple[int, ...], int, int]]) -> bool:
    """False only when no real vector with lb <= v <= ub satisfies every row."""
    n, m = len(lb), len(rows)
    # Variables: the counts, then one slack per row (its sum), then one artificial per row.
    low = [float(v) for v in lb]
    high = [float(v) for v in ub]
    for members, lo, hi in rows:
        low.append(max(float(lo), float(sum(lb[c] for c in members))))
        high.append(min(float(hi), float(sum(ub[c] for c in members))))
        if low[-1] > high[-1] + _EPS:
            return False
    low += [0.0] * m
    high += [math.inf] * m
    x = low[: n + m] + [0.0] * m
    table: list[list[float]] = []
    basis = []
    for i, (members, _, _) in enumerate(rows):
        row = [0.0] * (n + 2 * m)
        for c in members:
            row[c] = 1.0
        row[n + i] = -1.0
        gap = sum(x[c] for c in members) - x[n + i]  # the artificial absorbs it: sign so it is >= 0
        sign = -1.0 if gap > 0 else 1.0
        row[n + m + i] = sign
        x[n + m + i] = abs(gap)
        if sign < 0:
            row = [-v for v in row]
        table.append(row)
        basis.append(n + m + i)
    return _phase_one(table, basis, x, low, high, n + m) <= _MARGIN * (1 + max((abs(v) for v in high if v < math.inf), default=0))


def _phase_one(
    table: list[list[float]], basis: list[int], x: list[float], low: list[float], high: list[float], first_artificial: int
) -> float:
    """Minimise the sum of the artificials; return it. Dantzig's rule (largest reduced cost)
    for speed; after a run of degenerate pivots, Bland's rule, which cannot cycle."""
    width = len(x)
    # Reduced costs, kept up to date through the pivots like another row of the tableau.
    reduced = [0.0 if j < first_artificial else 1.0 for j in range(width)]
    for row in table:  # every basic variable starts as an artificial of cost 1
        reduced = [r - v for r, v in zip(reduced, row, strict=True)]
    degenerate = 0
    while True:
        in_basis = set(basis)
        candidates = [
            (abs(reduced[j]), j, 1.0 if reduced[j] < 0 else -1.0)
            for j in range(width)
            if j not in in_basis
            and high[j] - low[j] > _EPS
            and ((reduced[j] < -_EPS and x[j] < high[j] - _EPS) or (reduced[j] > _EPS and x[j] > low[j] + _EPS))
        ]
        if not candidates:
            return sum(x[first_artificial:])
        if degenerate < _DEGENERATE_RUN:
            _, entering, direction = max(candidates, key=lambda c: (c[0], -c[1]))
        else:
            _, entering, direction = min(candidates, key=lambda c: c[1])
        step, leaving = high[entering] - low[entering], -1
        for i, b in enumerate(basis):
            rate = -table[i][entering] * direction
            if rate < -_EPS:
                room = (x[b] - low[b]) / -rate
            elif rate > _EPS and high[b] < math.inf:
                room = (high[b] - x[b]) / rate
            else:
                continue
            if room < step - _EPS or (room <= step + _EPS and leaving >= 0 and b < basis[leaving]):
                step, leaving = max(room, 0.0), i
        degenerate = degenerate + 1 if step <= _EPS else 0
        x[entering] += direction * step
        for i, b in enumerate(basis):
            x[b] -= table[i][entering] * direction * step
        if leaving < 0:
            continue  # the entering variable just moved to its other bound
        old = basis[leaving]
        if old >= first_artificial:
            high[old] = 0.0  # an artificial that left never needs to come back
        pivot_row = table[leaving]
        factor = pivot_row[entering]
        pivot_row[:] = [v / factor for v in pivot_row]
        for row in table:
            if row is not pivot_row and row[entering]:
                k = row[entering]
                row[:] = [a - k * p for a, p in zip(row, pivot_row, strict=True)]
        k = reduced[entering]
        reduced = [r - k * p for r, p in zip(reduced, pivot_row, strict=True)]
        basis[leaving] = entering
