"""Exact feasibility of a small integer model: classes of counts with bounds, and rows that
bound sums of classes. Used by `counts` to ask "how large can this count be?".

Branch and prune: bounds propagation narrows every domain as far as the rows allow (plus
rows implied by pairs of rows, which catch "these nodes are reserved for that service"), and
when it stalls a domain is split in two. Every split keeps all integer points, so the search
is complete: it says no only when there is no solution. Variable 0 is split first, upper
half first, so the first solution found has the largest possible value of variable 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

# Propagation on wide domains can creep (each pass tightens a bound by one); past this many
# passes splitting a domain is cheaper.
_PASSES = 32
# Implied rows cost a little on every pass; past this many they rarely pay for themselves.
_MAX_IMPLIED = 64


@dataclass(frozen=True)
class LocalRow:
    members: tuple[int, ...]
    lo: int
    hi: int


def max_first(upper: list[int], rows: list[LocalRow]) -> int | None:
    """The largest value of variable 0 in a solution with 0 <= v_c <= upper[c] that
    satisfies every row, or None when there is no solution."""
    all_rows = [(r.members, r.lo, r.hi) for r in rows] + _implied(rows)
    stack: list[tuple[list[int], list[int], bool]] = [([0] * len(upper), list(upper), True)]
    while stack:
        lb, ub, at_root = stack.pop()
        if not _propagate(lb, ub, all_rows):
            continue
        if lb[0] < ub[0]:
            if at_root:
                # The upper bound itself is the usual answer: try it alone first.
                stack.append((lb[:], [ub[0] - 1, *ub[1:]], False))
                stack.append(([ub[0], *lb[1:]], ub[:], False))
            else:
                _split(stack, lb, ub, 0)
            continue
        widest = max(range(len(ub)), key=lambda c: ub[c] - lb[c])
        if ub[widest] == lb[widest]:
            return lb[0]
        _split(stack, lb, ub, widest)
    return None


def _split(stack: list[tuple[list[int], list[int], bool]], lb: list[int], ub: list[int], c: int) -> None:
    mid = (lb[c] + ub[c]) // 2
    low_ub = ub[:]
    low_ub[c] = mid
    high_lb = lb[:]
    high_lb[c] = mid + 1
    stack.append((lb[:], low_ub, False))
    stack.append((high_lb, ub[:], False))  # popped first: upper half first


def _propagate(lb: list[int], ub: list[int], rows: list[tuple[tuple[int, ...], int, int]]) -> bool:
    """Narrow the domains to what each row allows given the others; False when a domain
    empties."""
    for _ in range(_PASSES):
        changed = False
        for members, lo, hi in rows:
            smin = smax = 0
            for c in members:
                smin += lb[c]
                smax += ub[c]
            if smin > hi or smax < lo:
                return False
            if smin >= lo and smax <= hi:
                continue  # satisfied whatever the members take
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


def _implied(rows: list[LocalRow]) -> list[tuple[tuple[int, ...], int, int]]:
    """Rows implied by pairs: two disjoint rows bound their union; a row inside another
    bounds the difference (total minus a service's minimum = what the other layouts may
    take at most)."""
    sets = [(frozenset(r.members), r.lo, r.hi) for r in rows]
    unions = [(a | b, la + lb_, ha + hb) for (a, la, ha), (b, lb_, hb) in combinations(sets, 2) if not a & b and la > 0 and lb_ > 0]
    out: list[tuple[tuple[int, ...], int, int]] = []
    for small, s_lo, s_hi in sets + unions:
        for big, b_lo, b_hi in sets:
            if small < big and (s_lo > 0 or s_hi < b_hi):
                out.append((tuple(sorted(big - small)), max(0, b_lo - s_hi), b_hi - s_lo))
                if len(out) >= _MAX_IMPLIED:
                    return out
    return out
