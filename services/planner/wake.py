"""Waking the jobs a concurrency limit held back (`domain/limits.py`), once a slot may have
freed: after every recorded decision (`Execution.execute`), when another planner gave slots of
a shared budget back, and when a budget that could not be written is tried again.

With budgets shared by several planners (`budget.py`) the budgets are brought in line with the
counts first, and again after what the woken jobs queued, for as long as that gives this
planner more slots. Only the outermost execution wakes (an advance here executes too).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta

import structlog

from .budget import SharedBudget
from .domain.cluster import Cluster
from .domain.job import Job
from .domain.limits import Key, Limits
from .ports import Ownership
from .state import PlannerState
from .timers import Timers

log = structlog.get_logger("muster.planner")

Advance = Callable[[Job, Cluster], Awaitable[None]]
BUDGET_RETRY_MAX_S = 5.0
"""A budget that could not be written is tried again after 0.25 s, doubling up to this."""
ROUNDS = 3
"""Rounds of (share, wake) after one decision: each round's woken jobs may change the demand."""


class Waker:
    def __init__(self, state: PlannerState, ownership: Ownership, timers: Timers, limits: Limits | None,
                 budget: SharedBudget | None) -> None:
        self.state, self.ownership, self.timers, self.limits, self.budget = state, ownership, timers, limits, budget
        self._waking = False
        self._tries = 0

    async def wake(self, job: Job | None, advance: Advance, keys: set[Key] | None = None) -> None:
        """Advance each job held back on a limit that has room now, once (`job`, just decided,
        only if the budget gave it more slots since); `keys`: the budgets to look at first
        (default all)."""
        if self.limits is None or self._waking:
            return
        self._waking = True
        try:
            for _ in range(ROUNDS):
                grew = await self._share(keys)
                keys = None
                woke = False
                for job_id in self.limits.wake():
                    other = self.state.jobs.get(job_id)
                    if other is None or other.is_final or not self.ownership.owns(other.tenant, other.cluster_id):
                        self.limits.forget(job_id)
                    elif self.state.is_stale(other):
                        continue  # (taken again when its own event is, once read again: `PlannerState.fresh`)
                    elif other is not job or grew:
                        await advance(other, self.state.clusters[other.cluster_id])
                        woke = True
                if self.budget is None or not woke:
                    break
        finally:
            self._waking = False

    async def _share(self, keys: set[Key] | None) -> bool:
        if self.budget is None:
            return False
        try:
            grew = await self.budget.share(keys)
        except Exception as err:  # noqa: BLE001 - the counts stay safe; tried again from a timer
            self._tries += 1
            delay = min(BUDGET_RETRY_MAX_S, 0.25 * 2 ** (self._tries - 1))
            log.warning("concurrency budget not written; will try again", error=str(err) or type(err).__name__, in_s=delay)
            self.timers.arm(("budget",), self.timers.clock.now() + timedelta(seconds=delay))
            return False
        self._tries = 0
        return grew
