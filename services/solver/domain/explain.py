"""Why no layout exists, in words a person can act on.

An unsolvable count problem is explained by a smallest set of the template's limits that is
unsolvable on its own (a deletion filter: drop each limit in turn, keep it only if the rest
becomes solvable). When that set holds only maxima the message is "these maxima allow at
most M nodes; N requested"; only minima, "these minima need at least M nodes"; otherwise the
limits are listed.
"""

from __future__ import annotations

from collections.abc import Sequence

from .counts import feasible
from .model import CountModel, Limit


def _solvable(model: CountModel, limits: Sequence[Limit]) -> bool:
    return feasible(model.size, model.rows(limits))


def smallest_core(model: CountModel, limits: Sequence[Limit]) -> list[Limit]:
    core = list(limits)
    # Implied limits are tried first, so that what stays is what someone wrote down.
    for limit in sorted(core, key=lambda c: not c.implied):
        trial = [c for c in core if c is not limit]
        if not _solvable(model, trial):
            core = trial
    return core


def _terms(core: Sequence[Limit]) -> str:
    return " + ".join(limit.text for limit in core)


def _most_nodes(model: CountModel, core: Sequence[Limit], requested: int) -> int:
    # With maxima only, fewer nodes never hurt: binary search the largest solvable total.
    low, high = 0, requested - 1
    while low < high:
        mid = (low + high + 1) // 2
        if _solvable(model.with_total(mid), core):
            low = mid
        else:
            high = mid - 1
    return low


def _fewest_nodes(model: CountModel, core: Sequence[Limit], requested: int) -> int:
    # With minima only, more nodes never hurt (nothing caps the new nodes but the total).
    low, high = requested + 1, requested + 1 + sum(limit.lo for limit in core)
    if model.max_total is not None:
        high = min(high, model.max_total)
    while low < high:
        mid = (low + high) // 2
        if _solvable(model.with_total(mid), core):
            high = mid
        else:
            low = mid + 1
    return low


def _pairwise_disjoint(core: Sequence[Limit]) -> bool:
    seen: set[int] = set()
    for limit in core:
        if seen & set(limit.members):
            return False
        seen.update(limit.members)
    return True


def _bounded_by(model: CountModel, side: str, requested: int) -> tuple[list[Limit], int] | None:
    """When the limits of one side alone rule `requested` out and none of them scales with the
    node count (so that "fewer/more nodes" reasoning holds): the limits to name and the
    nearest node count they allow."""
    limits = [limit for limit in model.limits if limit.side == side]
    if _solvable(model, limits):
        return None
    if side == "max":
        core = smallest_core(model, limits)
        if any(limit.scales for limit in core):
            return None
        if not any(limit.scales for limit in limits):
            # Name the maxima that already fail one node above the most that fit.
            most = _most_nodes(model, limits, requested)
            return smallest_core(model.with_total(most + 1), limits), most
        return core, _most_nodes(model, core, requested)
    core = smallest_core(model, limits)
    if any(limit.scales for limit in core):
        return None
    if any(limit.scales for limit in limits):
        fewest = _fewest_nodes(model, core, requested)
        return (core, fewest) if _solvable(model.with_total(fewest), core) else None
    fewest = _fewest_nodes(model, limits, requested)
    if not _solvable(model.with_total(fewest), limits):
        return None  # more nodes do not help either (existing groups cap them)
    return smallest_core(model.with_total(fewest - 1), limits), fewest


def explain(model: CountModel, requested: str) -> str:
    """`requested` names what was asked, e.g. "62 nodes"."""
    kept = model.kept_nodes
    if model.total_row is not None:
        new = model.shape[model.total_row].lo
        found = _bounded_by(model, "max", new)
        if found is not None:
            core, most = found
            core = sorted(core, key=lambda c: (-c.hi, c.text))
            return f"{_terms(core)} allow at most {most + kept} nodes; {new + kept} requested"
        found = _bounded_by(model, "min", new)
        if found is not None:
            core, fewest = found
            core = sorted(core, key=lambda c: (-c.lo, c.text))
            why = " (no node layout holds two of them)" if len(core) > 1 and _pairwise_disjoint(core) else ""
            return f"{_terms(core)} need at least {fewest + kept} nodes{why}; {new + kept} requested"
    core = smallest_core(model, model.limits)
    return f"no layout of {requested} satisfies all of: {'; '.join(limit.text for limit in core)}"
