"""What the log holds of a segment's steps (docs/decisions/0058, item 5): each step's first
outcome of its attempt, in order, up to the first step without one, so that a segment that came
again starts after its last success and no step runs twice.

Read by the planner acting for the job, for the provisioner a segment came to again (contracts/
steps.py): a provisioner's rights name no other provisioner's task events. In-process workers
on a log they may read (tests, benchmarks) read it themselves, and with it `ended_unrun`: the
part of the planner's `stale` the log shows (its `StepClosed` of a step), which the planner says
from its state.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence

from contracts import subjects
from contracts.events import TaskFailed, TaskSucceeded
from muster.ports.eventlog import EventLog


async def step_outcomes(log: EventLog, tenant: str, job_id: str,
                        steps: Iterable[tuple[str, int]]) -> list[TaskSucceeded | TaskFailed]:
    """`steps`: (task id, attempt) in the segment's order. An outcome counts only where its
    subject names the provisioner its body does (as the planner takes outcomes); its output is
    left out (the step's events keep it)."""
    found: list[TaskSucceeded | TaskFailed] = []
    for task_id, attempt in steps:
        records = await log.read(subjects.task_history_filter(tenant, job_id, task_id))
        outcome = next((r.event for r in records if isinstance(r.event, (TaskSucceeded, TaskFailed))
                        and r.event.attempt == attempt and subjects.task_event_writer(r.subject) in (None, r.event.provisioner)),
                       None)
        if outcome is None:
            break
        found.append(outcome.model_copy(update={"stdout": "", "stderr": ""}))
    return found


async def ended_unrun(log: EventLog, tenant: str, job_id: str, steps: Sequence[tuple[str, int]]) -> str:
    """Why the steps are not to run, as far as the log says: one of them was ended unrun by the
    planner, its `StepClosed` stored on its attempt's own subject (docs/decisions/0058); "" when
    none was. Only those subjects are read (one sequence each, no body), all at once."""
    closed = await asyncio.gather(*(log.last_seq(subjects.step_closed(tenant, job_id, task_id, attempt))
                                    for task_id, attempt in steps))
    return next((f"{task_id}'s attempt {attempt} was ended unrun" for (task_id, attempt), seq in zip(steps, closed, strict=True)
                 if seq), "")
