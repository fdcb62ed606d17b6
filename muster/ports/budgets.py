"""The budgets port: small values shared by every planner, changed only by compare-and-set
(the concurrency limits' budgets: `services/planner/budget.py`).

A value is `{shard: slots}` with the revision it was read at. The NATS adapter is
`muster.bus.budgets.NatsBudgets` (the KV bucket `budgets`, watched); the fake is
`muster.ports.memory.MemoryBudgets`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class Stored:
    """A budget as read: `{shard: slots}` and the revision it was read at (0: never written)."""

    shares: dict[int, int] = field(default_factory=dict)
    revision: int = 0


class BudgetConflict(Exception):
    """Another writer changed the budget since the revision the write expected."""


class Budgets(Protocol):
    def known(self) -> Mapping[str, Stored]:
        """Every budget as last seen (what the watch delivered, and this process's own writes)."""
        ...

    async def read(self, name: str) -> Stored: ...

    async def write(self, name: str, shares: Mapping[int, int], revision: int) -> int:
        """Store `shares` if the budget is still at `revision` (else `BudgetConflict`); the new revision."""
        ...
