"""Rows a count model implies. Bounds propagation reads one row at a time, so it cannot
compare a service's minimum with another's maximum over the same layouts, nor add up
minima that never share a node; these rows say it explicitly."""

from __future__ import annotations

from dataclasses import dataclass

# Implied rows cost a little on every propagation pass; past this many they rarely pay.
MAX_IMPLIED = 64


@dataclass(frozen=True)
class LocalRow:
    """`lo <= sum of the classes in members <= hi`."""

    members: tuple[int, ...]
    lo: int
    hi: int


def merged(rows: list[LocalRow]) -> list[LocalRow]:
    """One row per member set, with the tightest bounds: services of one must-coexist unit
    have the same members, and only a merged row compares one's minimum with another's
    maximum (propagation looks at one row at a time)."""
    bounds: dict[tuple[int, ...], tuple[int, int]] = {}
    for row in rows:
        lo, hi = bounds.get(row.members, (row.lo, row.hi))
        bounds[row.members] = (max(lo, row.lo), min(hi, row.hi))
    return [LocalRow(members, lo, hi) for members, (lo, hi) in bounds.items()]


def implied(rows: list[LocalRow]) -> list[tuple[tuple[int, ...], int, int]]:
    """Rows implied by the given ones. Minima over disjoint member sets add up: for each row
    with a minimum, a greedy family of pairwise disjoint such rows bounds its union from
    below ("namenode, zookeeper and datanode never share a node: 3 nodes at least"). A row
    inside another bounds the difference (the node total minus a service's minimum is what
    the other layouts may take at most)."""
    sets = [(frozenset(r.members), r.lo, r.hi) for r in rows]
    minima = sorted((s for s in sets if s[1] > 0), key=lambda s: (-s[1], len(s[0]), sorted(s[0])))
    families: dict[frozenset[int], tuple[int, int]] = {}
    for seed in minima:
        union, lo, hi, size = seed[0], seed[1], seed[2], 1
        for other, o_lo, o_hi in minima:
            if not other & union:
                union, lo, hi, size = union | other, lo + o_lo, hi + o_hi, size + 1
        if size > 1 and lo > families.get(union, (0, 0))[0]:
            families[union] = (lo, hi)
    unions = [(members, lo, hi) for members, (lo, hi) in families.items()]
    out = [(tuple(sorted(members)), lo, hi) for members, lo, hi in unions]
    for small, s_lo, s_hi in sets + unions:
        for big, b_lo, b_hi in sets:
            if small < big and (s_lo > 0 or s_hi < b_hi):
                out.append((tuple(sorted(big - small)), max(0, b_lo - s_hi), b_hi - s_lo))
                if len(out) >= MAX_IMPLIED:
                    return out
    return out
