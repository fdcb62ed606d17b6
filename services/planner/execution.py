"""Driving a planned job: dispatch, outcomes, retries, timeouts, rollback.

Everything here is a reaction to an event or a timer, under the planner's lock, and ends by
recording events before anything is published: a task message goes to TASKS only after its
`TaskQueued` is in the log, so a restarted planner re-publishes exactly the attempts the log
says are queued (same message id, de-duplicated by the stream) and never invents a new one.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING

import structlog

from contracts import subjects
from contracts.catalog import Action, Catalog
from contracts.events import TaskAttemptFailed, TaskClaimed, TaskCompleted, TaskFailed, TaskSucceeded
from muster.bus.eventstore import ConcurrencyError, Recorded
from muster.bus.repository import rebuild

from .domain.cluster import Cluster
from .domain.job import Job
from .tasks import needs_nodes, task_message

if TYPE_CHECKING:
    from .app import Planner

log = structlog.get_logger("muster.planner")

# After these operations succeed the cluster loses what the tasks took away.
SHRINKING = {"delete", "shrink", "remove-services", "rollback"}
REPUBLISH_MAX_S = 15.0
PUBLISH_WINDOW = 256


@dataclass
class Timers:
    """One timer per queued attempt: a worker silent past the timeout fails the attempt.
    Rebuilt from the log's `TaskQueued` times on restart; no loop polls for it."""

    handles: dict[tuple[str, str, int], asyncio.TimerHandle] = field(default_factory=dict)
    fired: set[asyncio.Task[None]] = field(default_factory=set)
    republish_tries: dict[tuple[str, str, int], int] = field(default_factory=dict)

    def cancel_all(self) -> None:
        for h in self.handles.values():
            h.cancel()
        self.handles.clear()


async def advance(p: "Planner", job: Job, cluster: Cluster) -> None:
    """Take the job one step: finish, roll back, or dispatch what is ready; then record."""
    if not job.is_final:
        if job.state == "running" and job.stopping and job.in_flight == 0:
            reason = "cancelled by request" if job.cancel_requested else _exhausted_reason(job)
            if not job.planned:  # cancelled before it had a plan: nothing ran, nothing to undo
                job.fail(reason)
                cluster.set_status("failed" if job.operation == "create" else cluster.status, str(job.id), reason)
            else:
                catalog = await p.catalog(job.tenant)
                job.plan_rollback(reason, catalog.services)
        if job.state == "running" and job.all_done:
            _succeeded(job, cluster)
        elif job.state == "rolling_back" and job.exhausted:
            reason = f"rollback failed: {_exhausted_reason(job)} (after: {job.error})"
            job.needs_attention(reason)
            cluster.set_status("needs_attention", str(job.id), reason)
        elif job.state == "rolling_back" and job.all_done:
            _rolled_back(job, cluster)
    queued = [job.queue(t, p.config.provisioner_class) for t in job.ready()]
    await save(p, job, cluster)
    catalog = await p.catalog(job.tenant)
    await publish_many(p, job, cluster, catalog, [(q.task_id, q.attempt, None) for q in queued])
    if job.is_final:
        log.info("job finished", job=str(job.id), operation=job.operation, state=job.state, error=job.error)


def _exhausted_reason(job: Job) -> str:
    task = job.exhausted[0]
    return f"task {task} failed {job.attempts[task] - job.retry_base.get(task, 0)} times"


def _succeeded(job: Job, cluster: Cluster) -> None:
    job.succeed()
    if job.operation in SHRINKING:
        cluster.change_layout(str(job.id), [] if job.operation == "delete" else job.nodes)
    cluster.set_status("deleted" if job.operation == "delete" else "active", str(job.id))


def _rolled_back(job: Job, cluster: Cluster) -> None:
    job.finish_rollback()
    cluster.change_layout(str(job.id), job.previous_nodes)
    cluster.change_config(str(job.id), job.previous_config or cluster.config)
    status = "failed" if job.operation == "create" else "active"
    cluster.set_status(status, str(job.id), f"{job.operation} rolled back: {job.error}")


async def save(p: "Planner", job: Job, cluster: Cluster) -> None:
    try:
        await p.repo.save(cluster, subjects.cluster_events(job.tenant, job.cluster_id))
        await p.repo.save(job, subjects.job_events(job.tenant, str(job.id)))
    except Exception:
        # Our view is no longer the log's: someone else wrote (another planner, a stale
        # copy), or an append failed, or it landed and its ack was lost (a server failover).
        # Take the log's view; the event that brought us here is redelivered.
        await reload(p, job.tenant, str(job.id), job.cluster_id)
        raise


async def reload(p: "Planner", tenant: str, job_id: str, cluster_id: str) -> None:
    job = rebuild(Job, await p.store.read(subjects.job_events(tenant, job_id)))
    cluster = rebuild(Cluster, await p.store.read(subjects.cluster_events(tenant, cluster_id)))
    if job is not None:
        p.jobs[job_id] = job
    if cluster is not None:
        p.clusters[cluster_id] = cluster


async def publish(p: "Planner", job: Job, cluster: Cluster, catalog: Catalog, task_id: str, attempt: int, queued_at: datetime | None = None) -> None:
    avoid = p.ran_attempts.get((str(job.id), task_id), [])
    ref = await p.nodemaps.ref(cluster, catalog) if needs_nodes(job.tasks[task_id]["action"]) else None
    message = task_message(job, cluster, catalog, task_id, attempt, p.config.provisioner_class, p.config.action_timeout_s, avoid, ref)
    p.metrics.queued(job.tenant, p.config.provisioner_class, str(job.id), task_id, attempt, queued_at or datetime.now(timezone.utc))
    arm_timer(p, job, task_id, attempt, queued_at)
    try:
        await p.store.js.publish(
            subjects.task_queue(job.tenant, p.config.provisioner_class),
            message.model_dump_json().encode(),
            headers={"Nats-Msg-Id": f"{job.id}.{task_id}.{attempt}"},
        )
    except Exception as err:
        # The attempt is recorded (TaskQueued); only its message is missing. Publish it again
        # from a timer, backing off, until it gets out or stops being current.
        log.warning("task publish failed; will publish again", job=str(job.id), task=task_id, attempt=attempt, error=repr(err))
        schedule_republish(p, str(job.id), task_id, attempt)


async def publish_many(p: "Planner", job: Job, cluster: Cluster, catalog: Catalog,
                       attempts: list[tuple[str, int, datetime | None]]) -> None:
    """Publish several attempts with up to `PUBLISH_WINDOW` acknowledgements awaited at once
    (one by one, the first wave of a 10,000-node create took 12 s)."""
    window = asyncio.Semaphore(PUBLISH_WINDOW)

    async def one(task_id: str, attempt: int, queued_at: datetime | None) -> None:
        async with window:
            await publish(p, job, cluster, catalog, task_id, attempt, queued_at)

    await asyncio.gather(*(one(*a) for a in attempts))


def schedule_republish(p: "Planner", job_id: str, task_id: str, attempt: int) -> None:
    key = (job_id, task_id, attempt)
    tries = p.timers.republish_tries.get(key, 0) + 1
    p.timers.republish_tries[key] = tries
    delay = min(REPUBLISH_MAX_S, 0.25 * 2 ** (tries - 1))

    def fire() -> None:
        t = asyncio.get_running_loop().create_task(republish(p, *key))
        p.timers.fired.add(t)
        t.add_done_callback(p.timers.fired.discard)

    p.timers.handles[("republish", *key)] = asyncio.get_running_loop().call_later(delay, fire)  # type: ignore[index]


async def republish(p: "Planner", job_id: str, task_id: str, attempt: int) -> None:
    async with p.lock:
        p.timers.handles.pop(("republish", job_id, task_id, attempt), None)  # type: ignore[arg-type]
        job = p.jobs.get(job_id)
        if job is None or not job.is_current(task_id, attempt):
            p.timers.republish_tries.pop((job_id, task_id, attempt), None)
            return
        cluster = p.clusters[job.cluster_id]
        await publish(p, job, cluster, await p.catalog(job.tenant), task_id, attempt)


# -- outcomes ---------------------------------------------------------------------------------


async def on_task_event(p: "Planner", recorded: Recorded) -> None:
    event = recorded.event
    if isinstance(event, TaskClaimed):
        p.metrics.claimed(event.job_id, event.task_id, event.attempt, recorded.time)
        ran = p.ran_attempts.setdefault((event.job_id, event.task_id), [])
        if event.provisioner not in ran:  # a retry prefers another provisioner
            ran.append(event.provisioner)
        return
    if not isinstance(event, (TaskSucceeded, TaskFailed)):
        return
    p.metrics.finished(event.job_id, event.task_id, event.attempt, recorded.time)
    async with p.lock:
        job = p.jobs.get(event.job_id)
        if job is None or job.is_final:
            return
        cluster = p.clusters[job.cluster_id]
        disarm_timer(p, event.job_id, event.task_id, event.attempt)
        if isinstance(event, TaskSucceeded):
            done = TaskCompleted(job_id=event.job_id, task_id=event.task_id, attempt=event.attempt,
                                 result=event.result, ipaddresses=event.ipaddresses, hostname=event.hostname)
            if not job.complete(done):
                await republish_queued(p, job, cluster)
                return
            node = job.tasks[event.task_id]["node"]
            cluster.record_results(node, event.task_id, event.result, event.ipaddresses, event.hostname)
        else:
            failed = TaskAttemptFailed(job_id=event.job_id, task_id=event.task_id, attempt=event.attempt, error=event.error)
            if not job.fail_attempt(failed):
                await republish_queued(p, job, cluster)
                return
            await after_failure(p, job, cluster, event.task_id)
        await advance(p, job, cluster)


async def republish_queued(p: "Planner", job: Job, cluster: Cluster) -> None:
    """An outcome that changes nothing is a redelivery (or a superseded attempt's late
    result). If it is a redelivery, what we did with it the first time may have been recorded
    without its task messages getting out (a publish failed, or an ack was lost in a server
    failover): publish the job's queued attempts again. Their message ids make this harmless."""
    catalog = await p.catalog(job.tenant)
    for task_id, state in list(job.task_state.items()):
        if state == "queued":
            await publish(p, job, cluster, catalog, task_id, job.attempts[task_id])


async def after_failure(p: "Planner", job: Job, cluster: Cluster, task_id: str) -> None:
    """A failed create or confirm may have left a machine: delete it before creating again
    (coopr-facts §5.7). Other failures are simply retried by `advance`."""
    task = job.tasks[task_id]
    if task_id in job.cleanups.values():
        if job.attempts_left(task_id) > 0:  # the cleanup itself failed: delete again
            job.queue(task_id, p.config.provisioner_class)
            await save(p, job, cluster)
            await publish(p, job, cluster, await p.catalog(job.tenant), task_id, job.attempts[task_id])
        return  # out of attempts: the job stops, and its rollback deletes the machine
    if job.attempts_left(task_id) <= 0 or task["action"] not in (Action.CREATE.value, Action.CONFIRM.value):
        return
    if not cluster.results.get(task["node"], {}).get("providerid"):
        return
    cleanup = job.queue_cleanup(task_id)
    await save(p, job, cluster)
    await publish(p, job, cluster, await p.catalog(job.tenant), cleanup.task_id, cleanup.attempt)


# -- timeouts --------------------------------------------------------------------------------


def arm_timer(p: "Planner", job: Job, task_id: str, attempt: int, queued_at: datetime | None = None) -> None:
    key = (str(job.id), task_id, attempt)
    if key in p.timers.handles:
        return
    elapsed = (datetime.now(timezone.utc) - queued_at).total_seconds() if queued_at else 0.0
    delay = max(0.0, p.config.task_timeout_s - elapsed)

    def fire() -> None:
        p.timers.handles.pop(key, None)
        t = asyncio.get_running_loop().create_task(timed_out(p, *key))
        p.timers.fired.add(t)
        t.add_done_callback(p.timers.fired.discard)

    p.timers.handles[key] = asyncio.get_running_loop().call_later(delay, fire)


def disarm_timer(p: "Planner", job_id: str, task_id: str, attempt: int) -> None:
    handle = p.timers.handles.pop((job_id, task_id, attempt), None)
    if handle is not None:
        handle.cancel()


async def timed_out(p: "Planner", job_id: str, task_id: str, attempt: int) -> None:
    async with p.lock:
        job = p.jobs.get(job_id)
        if job is None or job.is_final or not job.is_current(task_id, attempt):
            return
        cluster = p.clusters[job.cluster_id]
        error = f"timed out: no outcome within {p.config.task_timeout_s:g}s"
        job.fail_attempt(TaskAttemptFailed(job_id=job_id, task_id=task_id, attempt=attempt, error=error))
        log.warning("task timed out", job=job_id, task=task_id, attempt=attempt)
        try:
            await after_failure(p, job, cluster, task_id)
            await advance(p, job, cluster)
        except ConcurrencyError:
            log.warning("timeout lost a race with another writer; state reloaded", job=job_id)
