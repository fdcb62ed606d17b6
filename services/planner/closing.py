"""An attempt's timeout closes the attempt before it ends it (docs/decisions/0059).

A provisioner stores a claim only in one batch with a message that expects the attempt's
`StepClosed` subject empty (the step before's outcome, or the claim's `StepOpened` marker), so
once the planner has stored the attempt's `StepClosed`, the log holds every claim of it there
will ever be, all before that. The timeout reads them: none, and the attempt ends timed out, its
message never started by a provisioner that takes it late; one, stored before the deadline but
not yet taken by the planner's consumer, and the deadline counts from it (as it would have, had
the claim been taken in time: `Execution._from_claim`) instead of failing an attempt that runs.
The same read as a cancel's close makes before its fence (docs/decisions/0046), for one task.

The close is stored before the save that ends the attempt, and again never (its subject is read
first): a planner that stops between the two, or whose save fails, finds it at the next try.
It is fenced on the job's own subject, so a planner whose view of the job is stale (another took
the shard) closes nothing.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from contracts import subjects
from contracts.events import StepClosed
from muster.bus.repository import fence_seq
from muster.ports.eventlog import Append, EventLog, Recorded

from .attempts import AttemptHolders
from .domain.job import Job


async def close(log: EventLog, job: Job, task_id: str, attempt: int) -> list[Recorded]:
    """Store the attempt's `StepClosed` (unless it is stored); the claims of the attempt stored
    before it (each by the provisioner its subject names: `AttemptHolders.writer`). Raises
    `ConcurrencyError` when the job moved on in the log since this planner's view of it, and
    whatever the log raises."""
    tenant, job_id = job.tenant, str(job.id)
    subject = subjects.step_closed(tenant, job_id, task_id, attempt)
    closed = await log.last_seq(subject)
    if not closed:
        item = Append(StepClosed(job_id=job_id, task_id=task_id, attempt=attempt), msg_id=f"{job_id}.{task_id}.{attempt}.closed")
        [closed] = await log.append_fenced([(subject, item)], fence_seq(job), subjects.job_events(tenant, job_id))
    return [r for r in await log.read(subjects.task_history_filter(tenant, job_id, task_id), up_to_seq=closed)
            if r.type == "TaskClaimed" and r.event.attempt == attempt and AttemptHolders.writer(r) == r.event.provisioner]


def deadline(claims: list[Recorded], seen: bool, now: datetime, timeout_s: float) -> datetime | None:
    """The attempt's deadline counted from its first claim, when that is still to come; None: it
    ends now. `seen`: a claim of it was taken before (`Execution._from_claim` counted from it
    then, and it is that deadline that came). The claim's time is its writer's clock, taken no
    later than now (a provisioner's clock ahead cannot put the end off), as `_from_claim` does."""
    if seen or not claims:
        return None
    at = min(min(r.time for r in claims), now) + timedelta(seconds=timeout_s)
    return at if at > now else None
