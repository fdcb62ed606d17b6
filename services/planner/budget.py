"""The concurrency limits' budgets, shared with the other planners (docs/planner.md,
"Concurrency limits"; docs/decisions/0029-shared-budget.md).

After every decision that changed what this planner has in flight or holds back, and when
another planner changed a budget this planner waits on, each limit's budget is brought in line
with the counts (`domain/budget.divide`): its shards' entries become their tasks in flight plus
what the room left gives the tasks held back; slots nothing uses are given back. A write is a
compare-and-set on the budget's revision: of two planners that saw the same room, one writes,
the other reads again and finds less. Slots are counted as held only once the write that takes
them is stored, and as given back before the write that returns them, so a write whose answer
is lost never lets this planner use a slot the budget gave to another.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from muster.ports.budgets import BudgetConflict, Budgets, Stored

from .domain.budget import divide, mine
from .domain.limits import Key, Limits

CAS_TRIES = 8
"""Writes of one budget in a row that may find another planner's change first."""


def budget_name(key: Key) -> str:
    """`tenant.<tenant>`, `provider.<tenant>.<provider>`: names carry no dots (`subjects.token`)."""
    return ".".join(key)


def key_of(name: str) -> Key:
    return tuple(name.split("."))


class SharedBudget:
    def __init__(self, limits: Limits, budgets: Budgets, owned: Callable[[int], bool]) -> None:
        self.limits, self.budgets, self.owned = limits, budgets, owned

    def keys(self) -> set[Key]:
        """The limits this planner counts, waits on or holds slots of, and those whose budget
        has an entry of a shard it owns (a shard just gained: what its last owner held)."""
        stale = {key_of(name) for name, stored in self.budgets.known().items() if mine(stored.shares, self.owned)}
        return self.limits.keys() | stale

    def waits_on(self, name: str) -> bool:
        """Tasks of this planner are held back on that budget's limit."""
        return bool(self.limits.demand(key_of(name))[1])

    async def share(self, keys: Iterable[Key] | None = None) -> bool:
        """Bring the budgets of `keys` (default: every one this planner has a part in) in line
        with the counts; True if a shard of this planner holds more slots than before. Raises
        what the budgets' store raised (the counts stay as safe as before)."""
        grew = False
        for key in sorted(self.keys() if keys is None else keys):
            grew |= await self._share(key)
        return grew

    async def _share(self, key: Key) -> bool:
        name = budget_name(key)
        stored = self.budgets.known().get(name) or Stored()
        in_flight, wanted = self.limits.demand(key)
        limit = self.limits.limit(key)
        for _ in range(CAS_TRIES):
            new = divide(stored.shares, self.owned, in_flight, wanted, limit)
            ours = mine(new, self.owned)
            if ours == mine(stored.shares, self.owned):
                return self.limits.granted(key, ours)
            held = self.limits.grants.get(key, {})
            self.limits.granted(key, {s: min(n, ours.get(s, 0)) for s, n in held.items()})  # given back first
            try:
                await self.budgets.write(name, new, stored.revision)
            except BudgetConflict:
                stored = await self.budgets.read(name)
                continue
            return self.limits.granted(key, ours)
        raise BudgetConflict(f"budget {name!r} changed under every one of {CAS_TRIES} writes")
