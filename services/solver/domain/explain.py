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
from .feasibility import Effort, OutOfEffort
from .model import CountModel, Limit

# Work one explanation may spend on its side questions (about a second at most). A question
# left open keeps the explanation true but less sharp: a limit stays in the list, or "at most
# M nodes" becomes a lower bound from minima that never share a node, or a list.
EFFORT = 400_000


class _Unknown(Exception):
    pass


def _solvable(model: CountModel, limits: Sequence[Limit], effort: Effort) -> bool | None:
    try:
        return feasible(model.size, model.rows(limits), effort)
    except OutOfEffort:
        return None


def _surely_solvable(model: CountModel, limits: Sequence[Limit], effort: Effort) -> bool:
    answer = _solvable(model, limits, effort)
    if answer is None:
        raise _Unknown
    return answer


def smallest_core(model: CountModel, limits: Sequence[Limit], effort: Effort) -> list[Limit]:
    """A subset of `limits` that is unsolvable on its own and, effort permitting, minimal."""
    core = list(limits)
    # Implied limits are tried first, so that what stays is what someone wrote down.
    for limit in sorted(core, key=lambda c: not c.implied):
        trial = [c for c in core if c is not limit]
        if _solvable(model, trial, effort) is False:
            core = trial
    return core


def _terms(core: Sequence[Limit]) -> str:
    return " + ".join(limit.text for limit in core)


def _most_nodes(model: CountModel, core: Sequence[Limit], requested: int, effort: Effort) -> int:
    # With maxima only, fewer nodes never hurt: binary search the largest solvable total.
    low, high = 0, requested - 1
    while low < high:
        mid = (low + high + 1) // 2
        if _surely_solvable(model.with_total(mid), core, effort):
            low = mid
        else:
            high = mid - 1
    return low


def _fewest_nodes(model: CountModel, core: Sequence[Limit], requested: int, effort: Effort) -> int:
    # With minima only, more nodes never hurt (nothing caps the new nodes but the total).
    low, high = requested + 1, requested + 1 + sum(limit.lo for limit in core)
    if model.max_total is not None:
        high = min(high, model.max_total)
    while low < high:
        mid = (low + high) // 2
        if _surely_solvable(model.with_total(mid), core, effort):
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


def _bounded_by(model: CountModel, side: str, requested: int, effort: Effort) -> tuple[list[Limit], int] | None:
    """When the limits of one side alone rule `requested` out and none of them scales with the
    node count (so that "fewer/more nodes" reasoning holds): the limits to name and the
    nearest node count they allow."""
    limits = [limit for limit in model.limits if limit.side == side]
    solvable = _solvable(model, limits, effort)
    if solvable is None:
        raise _Unknown
    if solvable:
        return None
    return _nearest(model, side, limits, requested, effort)


def _disjoint_minima(model: CountModel, requested: int) -> tuple[list[Limit], int] | None:
    """Minima that no layout holds two of add up; no search needed. The largest such family
    found greedily, if it already needs more than `requested` nodes."""
    minima = sorted((m for m in model.limits if m.side == "min" and m.lo > 0), key=lambda m: (-m.lo, m.text))
    best: tuple[list[Limit], int] | None = None
    for seed in minima:
        family, used = [seed], set(seed.members)
        for other in minima:
            if other is not seed and not used & set(other.members):
                family.append(other)
                used |= set(other.members)
        need = sum(m.lo for m in family)
        if need > requested and (best is None or need > best[1]):
            best = (family, need)
    return best


def _nearest(
    model: CountModel, side: str, limits: list[Limit], requested: int, effort: Effort
) -> tuple[list[Limit], int] | None:
    core = smallest_core(model, limits, effort)
    if any(limit.scales for limit in core):
        return None
    if side == "max":
        if any(limit.scales for limit in limits):
            return core, _most_nodes(model, core, requested, effort)
        # Name the maxima that already fail one node above the most that fit.
        most = _most_nodes(model, limits, requested, effort)
        return smallest_core(model.with_total(most + 1), limits, effort), most
    if any(limit.scales for limit in limits):
        fewest = _fewest_nodes(model, core, requested, effort)
        return (core, fewest) if _surely_solvable(model.with_total(fewest), core, effort) else None
    fewest = _fewest_nodes(model, limits, requested, effort)
    if not _surely_solvable(model.with_total(fewest), limits, effort):
        return None  # more nodes do not help either (existing groups cap them)
    return smallest_core(model.with_total(fewest - 1), limits, effort), fewest


def explain(model: CountModel, requested: str) -> str:
    """`requested` names what was asked, e.g. "62 nodes"."""
    effort = Effort(EFFORT)
    kept = model.kept_nodes
    if model.total_row is not None:
        new = model.shape[model.total_row].lo
        try:
            found = _bounded_by(model, "max", new, effort)
        except _Unknown:
            found = None
        if found is not None:
            core, most = found
            core = sorted(core, key=lambda c: (-c.hi, c.text))
            return f"{_terms(core)} allow at most {most + kept} nodes; {new + kept} requested"
        try:
            found = _bounded_by(model, "min", new, effort)
        except _Unknown:
            found = _disjoint_minima(model, new)
        if found is not None:
            core, fewest = found
            core = sorted(core, key=lambda c: (-c.lo, c.text))
            why = " (no node layout holds two of them)" if len(core) > 1 and _pairwise_disjoint(core) else ""
            return f"{_terms(core)} need at least {fewest + kept} nodes{why}; {new + kept} requested"
    core = smallest_core(model, model.limits, effort)
    return f"no layout of {requested} satisfies all of: {'; '.join(limit.text for limit in core)}"
