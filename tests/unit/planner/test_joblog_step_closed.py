"""A save that ends segments' followers unrun stores each one's `StepClosed` too (decision 58):
the job's appends are cut into atomic batches that still fit the server's limit with them."""

from __future__ import annotations

from contracts.catalog import Action
from contracts.events import TaskAttemptFailed, TaskQueued
from muster.bus.appends import MAX_ATOMIC
from muster.ports.eventlog import Append
from services.planner.domain.segments import STRANDED, STRANDED_BY_TIMEOUT
from services.planner.joblog import _chunks, closes


def _ended(i: int, error: str = STRANDED) -> Append:
    return Append(TaskAttemptFailed(job_id="j", task_id=f"n{i}.confirm", attempt=1, state="cancelled", error=error),
                  msg_id=f"j:{i}")


def test_only_a_follower_ended_unrun_closes_its_step() -> None:
    assert closes(_ended(1).event) and closes(_ended(1, STRANDED_BY_TIMEOUT).event)
    assert not closes(TaskAttemptFailed(job_id="j", task_id="n1.create", attempt=1, state="cancelled", error="cancelled"))
    assert not closes(TaskQueued(job_id="j", task_id="n1.create", attempt=1, node="n1", action=Action.CREATE))


def test_a_save_of_many_ends_is_cut_so_that_each_batch_fits_with_its_step_closed_and_a_marker() -> None:
    appends = [_ended(i) for i in range(MAX_ATOMIC)]
    chunks = _chunks(appends)
    assert [a for c in chunks for a in c] == appends  # in order, none lost
    assert all(2 * len(c) + 1 <= MAX_ATOMIC for c in chunks) and len(chunks) == 3
    assert _chunks([]) == []
