"""The planner's service layer, assembled: state (a fold of the log), the execution of the saga,
and the request path, behind one object the composition root (`entrypoint.py`) wires to the bus
and unit tests wire to in-memory fakes (`muster.ports.memory`).

State is only a fold of the log: `resume()` rebuilds every job and cluster from it, and every
handler is idempotent, so a redelivered event or a restarted planner changes nothing twice.
Which handler takes which event is the routing table (`routing.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import structlog

from contracts import subjects
from contracts.commands import COMMAND_ADAPTER, Accepted, DryRun, LeaseExtended, Rejected
from muster.ports.clock import AsyncioClock, Clock
from muster.ports.eventlog import ConcurrencyError, EventLog, Recorded
from muster.ports.taskqueue import TaskQueue
from muster.snapshots import SnapshotSource

from . import leases
from .attempts import AttemptHolders
from .config import Hooks, PlannerConfig
from .domain import planning, saga
from .domain.cluster import Cluster
from .domain.job import Job
from .domain.limits import Limits
from .domain.operations import OPERATIONS
from .domain.saga import Chain, Effects
from .execution import Execution
from .metrics import QueueMetrics
from .nodemaps import MemoryStore, NodeMaps
from .ports import CatalogSource, LogCatalogs, Solver, Workers
from .requests import RequestContext, Requests
from .state import PlannerState
from .timers import Timers

__all__ = ["Planner", "PlannerConfig", "RequestContext"]

log = structlog.get_logger("muster.planner")
REQUEUE_GRACE_S = 2.0
"""From finding the task queue lost to queueing its attempts again (`Planner.queue_lost`):
several of the provisioners' reconnect periods (0.5 s)."""


class Planner:
    def __init__(self, log: EventLog, queue: TaskQueue, *, config: PlannerConfig | None = None,
                 catalogs: CatalogSource | None = None, solver: Solver | None = None,
                 clock: Clock | None = None, hooks: Hooks | None = None, nodemaps: NodeMaps | None = None,
                 snapshots: SnapshotSource | None = None, workers: Workers | None = None) -> None:
        self.log, self.queue, self.workers = log, queue, workers
        self.config = config or PlannerConfig()
        self.state = PlannerState(log, catalogs or LogCatalogs(log), snapshots, self.config.snapshot_every)
        self.limits = Limits(self._provider_limit, self.config.tenant_limits, self.config.tenant_limit)
        # Concurrency limits after the hooks' own policy (a pool's grant): they count what is queued.
        hooks = hooks or Hooks()
        self.hooks = replace(hooks, dispatch=Chain(hooks.dispatch, self.limits))
        self.timers = Timers(clock or AsyncioClock())
        self.metrics = QueueMetrics()
        self.nodemaps = nodemaps or NodeMaps(MemoryStore())
        self.execution = Execution(self.state, queue, self.timers, self.config, self.hooks, self.metrics, self.nodemaps,
                                   self.limits)
        self.attempts = AttemptHolders(log)
        self.timers.on("requeue", self.requeue_lost)
        self.requests = Requests(self.state, self.execution, solver, self.config, self.hooks, workers)
        self.leases = leases.LeaseExpiry(self.state.clusters, self.timers, self.hooks.owns,
                                         lambda ctx: self.requests.handle(ctx, system=True))

    def _provider_limit(self, tenant: str, provider: str) -> int | None:
        catalog = self.state.catalogs.get(tenant)  # loaded before any decision about the tenant's jobs
        found = catalog.providers.get(provider) if catalog is not None else None
        return found.maxconcurrent if found is not None else None

    @property
    def jobs(self) -> dict[str, Job]:
        return self.state.jobs

    @property
    def clusters(self) -> dict[str, Cluster]:
        return self.state.clusters

    # -- start: rebuild from the log ---------------------------------------------------------

    async def resume(self, only: Callable[[str], bool] | None = None) -> None:
        """Rebuild every cluster (those whose id `only` accepts: the shards this planner just
        gained) and each cluster's current job from the log, then carry on with the open ones
        (outcomes they missed taken in, their timers re-armed from the log's times). Other
        (finished) jobs are loaded when a request names them: one job per cluster runs at a
        time, and accept records the cluster's pointer to a job before the job itself, so no
        open job can be missed."""
        clusters = await self.state.load_clusters(only)
        ours = self.hooks.owns if only is None else (lambda tenant, cluster_id: True)
        async with self.state.lock:
            open_jobs: list[tuple[Job, Cluster, dict[tuple[str, int], datetime], int]] = []
            for cluster in clusters:
                # `only` names the shards just gained: their clusters are ours even while the
                # lease is renewed late (owns() false for a moment); skipped then, a current job
                # would never be loaded. A lost shard waits for this lock before it forgets.
                if not ours(cluster.tenant, str(cluster.id)):
                    continue
                leases.arm(self.timers, ours, cluster)  # its expiry, from the logged lease
                job, history = await self.state.load_job(cluster.tenant, cluster.job_id)
                if job is None:
                    continue  # accepted, then lost before the job was recorded: never answered
                self.jobs[cluster.job_id] = job
                self.requests.approvals.arm(job)  # a job waiting for approval: its expiry
                if not job.is_final and history is not None:
                    job = await self._adopt(job)
                    queued = [r for r in history if r.type in ("TaskQueued", "CleanupQueued")]
                    times = {(r.event.task_id, r.event.attempt): r.time for r in queued}
                    open_jobs.append((job, cluster, times, min((r.seq for r in queued), default=1)))
            for job, cluster, _, _ in open_jobs:  # every job's tasks in flight count before any job dispatches more
                await self.state.catalog(job.tenant)
                self.limits.track(job, cluster)
            for job, cluster, times, since in open_jobs:
                await self._resume_job(job, cluster, times, since)
        log.info("resumed", clusters=len(clusters), open=len(open_jobs))

    async def _adopt(self, job: Job) -> Job:
        """Record that this planner owns the open job now (the tracker names it as the job's
        owner), when another one drove it before (a restart: planners are named per process).
        A refused append (another planner wrote first) leaves the log's view in place."""
        previous = job.planner
        if job.adopt(self.config.instance):
            try:
                await self.state.save_job(job)
            except ConcurrencyError:
                await self.state.reload(job.tenant, str(job.id), job.cluster_id)
                log.warning("job adopted by another planner first", job_id=str(job.id))
                return self.jobs[str(job.id)]
            log.info("job adopted", job_id=str(job.id), previous=previous)
        return job

    async def _resume_job(self, job: Job, cluster: Cluster, times: dict[tuple[str, int], datetime], since_seq: int) -> None:
        if job.planned:
            await self.execution.resume_job(job, cluster, times, since_seq, self.attempts)
            return
        layouts = await self.state.log.read(subjects.layout_events(job.tenant, str(job.id))) if OPERATIONS[job.operation].layout else []
        answers = [r for r in layouts if r.type in ("LayoutSolved", "LayoutUnsolvable")]
        if answers:  # answered while nobody acted for the cluster
            await self.execution.take_layout(job, cluster, answers[0].event)
        elif OPERATIONS[job.operation].layout and not layouts:
            catalog = await self.state.catalog(job.tenant)
            command = COMMAND_ADAPTER.validate_python(job.request)
            await self.execution.ask_for_layout(job, planning.layout_request(str(job.id), cluster, catalog, command))

    async def forget(self, only: Callable[[str], bool]) -> None:
        """Stop acting for the clusters `only` accepts (their shards went to another planner):
        drop them, their jobs and their timers. Waits for the handler in progress."""
        async with self.state.lock:
            clusters = {cid for cid in self.clusters if only(cid)}
            jobs = set(self.state.forget(clusters))
            for job_id in jobs:
                self.limits.forget(job_id)
            # Timers of those jobs (timeouts, republishes) and clusters (lease expiries).
            for key in [k for k in self.timers.handles if len(k) > 1 and (k[1] in jobs or any(x in clusters for x in k[1:]))]:
                self.timers.disarm(key)
            for cid in clusters:
                self.nodemaps.forget(cid)
        log.info("clusters handed over", clusters=len(clusters), jobs=len(jobs))

    async def find_job(self, tenant: str, job_id: str) -> Job | None:
        return await self.state.find_job(tenant, job_id)

    # -- requests and queries ----------------------------------------------------------------

    async def handle(self, ctx: RequestContext) -> Accepted | Rejected | DryRun | LeaseExtended:
        return await self.requests.handle(ctx)

    def job_view(self, tenant: str, job_id: str) -> dict[str, Any] | None:
        """The job as its owner sees it; only the planner acting for its cluster answers, and
        it names itself as the owner (the job may have been taken over since it began)."""
        job = self.jobs.get(job_id)
        if job is None or job.tenant != tenant or not self.hooks.owns(tenant, job.cluster_id):
            return None
        return {**job.view(), "owner": self.config.instance}

    # -- events (see routing.py) -------------------------------------------------------------

    async def on_layout_answer(self, recorded: Recorded) -> None:
        await self._settled(recorded)
        await self.execution.on_layout(recorded)

    async def on_task_claimed(self, recorded: Recorded) -> None:
        await self._settled(recorded)
        self.attempts.claimed(recorded)
        self.execution.on_claimed(recorded)

    async def on_task_outcome(self, recorded: Recorded) -> None:
        await self._settled(recorded)
        if not await self.attempts.holds(recorded):
            return  # recorded, but changes nothing: another provisioner's attempt (attempts.py)
        await self.execution.on_outcome(recorded)

    async def _settled(self, recorded: Recorded) -> None:
        """Whether this planner acts for the event's cluster must be known before the event is
        taken in or skipped (a skipped event is acked: it would not come again); `NotYet` until then."""
        job = self.jobs.get(getattr(recorded.event, "job_id", ""))
        if job is not None and not job.is_final:
            await self.hooks.settle(job.tenant, job.cluster_id)

    async def on_poison(self, recorded: Recorded, err: BaseException) -> None:
        """An event about a job that the planner could not take in, however often it tried
        (what it would record is refused by the log, a bug): the job ends with the reason,
        instead of the event jamming the planner forever. A job that has a plan may have
        made machines: it needs an administrator; one without a plan simply failed."""
        job_id = getattr(recorded.event, "job_id", None)
        tenant = recorded.subject.split(".")[2]
        if not job_id:
            return
        async with self.state.lock:
            job = await self.state.find_job(tenant, job_id)
            if job is None or job.is_final or not self.hooks.owns(tenant, job.cluster_id):
                return
            await self.state.reload(tenant, job_id, job.cluster_id)
            job, cluster = self.jobs[job_id], self.clusters[job.cluster_id]
            reason = f"the planner could not take in {recorded.type} (log seq {recorded.seq}): {type(err).__name__}: {err}"[:1000]
            if job.planned:
                job.needs_attention(reason)
                cluster.set_status("needs_attention", job_id, reason)
                await self.execution.execute(job, cluster, Effects())
            else:
                await self.execution.execute(job, cluster, saga.fail_unplanned(job, cluster, reason))
            log.error("job ended: an event could not be taken in", job=job_id, event=recorded.type, error=str(err)[:300])

    async def queue_lost(self) -> None:
        """The task queue came back empty (a restarted server lost it, docs/decisions/0013):
        its attempts are queued again `REQUEUE_GRACE_S` from now (`requeue_lost`). The wait
        lets the provisioners reconnect first, so that each can answer for what it holds."""
        self.timers.arm(("requeue",), self.timers.clock.now() + timedelta(seconds=REQUEUE_GRACE_S))

    async def requeue_lost(self) -> None:
        """Every attempt of this planner's open jobs that the log has queued, that has no
        outcome and that no live provisioner holds goes out again, with its own message id and
        its first deadline: those waiting in the queue, those let go back to it, and those
        whose provisioner died meanwhile. One a provisioner holds runs on, and its outcome comes
        through the log. When the provisioners cannot be asked (presence unreadable), every
        attempt with a claim in the log is left alone instead (the log, not only what this
        planner's consumer has delivered): nothing runs twice, and what that leaves out waits
        for its timeout.

        A shard whose lease is being renewed late (the outage may have outlasted it) is settled
        first, outside the lock as `_settled` is: kept, its jobs are taken here; lost, whoever
        gains it resumes them and publishes the same."""
        for tenant, cluster_id in {(j.tenant, j.cluster_id) for j in list(self.jobs.values()) if not j.is_final}:
            await self.hooks.settle(tenant, cluster_id)
        held = await self.workers.holding() if self.workers is not None else None
        lost = 0
        async with self.state.lock:
            for job in list(self.jobs.values()):
                if job.is_final or not self.hooks.owns(job.tenant, job.cluster_id):
                    continue
                queued = saga.queued_attempts(job)
                if not queued:
                    continue
                job_id = str(job.id)
                if held is not None:
                    keep = [a for a in queued if f"{job_id}.{a.task_id}.{a.attempt}" not in held]
                else:
                    claimed = {(r.event.task_id, r.event.attempt) for r in
                               await self.state.log.read(subjects.job_task_events(job.tenant, job_id)) if r.type == "TaskClaimed"}
                    keep = [a for a in queued
                            if (a.task_id, a.attempt) not in claimed and (job_id, a.task_id, a.attempt) not in self.attempts.claims]
                if keep:
                    lost += len(keep)
                    catalog = await self.state.catalog(job.tenant)
                    await self.execution.publish_many(job, self.clusters[job.cluster_id], catalog, [(a, None) for a in keep])
        log.warning("task queue lost; queued attempts published again", attempts=lost,
                    held_by_provisioners="unknown" if held is None else len(held))

    async def nudge(self, job_id: str) -> None:
        """Look at a job's ready tasks again: for a dispatch policy that held some back and
        now has room (a grant arrived, a limit freed up)."""
        async with self.state.lock:
            job = self.jobs.get(job_id)
            if job is not None and not job.is_final:
                await self.execution.advance(job, self.clusters[job.cluster_id])
