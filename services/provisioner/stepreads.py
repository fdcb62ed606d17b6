"""How a worker learns what the log holds of a segment that came to it again (docs/decisions/0058,
item 5): it asks the planner acting for the job, or reads a log it may read.

`AskPlanner` (contracts/steps.py): a provisioner's rights name no other provisioner's task
events. `LogSteps`: in-process workers on a log they may read (tests, benchmarks); they hear
`stale` where the log shows it, a step ended unrun (its `StepClosed`), not where only the
planner's state does (an attempt queued again since, an earlier job of the cluster)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from nats.aio.client import Client

from contracts import subjects
from contracts.steps import StepAttempt, StepOutcomes, StepOutcomesQuery
from contracts.tasks import TaskStep
from muster.ports.eventlog import EventLog
from muster.stepoutcomes import ended_unrun, step_outcomes

StepReader = Callable[[Sequence[TaskStep]], Awaitable[StepOutcomes]]
"""A segment's steps (from its head on) -> what the log holds of them."""

ASK_TIMEOUT_S = 5.0
"""For the planner's answer; none (its planner down, or the job's shard between planners): the
delivery goes back and the read is asked again at the next."""


class StepsRefused(RuntimeError):
    """The planner would not say (this provisioner not granted the job's queue, as it knows)."""


class AskPlanner:
    def __init__(self, nc: Client, provisioner_id: str, timeout_s: float = ASK_TIMEOUT_S) -> None:
        self.nc, self.provisioner_id, self.timeout_s = nc, provisioner_id, timeout_s

    async def __call__(self, steps: Sequence[TaskStep]) -> StepOutcomes:
        head = steps[0]
        query = StepOutcomesQuery(job_id=head.job_id, steps=[StepAttempt(task_id=s.task_id, attempt=s.attempt) for s in steps])
        reply = await self.nc.request(subjects.step_outcomes(head.tenant, self.provisioner_id), query.model_dump_json().encode(),
                                      timeout=self.timeout_s)
        answer = StepOutcomes.model_validate_json(reply.data)
        if answer.refused:
            raise StepsRefused(answer.refused)
        return answer


class LogSteps:
    def __init__(self, log: EventLog) -> None:
        self.log = log

    async def __call__(self, steps: Sequence[TaskStep]) -> StepOutcomes:
        head, asked = steps[0], [(s.task_id, s.attempt) for s in steps]
        # A segment taken up again claims its next step alone, with no outcome to carry the step
        # fence: a step the planner ended is refused only here (as the planner's answer does).
        stale = await ended_unrun(self.log, head.tenant, head.job_id, asked)
        if stale:
            return StepOutcomes(stale=stale)
        return StepOutcomes(outcomes=await step_outcomes(self.log, head.tenant, head.job_id, asked))
