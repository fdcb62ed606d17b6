"""Cheap ways to finish a partial solution of a count model. They either return a solution
that satisfies every row or give up; giving up proves nothing, so the exact search continues
(only faster when a probe succeeds)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

RowSpec = tuple[tuple[int, ...], int, int]


def complete(
    lb: list[int],
    ub: list[int],
    rows: Sequence[RowSpec],
    rows_of: list[list[int]],
    order: Iterable[int] | None = None,
) -> list[int] | None:
    """Try to finish cheaply: start from the lower bounds and, row by row (in `order`), raise
    counts, earliest class first, until the row's minimum is met without passing any maximum.
    Succeeds on most feasible nodes long before splitting would fix every domain."""
    x = lb[:]
    sums = [sum(map(x.__getitem__, members)) for members, _, _ in rows]
    slack = [hi - total for (_, _, hi), total in zip(rows, sums, strict=True)]
    for k in range(len(rows)) if order is None else order:
        members, lo, _ = rows[k]
        for c in members:
            if sums[k] >= lo:
                break
            room = min(ub[c] - x[c], lo - sums[k], min(map(slack.__getitem__, rows_of[c])))
            if room > 0:
                x[c] += room
                for r in rows_of[c]:
                    sums[r] += room
                    slack[r] -= room
        if sums[k] < lo:
            return None
    return x if all(sums[k] >= lo for k, (_, lo, _) in enumerate(rows)) else None


def needs_first(rows: Sequence[RowSpec]) -> list[int]:
    """Rows with a minimum first (largest first), rows fixing a total (lo == hi) last: meet
    what must be met before filling up."""
    return sorted(range(len(rows)), key=lambda k: (rows[k][1] == rows[k][2], -rows[k][1]))


def probe(lb: list[int], ub: list[int], rows: Sequence[RowSpec], rows_of: list[list[int]], order: list[int]) -> list[int] | None:
    """Rows in their order, then minima first."""
    return complete(lb, ub, rows, rows_of) or complete(lb, ub, rows, rows_of, order)


def cover(rows_of: list[list[int]], lo: list[int], hi: list[int], caps: list[int]) -> list[int] | None:
    """Meet every minimum greedily, each time with the count in the most unmet minima that
    still has room; None when it gets stuck."""
    wanted = [k for k, low in enumerate(lo) if low > 0]
    bit = {k: 1 << b for b, k in enumerate(wanted)}
    masks = [sum(bit.get(k, 0) for k in ks) for ks in rows_of]
    need = dict(zip(wanted, (lo[k] for k in wanted), strict=True))
    slack = list(hi)
    x = [0] * len(caps)
    unmet = sum(bit.values())
    while unmet:
        scores = [(mask & unmet).bit_count() if cap else 0 for mask, cap in zip(masks, caps, strict=True)]
        for j in sorted(range(len(caps)), key=lambda j: -scores[j]):
            if not scores[j]:
                return None
            room = min(caps[j] - x[j], *(slack[k] for k in rows_of[j]))
            if room > 0:
                break
        else:
            return None
        step = min(room, *(need[k] for k in rows_of[j] if k in need and bit[k] & unmet))
        x[j] += step
        for k in rows_of[j]:
            slack[k] -= step
            if k in need and bit[k] & unmet:
                need[k] -= step
                if need[k] <= 0:
                    unmet &= ~bit[k]
    return x
