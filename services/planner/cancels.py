"""A cancel's fence (docs/decisions/0046): once the job's cancel is recorded, its claims are
closed, and the attempts no provisioner claimed before that end at once.

Every forward attempt's task message names the subject of its round's fence
(`TaskMessage.fence`), and a provisioner's claim is appended only while nothing is stored there
(`Append.only_if_empty`, checked by the server). So, once `ClaimsClosed` is stored, the log
holds every claim there will ever be of those attempts, all before it: the ones it holds run
to their end and the rollback undoes them; the others can never run, and end `cancelled`
now, instead of at their timeout. A provisioner that takes one of their messages later, or
holds one whose claim races the fence, has its claim refused and drops the message.

Runs under the planner's lock (a cancel request, a resume, or this module's own retry timer).
A failure to close (the log unavailable) is tried again from a timer: until then the job
waits, at worst for the attempts' timeouts, as it did before fences.

A claimed attempt whose every claim was made by a process that has stopped (`Workers.ended`:
its presence record expired or was deleted, or another process of its id took it over long
enough ago; its lease makes sure it stopped the attempt first) ends too, failed and maybe made,
its rollback undoing it: decided at the close, and again when a provisioner goes
(`Planner.provisioner_gone`; docs/decisions/0054).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Protocol

import structlog

from contracts import subjects
from contracts.events import LOST_PREFIX, ClaimsClosed
from muster.ports.eventlog import Append, ConcurrencyError

from . import traces
from .config import PlannerConfig
from .domain import saga
from .domain.cluster import Cluster
from .domain.job import Job
from .domain.saga import DispatchPolicy, Effects
from .metrics import QueueMetrics
from .ports import Ownership, Workers
from .state import PlannerState
from .timers import Timers


class Execution(Protocol):
    """What closing needs of the planner's `execution.Execution`."""

    state: PlannerState
    config: PlannerConfig
    dispatch: DispatchPolicy
    ownership: Ownership
    timers: Timers
    metrics: QueueMetrics
    workers: Workers | None

    async def execute(self, job: Job, cluster: Cluster, effects: Effects, chain: bool = False) -> None: ...


log = structlog.get_logger("muster.planner")

RETRY_S = 2.0
"""From a close that failed (the log unavailable) to the next try."""


def open_fence(job: Job) -> bool:
    """The job is cancelled after it had a plan and has not ended: its fence is to be closed
    (again: closing is idempotent). Also when nothing is queued now (its rollback began at
    once): a message of the round still in the queue (an attempt that timed out unclaimed) must
    never run either."""
    return job.cancel_requested and job.planned and not job.is_final


async def close_claims(execution: Execution, job: Job, cluster: Cluster) -> None:
    """Close the cancel's fence, then end the attempts nobody claimed before it. Never raises:
    a failure arms a retry (the cancel itself is recorded already)."""
    if not open_fence(job):
        return
    try:
        fence = await _close(execution, job)
        if job.state != "running" or not any(s == "queued" for s in job.task_state.values()):
            return  # (nothing waited on: its rollback runs already)
        claimed = await _claimed(execution, job, fence)
        lost = await _lost(execution, job, claimed)
        catalog = await execution.state.catalog_of(job)
        effects = saga.close_claims(job, cluster, claimed, catalog.services, execution.config.settings, execution.dispatch,
                                    lost=lost)
        await execution.execute(job, cluster, effects)
        for a in effects.disarm:  # (the attempts it ended: no worker is wanted for them any more)
            execution.metrics.dropped(str(job.id), a.task_id, a.attempt)
        ended = len(effects.disarm)
    except Exception as err:  # noqa: BLE001 - decided again on the log's view, later
        log.warning("cancel's claims not closed yet; trying again", job=str(job.id), error=str(err)[:200] or type(err).__name__)
        execution.timers.arm(("claims", str(job.id)), execution.timers.clock.now() + timedelta(seconds=RETRY_S))
        return
    if ended:
        log.info("cancel ended the attempts nobody claimed or whose provisioner is gone", job=str(job.id), attempts=ended,
                 claimed=len(claimed), lost=sorted(f"{t}#{a}" for t, a in lost))


def waits_on_claims(job: Job) -> bool:
    """The job's cancel waits for claimed forward attempts (one of whose provisioners may go)."""
    return open_fence(job) and job.state == "running" and any(
        s == "queued" and job.fence_round(t) is not None for t, s in job.task_state.items())


async def _lost(execution: Execution, job: Job, claimed: dict[tuple[str, int], dict[str, int]]) -> dict[tuple[str, int], str]:
    """The claimed attempts still in flight whose every claim was made by a process that has
    stopped, and why. Asked after the fence is closed: such a process stopped each of these
    before its record went or was taken over (its lease), and none can be claimed again
    (docs/decisions/0054). Unknown (the presence bucket unreadable): none; they wait for their
    outcome or timeout."""
    flying = {a: by for a, by in claimed.items() if job.is_current(*a) and job.fence_round(a[0]) is not None and by}
    if not flying or execution.workers is None:
        return {}
    try:
        ended = await execution.workers.ended(job.tenant, {p for by in flying.values() for p in by})
    except Exception as err:  # noqa: BLE001 - not known now: they wait, as before
        log.warning("whether the claimers stopped is not known", job=str(job.id), error=str(err)[:200] or type(err).__name__)
        return {}
    return {a: f"{LOST_PREFIX} {', '.join(sorted(by))} stopped (its presence ended, or another process took its id over) "
               "without an outcome; its effect is unknown"
            for a, by in flying.items() if all(seq < ended.get(p, 0) for p, seq in by.items())}


async def close_later(execution: Execution, job_id: str) -> None:
    """The retry timer's handler: on the log's view of the job, if this planner still owns it."""
    async with execution.state.lock:
        job = execution.state.jobs.get(job_id)
        if job is None or not execution.ownership.owns(job.tenant, job.cluster_id):
            return  # another planner's now (its resume closes the fence)
        try:
            job, cluster = await execution.state.fresh(job)
        except Exception as err:  # noqa: BLE001 - the log unreadable: later
            log.warning("job not read again; its cancel's fence waits", job=job_id, error=str(err) or type(err).__name__)
            execution.timers.arm(("claims", job_id), execution.timers.clock.now() + timedelta(seconds=RETRY_S))
            return
        await close_claims(execution, job, cluster)


async def _close(execution: Execution, job: Job) -> int:
    """Store the fence's `ClaimsClosed` (once: a repeat finds it); its sequence."""
    round_ = job.cancels - 1
    subject = subjects.claims_closed(job.tenant, str(job.id), round_)
    closed = Append(ClaimsClosed(job_id=str(job.id), round=round_), msg_id=f"{job.id}:claims-closed:{round_}",
                    trace=traces.of(job))
    store = execution.state.log
    try:
        [fence] = await store.append(subject, [closed], expect_last_seq=0)
    except ConcurrencyError:  # closed before (by a planner that stopped before it ended the attempts)
        fence = await store.last_seq(subject)
        if not fence:
            # Refused though nothing is there: a claim on the fence was being replicated (a
            # replicated stream refuses a second expectation on a subject meanwhile). Not closed:
            # read up to nothing, every queued attempt would be ended while claims still land.
            raise RuntimeError(f"{subject}: not closed yet (a claim on it was in flight)") from None
    return fence


async def _claimed(execution: Execution, job: Job, fence: int) -> dict[tuple[str, int], dict[str, int]]:
    """The (task, attempt) claims the log holds before the fence, all there will ever be, with
    the provisioners that made them and the sequence of each one's last claim (a redelivery's
    claim is another's, or the same's, maybe of a process started again). Read
    from the records' headers only (a claim's idempotency key names its attempt): a job far
    along holds some 10^5 claims and outcomes, read under the planner's lock (docs/benchmarks.md
    "A cancel's close"). A claim whose key is of another form has its body read instead."""
    log_ = execution.state.log
    outcomes = subjects.job_task_outcomes(job.tenant, str(job.id))
    claimed: dict[tuple[str, int], dict[str, int]] = {}
    odd: list[int] = []
    for head in await log_.read_heads(outcomes, up_to_seq=fence):
        if head.type == "TaskClaimed":
            key = claim_key(str(job.id), head.subject, head.msg_id)
            writer = subjects.task_event_writer(head.subject)
            if key is None or writer is None:
                odd.append(head.seq)
            else:
                claimed.setdefault(key, {})[writer] = head.seq
    if odd:  # (never from this muster's provisioners: `WorkerCore` keys each claim `<job>.<task>.<attempt>.claim.<delivery>`)
        for r in await log_.read(outcomes, start_seq=odd[0], up_to_seq=fence):
            if r.type == "TaskClaimed":
                by = claimed.setdefault((r.event.task_id, r.event.attempt), {})
                by[str(r.event.provisioner)] = max(by.get(str(r.event.provisioner), 0), r.seq)
    return claimed


def claim_key(job_id: str, subject: str, msg_id: str | None) -> tuple[str, int] | None:
    """(task, attempt) of a claim from its idempotency key, `<job>.<task>.<attempt>.claim.<delivery>`,
    checked against the task its subject names; None if the key is of another form."""
    if not msg_id or not msg_id.startswith(f"{job_id}."):
        return None
    attempt_of, sep, delivery = msg_id[len(job_id) + 1:].rpartition(".claim.")
    task_id, _, attempt = attempt_of.rpartition(".")
    if not sep or not attempt.isdigit() or not delivery.isdigit():
        return None
    parts = subject.split(".")
    if len(parts) < 6 or parts[5].replace("~", ".") != task_id:
        return None
    return task_id, int(attempt)
