"""Rebuilding from the log, and recovering what was lost: the clusters and open jobs a planner
takes in (at start, or a shard gained), those it hands over, and task messages a restarted
server lost.

Which clusters the planner acts for is decided by its caller (`app.Planner`, where every input's
ownership is asked) and given here as a predicate.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import structlog

from contracts import subjects
from muster.ports.eventlog import ConcurrencyError

from . import leases
from .approvals import Approvals
from .attempts import AttemptHolders
from .config import PlannerConfig
from .domain import planning, saga, segments
from .domain.cluster import Cluster
from .domain.job import Job
from .domain.limits import Limits
from .domain.operations import OPERATIONS
from .execution import Execution
from .nodemaps import NodeMaps
from .state import PlannerState
from .timers import Timers

log = structlog.get_logger("muster.planner")

ADOPT_TRIES = 3
"""Adoptions of one job at a resume, each on the log's view after the last was refused."""


class LeaseLapsed(Exception):
    """The lease on a shard being taken up ran out before its jobs were carried on with."""


def _still(acting: Callable[[str, str], bool] | None, job: Job) -> None:
    if acting is not None and not acting(job.tenant, job.cluster_id):
        raise LeaseLapsed(f"the lease on the shard of cluster {job.cluster_id} ran out while it was being taken up")


class Recovery:
    def __init__(self, state: PlannerState, execution: Execution, timers: Timers, limits: Limits, nodemaps: NodeMaps,
                 attempts: AttemptHolders, approvals: Approvals, config: PlannerConfig) -> None:
        self.state, self.execution, self.timers, self.limits = state, execution, timers, limits
        self.nodemaps, self.attempts, self.approvals, self.config = nodemaps, attempts, approvals, config

    async def resume(self, only: Callable[[str], bool] | None, ours: Callable[[str, str], bool],
                     acting: Callable[[str, str], bool] | None = None) -> None:
        """Rebuild every cluster (those whose id `only` accepts) that is `ours`, and each one's
        current job from the log, then carry on with the open ones (outcomes they missed taken
        in, their timers re-armed from the log's times). Other (finished) jobs are loaded when a
        request names them: one job per cluster runs at a time, and accept records the
        cluster's pointer to a job before the job itself, so no open job can be missed.

        `acting`: whether this planner may act for the cluster now (its shard's lease still
        valid), asked before each open job is adopted and carried on with. A take-up that
        outlasts its lease (renewals failing while the bus is unwell: the nemesis saw resumes of
        7 and 8 s against a 3 s lease) stops with `LeaseLapsed`, and the shards are handed back
        and taken up afresh, rather than acting for a job another planner may hold by now."""
        clusters = await self.state.load_clusters(only)
        async with self.state.lock:
            open_jobs: list[tuple[Job, Cluster, dict[tuple[str, int], datetime], int]] = []
            for cluster in clusters:
                # A lost shard waits for this lock before it forgets.
                if not ours(cluster.tenant, str(cluster.id)):
                    continue
                leases.arm(self.timers, cluster)  # its expiry, from the logged lease
                job, history = await self.state.load_job(cluster.tenant, cluster.job_id)
                if job is None:
                    continue  # accepted, then lost before the job was recorded: never answered
                self.state.jobs[cluster.job_id] = job
                self.approvals.arm(job)  # a job waiting for approval: its expiry
                if not job.is_final and history is not None:
                    _still(acting, job)
                    job = await self._adopt(job)
                    queued = [r for r in history if r.type in ("TaskQueued", "CleanupQueued")]
                    times = {(r.event.task_id, r.event.attempt): r.time for r in queued}
                    open_jobs.append((job, cluster, times, min((r.seq for r in queued), default=1)))
            for job, cluster, _, _ in open_jobs:  # every job's tasks in flight count before any job dispatches more
                await self.state.catalog(job.tenant)
                self.limits.track(job, cluster)
            for job, cluster, times, since in open_jobs:
                _still(acting, job)
                await self._resume_job(job, cluster, times, since)
        log.info("resumed", clusters=len(clusters), open=len(open_jobs))

    async def _adopt(self, job: Job) -> Job:
        """Record that this planner owns the open job now (the tracker names it as the job's
        owner), when another one drove it before (a restart: planners are named per process).
        A refused append (another planner wrote since the job was read: one whose lease on the
        shard ran out while it was still busy with the job) is tried again on the log's view:
        this planner holds the shard now, and a job it drives without its adoption on record
        reads as driven by the other (the fault suite's fencing check found it, session 14)."""
        job_id = str(job.id)
        for _ in range(ADOPT_TRIES):
            previous = job.planner
            if not job.adopt(self.config.instance):
                return job
            try:
                await self.state.save_job(job)
            except ConcurrencyError:
                await self.state.reload(job.tenant, job_id, job.cluster_id)
                job = self.state.jobs[job_id]
                log.warning("another planner wrote to the job as it was adopted; adopting it again", job_id=job_id)
                continue
            log.info("job adopted", job_id=job_id, previous=previous)
            return job
        log.warning("job not adopted: other writers kept getting there first", job_id=job_id, tries=ADOPT_TRIES)
        return job

    async def _resume_job(self, job: Job, cluster: Cluster, times: dict[tuple[str, int], datetime], since_seq: int) -> None:
        if job.planned:
            await self.execution.resume_job(job, cluster, times, since_seq, self.attempts)
            return
        layouts = await self.state.log.read(subjects.layout_events(job.tenant, str(job.id))) if OPERATIONS[job.operation].layout else []
        # This layout round's (a job that failed on a layout asks again: JobLayoutRetried).
        answers = [r for r in layouts if r.type in ("LayoutSolved", "LayoutUnsolvable") and r.event.round == job.layout_round]
        asked = any(r.type == "LayoutRequested" and r.event.round == job.layout_round for r in layouts)
        if answers:  # answered while nobody acted for the cluster
            await self.execution.take_layout(job, cluster, answers[0].event)
        elif OPERATIONS[job.operation].layout and not asked:
            await self.execution.ask_for_layout(job, planning.layout_request_of(job, cluster, await self.state.catalog_of(job)))

    async def forget(self, only: Callable[[str], bool]) -> None:
        """Stop acting for the clusters `only` accepts (their shards went to another planner):
        drop them, their jobs and their timers. Waits for the handler in progress."""
        async with self.state.lock:
            clusters = {cid for cid in self.state.clusters if only(cid)}
            jobs = set(self.state.forget(clusters))
            for job_id in jobs:
                self.limits.forget(job_id)
            # Timers of those jobs (timeouts, republishes) and clusters (lease expiries).
            for key in [k for k in self.timers.handles if len(k) > 1 and (k[1] in jobs or any(x in clusters for x in k[1:]))]:
                self.timers.disarm(key)
            for cid in clusters:
                self.nodemaps.forget(cid)
        log.info("clusters handed over", clusters=len(clusters), jobs=len(jobs))

    async def requeue(self, held: set[str] | None, acts_for: Callable[[Job], bool]) -> None:
        """Every attempt of the open jobs this planner `acts_for` that the log has queued, that
        has no outcome and that no live provisioner holds (`held`) goes out again, with its own
        message id and its first deadline: those waiting in the queue, those let go back to it,
        and those whose provisioner died meanwhile. One a provisioner holds runs on, and its
        outcome comes through the log. When the provisioners cannot be asked (`held` None),
        every attempt with a claim in the log is left alone instead (the log, not only what this
        planner's consumer has delivered): nothing runs twice, and what that leaves out waits
        for its timeout."""
        lost = 0
        async with self.state.lock:
            for job in list(self.state.jobs.values()):
                if job.is_final or not acts_for(job):
                    continue
                try:
                    job, cluster = await self.state.fresh(job)
                except Exception as err:  # noqa: BLE001 - its own redelivered event takes it up once it can be read
                    log.warning("job not read again; its attempts wait", job=str(job.id), error=str(err) or type(err).__name__)
                    continue
                queued = saga.queued_attempts(job)
                if not queued:
                    continue
                job_id = str(job.id)
                if held is not None:
                    keep = [a for a in queued if f"{job_id}.{a.task_id}.{a.attempt}" not in held]
                else:
                    claimed = {(r.event.task_id, r.event.attempt) for r in
                               await self.state.log.read(subjects.job_task_outcomes(job.tenant, job_id)) if r.type == "TaskClaimed"}
                    keep = [a for a in queued
                            if (a.task_id, a.attempt) not in claimed and not self.attempts.holders(job_id, a.task_id, a.attempt)]
                if keep and job.segment_after:
                    # A segment goes again only if none of its steps is held or claimed: one
                    # held runs on with its followers (docs/decisions/0058).
                    kept = {(a.task_id, a.attempt) for a in keep}
                    keep = [a for a in keep if all((t, job.attempts[t]) in kept
                                                   for t in segments.chain(job, segments.root(job, a.task_id)))]
                if keep:
                    lost += len(keep)
                    catalog = await self.state.catalog_of(job)
                    await self.execution.publish_many(job, cluster, catalog, [(a, None) for a in keep], again=True)
        log.warning("task queue lost; queued attempts published again", attempts=lost,
                    held_by_provisioners="unknown" if held is None else len(held))
