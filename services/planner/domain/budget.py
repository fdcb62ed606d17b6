"""A shared budget of one concurrency limit (pure): how its slots are divided among the shards,
so that every planner together keeps to the limit (docs/decisions/0029-shared-budget.md).

The budget of a limit is one value, `{shard: slots}`, changed only by compare-and-set (the
service's `budget.py`). Each shard's entry is written by the planner that owns the shard: the
slots that shard's tasks hold (in flight) plus those it was granted for tasks waiting to go.
A planner that dies leaves its shards' entries as they were, so its tasks still in flight keep
counting until the shard's next owner writes what it finds in flight; a planner never writes
another's shard.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

Shares = dict[int, int]
"""shard -> slots of the limit that shard's owner holds."""


def divide(stored: Mapping[int, int], owned: Callable[[int], bool], in_flight: Mapping[int, int],
           wanted: Mapping[int, int], limit: int | None) -> Shares:
    """The budget's next value, as the owner of the shards `owned` accepts writes it.

    Its shards' tasks in flight keep their slots whatever the limit (they run already: a
    planner that took them over, or a limit lowered under them); the room left by every other
    shard's entry and by those goes to the tasks waiting (`wanted`), shard by shard in order;
    a shard's slots that nothing uses or waits for are given back. The other shards' entries
    are kept as they are."""
    new = {s: n for s, n in stored.items() if not owned(s) and n > 0}
    room = 0 if limit is None else limit - sum(new.values()) - sum(in_flight.values())
    for shard in sorted(set(in_flight) | set(wanted)):
        if not owned(shard):
            continue  # (the caller's counts are of owned shards; a lost one is not written)
        extra = max(0, min(wanted.get(shard, 0), room))
        room -= extra
        if in_flight.get(shard, 0) + extra:
            new[shard] = in_flight.get(shard, 0) + extra
    return new


def mine(shares: Mapping[int, int], owned: Callable[[int], bool]) -> Shares:
    return {s: n for s, n in shares.items() if owned(s) and n > 0}
