"""In-process workers read a segment that came to them again from the log themselves
(`stepreads.LogSteps`, docs/decisions/0058): on the in-memory log, the outcomes stored up to the
first step without one, and `stale` where the log shows the planner ended a step unrun (its
`StepClosed`), as the planner's answer says it."""

from __future__ import annotations

from contracts import subjects
from contracts.events import StepClosed, TaskSucceeded
from contracts.tasks import TaskStep
from muster.ports.eventlog import Append
from muster.ports.memory import MemoryEventLog
from services.provisioner.plugins.testing import make_task
from services.provisioner.stepreads import LogSteps


def _step(task_id: str, action: str, attempt: int = 1) -> TaskStep:
    return make_task(action, service="s", task_id=task_id, attempt=attempt).model_copy(update={"job_id": "j"})


SEGMENT = [_step("n1.create", "create"), _step("n1.confirm", "confirm"), _step("n1.bootstrap", "bootstrap")]


async def _log(*closed: tuple[str, int]) -> MemoryEventLog:
    """The head's success stored by a provisioner since lost, and a `StepClosed` for each of `closed`."""
    log = MemoryEventLog()
    await log.append(subjects.task_events("t1", "j", "n1.create", "p1"), [Append(
        TaskSucceeded(job_id="j", task_id="n1.create", attempt=1, provisioner="p1", worker="p1/w0", result={"id": "vm-1"}),
        msg_id="j.n1.create.1.outcome")])
    for task_id, attempt in closed:
        await log.append(subjects.step_closed("t1", "j", task_id, attempt),
                         [Append(StepClosed(job_id="j", task_id=task_id, attempt=attempt), msg_id=f"j.{task_id}.{attempt}.closed")])
    return log


async def test_a_segment_with_no_step_ended_hears_its_outcomes_up_to_the_first_step_without_one() -> None:
    answer = await LogSteps(await _log())(SEGMENT)
    assert not answer.stale and not answer.refused
    [created] = answer.outcomes
    assert isinstance(created, TaskSucceeded) and created.task_id == "n1.create" and created.result == {"id": "vm-1"}


async def test_a_segment_one_of_whose_steps_the_planner_ended_unrun_is_stale() -> None:
    """The head succeeded (late, after its timeout), and the planner's timeout ended the
    followers: the worker would otherwise take the segment up after the head and claim the
    confirm alone, with no outcome to carry its step fence, and run it late."""
    answer = await LogSteps(await _log(("n1.confirm", 1), ("n1.bootstrap", 1)))(SEGMENT)
    assert answer.stale == "n1.confirm's attempt 1 was ended unrun" and answer.outcomes == []


async def test_only_the_asked_attempts_closed_steps_count() -> None:
    """A step closed on another attempt (the segment of the retry is asked about) or another
    node's: not this segment's end."""
    retry = [_step("n1.create", "create"), _step("n1.confirm", "confirm", attempt=2)]
    answer = await LogSteps(await _log(("n1.confirm", 1), ("n2.confirm", 1)))(retry)
    assert not answer.stale and [o.task_id for o in answer.outcomes] == ["n1.create"]
