"""The planner's service layer, assembled: state (a fold of the log), the execution of the saga,
and the request path, behind one object the composition root (`bootstrap.py`) builds, on NATS
adapters (`entrypoint.py`) or on in-memory fakes (`muster.ports.memory`, unit tests).

State is only a fold of the log: `resume()` rebuilds every job and cluster from it, and every
handler is idempotent, so a redelivered event or a restarted planner changes nothing twice.
Which handler takes which event is the routing table (`routing.py`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import structlog

from contracts.commands import Rejected
from contracts.events import Event, LayoutSolved, LayoutUnsolvable, TaskFailed, TaskSucceeded
from muster import tracing
from muster.ports.eventlog import ConcurrencyError, Recorded
from muster.ports.taskqueue import TaskQueue

from . import cancels, leases, traces
from .attempts import AttemptHolders
from .budget import key_of
from .config import PlannerConfig
from .domain import saga
from .domain.cluster import Cluster
from .domain.job import Job
from .domain.limits import Limits
from .domain.saga import Effects
from .execution import Execution
from .messages import OperationAnswer, RequestContext
from .metrics import QueueMetrics
from .nodemaps import NodeMaps
from .pools import job_id_of
from .ports import Ownership, Pools, Workers
from .recovery import Recovery
from .requests import Requests
from .spend import SharedSpend
from .state import PlannerState
from .timers import Timers

if TYPE_CHECKING:
    from services.pool.domain.pool import Pool

__all__ = ["Planner", "PlannerConfig"]

log = structlog.get_logger("muster.planner")
POOL_REACTION_TRIES = 3
REQUEUE_GRACE_S = 2.0
"""From finding the task queue lost to queueing its attempts again (`Planner.queue_lost`):
several of the provisioners' reconnect periods (0.5 s)."""


class Planner:
    """The planner's inputs (requests, log events, pool decisions, timers: `routing.py`) and its
    start and hand-over, over parts the composition root (`bootstrap.py`) builds."""

    def __init__(self, *, config: PlannerConfig, state: PlannerState, queue: TaskQueue, ownership: Ownership,
                 limits: Limits, timers: Timers, metrics: QueueMetrics, nodemaps: NodeMaps, execution: Execution,
                 attempts: AttemptHolders, requests: Requests, lease_expiry: leases.LeaseExpiry, recovery: Recovery,
                 pools: Pools | None = None, workers: Workers | None = None, spend: SharedSpend | None = None) -> None:
        self.config, self.state, self.log, self.queue, self.workers = config, state, state.log, queue, workers
        self.ownership, self.limits, self.timers, self.metrics, self.nodemaps = ownership, limits, timers, metrics, nodemaps
        self.execution, self.attempts, self.requests, self.leases, self.pools = execution, attempts, requests, lease_expiry, pools
        self.recovery = recovery
        self.spend = spend

    @property
    def jobs(self) -> dict[str, Job]:
        return self.state.jobs

    @property
    def clusters(self) -> dict[str, Cluster]:
        return self.state.clusters

    # -- start: rebuild from the log ---------------------------------------------------------

    async def resume(self, only: Callable[[str], bool] | None = None) -> None:
        """Rebuild the clusters this planner acts for (those whose id `only` accepts: the shards
        it just gained, every one of their clusters loaded) and carry on with their open jobs
        while their leases hold (`recovery.Recovery.resume`: a take-up that outlasts them
        stops, and the shards are handed back)."""
        if only is None:
            await self.recovery.resume(None, self.ownership.owns)
        else:
            await self.recovery.resume(only, lambda tenant, cluster_id: True, acting=self.ownership.owns)
        if self.spend is not None:
            self.spend.resync()

    async def forget(self, only: Callable[[str], bool]) -> None:
        """Stop acting for the clusters `only` accepts (their shards went to another planner)."""
        await self.recovery.forget(only)
        if self.spend is not None:
            self.spend.forget(only)

    async def find_job(self, tenant: str, job_id: str) -> Job | None:
        return await self.state.find_job(tenant, job_id)

    # -- requests and queries ----------------------------------------------------------------

    async def handle(self, ctx: RequestContext) -> OperationAnswer:
        if not tracing.enabled():
            return await self.requests.handle(ctx)
        # In the requester's trace, if it sent one; the job's span is this one's child.
        with traces.tracer.span(f"request {ctx.verb}", kind="server", tenant=ctx.tenant, verb=ctx.verb) as span:
            reply = await self.requests.handle(ctx)
            traces.answered(span, reply)
            return reply

    async def answer(self, ctx: RequestContext) -> OperationAnswer:
        """`handle`, for a requester on the bus: a bug inside is answered too."""
        try:
            return await self.handle(ctx)
        except Exception:  # a bug must not leave a requester without an answer
            log.exception("request failed", tenant=ctx.tenant, verb=ctx.verb)
            return Rejected(reason="internal error while handling the request; see the planner's log")

    def job_view(self, tenant: str, job_id: str) -> dict[str, Any] | None:
        """The job as its owner sees it; only the planner acting for its cluster answers, and
        it names itself as the owner (the job may have been taken over since it began)."""
        job = self.jobs.get(job_id)
        if job is None or job.tenant != tenant or not self._acts_for(job):
            return None
        return {**job.view(), "owner": self.config.instance}

    def acting_for(self, tenant: str, job_id: str) -> Job | None:
        """The job, when it is loaded here, of `tenant`, and this planner acts for its cluster."""
        job = self.jobs.get(job_id)
        return job if job is not None and job.tenant == tenant and self._acts_for(job) else None

    async def job_answer(self, tenant: str, job_id: str) -> dict[str, Any] | None:
        """`job_view`, and for a job that waits for approval its cost at the catalog's prices
        now (`approval.cost_now`): the cost recorded at the request is what it cost then, and an
        approval is judged at today's prices (decision 42)."""
        view = self.job_view(tenant, job_id)
        job = self.jobs.get(job_id)
        if view is None or job is None or not job.awaiting_approval or not view.get("approval"):
            return view
        try:
            cost = await self.requests.governance.cost_now(job)
        except Exception as err:  # noqa: BLE001 - the log away: the view says the cost at the request, labelled so
            log.warning("a waiting job's cost now not known", job=job_id, error=str(err) or type(err).__name__)
            return view
        if cost is not None:
            view["approval"] = {**view["approval"], "cost_now": cost.model_dump(mode="json", exclude={"per_node"})}
        return view

    # -- ownership, asked here: once for each input, before its handler runs ---------------------

    def _acts_for(self, job: Job) -> bool:
        return self.ownership.owns(job.tenant, job.cluster_id)

    @asynccontextmanager
    async def _owned(self, job_id: str) -> AsyncIterator[tuple[Job, Cluster] | None]:
        """Under the planner's lock: the job and its cluster, when the job is loaded and this
        planner acts for its cluster; None for any other (another planner's: skipped)."""
        async with self.state.lock:
            job = self.jobs.get(job_id)
            yield await self.state.fresh(job) if job is not None and self._acts_for(job) else None

    # -- events (see routing.py) -------------------------------------------------------------

    async def on_layout_answer(self, recorded: Recorded) -> None:
        await self._settled(recorded)
        event: LayoutSolved | LayoutUnsolvable = recorded.event
        async with self._owned(event.job_id) as found:
            # Only the current round's answer: a late one to an earlier round changes nothing.
            if found is not None and not found[0].planned and not found[0].is_final and event.round == found[0].layout_round:
                await self.execution.take_layout(*found, event)

    async def on_task_claimed(self, recorded: Recorded) -> None:
        await self._settled(recorded)
        first = self.attempts.claimed(recorded)
        self.execution.on_claimed(recorded, first=first)

    async def on_task_outcome(self, recorded: Recorded) -> None:
        await self._settled(recorded)
        if not await self.attempts.holds(recorded):
            return  # recorded, but changes nothing: another provisioner's attempt (attempts.py)
        event: TaskSucceeded | TaskFailed = recorded.event
        self.metrics.finished(event.job_id, event.task_id, event.attempt, recorded.time)
        async with self._owned(event.job_id) as found:
            if found is not None and not found[0].is_final:
                await self.execution.take_outcome(*found, event, recorded)

    async def on_task_events(self, batch: Sequence[Recorded]) -> None:
        """Claims and outcomes delivered together (the consumer's batch, routing.py): what
        taking each alone does, with each job's outcomes taken in one step and one save
        (traced, each outcome is a span of its own under the provisioner's run: one at a time)."""
        if tracing.enabled():
            for recorded in batch:
                await (self.on_task_claimed if recorded.type == "TaskClaimed" else self.on_task_outcome)(recorded)
            return
        by_job: dict[str, list[TaskSucceeded | TaskFailed]] = {}
        for recorded in batch:
            if recorded.type == "TaskClaimed":
                await self.on_task_claimed(recorded)
                continue
            await self._settled(recorded)
            if await self.attempts.holds(recorded):
                event: TaskSucceeded | TaskFailed = recorded.event
                self.metrics.finished(event.job_id, event.task_id, event.attempt, recorded.time)
                by_job.setdefault(event.job_id, []).append(event)
        for job_id, events in by_job.items():
            async with self._owned(job_id) as found:
                if found is not None and not found[0].is_final:
                    await self.execution.take_outcomes(*found, events)

    async def _settled(self, recorded: Recorded) -> None:
        """Whether this planner acts for the event's cluster must be known before the event is
        taken in or skipped (a skipped event is acked: it would not come again); `NotYet` until then."""
        job = self.jobs.get(getattr(recorded.event, "job_id", ""))
        if job is not None and not job.is_final:
            await self.ownership.settle(job.tenant, job.cluster_id)

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
            if job is None or job.is_final or not self._acts_for(job):
                return
            await self.state.reload(tenant, job_id, job.cluster_id)
            job, cluster = self.jobs[job_id], self.clusters[job.cluster_id]
            reason = f"the planner could not take in {recorded.type} (log seq {recorded.seq}): {type(err).__name__}: {err}"[:1000]
            if job.planned:
                saga.record_moves(job, cluster)  # as any end does: a retry of its rollback records only what follows
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
        """The attempts of this planner's open jobs that the queue lost go out again
        (`recovery.Recovery.requeue`). A shard whose lease is being renewed late (the outage
        may have outlasted it) is settled first, outside the lock as `_settled` is: kept, its
        jobs are taken here; lost, whoever gains it resumes them and publishes the same."""
        for tenant, cluster_id in {(j.tenant, j.cluster_id) for j in list(self.jobs.values()) if not j.is_final}:
            await self.ownership.settle(tenant, cluster_id)
        held = await self.workers.holding() if self.workers is not None else None
        await self.recovery.requeue(held, self._acts_for)

    # -- pools (see routing.py) ------------------------------------------------------------------

    async def on_pool_event(self, name: str, pool: Pool, recorded: Recorded) -> None:
        """A pool's event, as its live fold delivers it: each decision it holds (a grant, a
        refusal, an expiry, a cancel) taken into the job that asked, when this planner acts
        for its cluster. Idempotent: the fold replays every pool's history at start, which is
        also how a planner killed between a grant and its use picks the grant up."""
        if self.pools is not None:
            for decision in self.pools.decisions(name, recorded):
                await self._take_pool_decision(name, pool, decision)

    async def catch_up_pools(self, only: Callable[[str], bool]) -> None:
        """The waiting jobs of the clusters `only` accepts (shards just gained) take the pool's
        last word on their request, which may have come while nobody acted for them (the grant
        went by in the replay before their shard was gained). Taking it twice changes nothing."""
        for job in list(self.jobs.values()) if self.pools is not None else []:
            if job.resources is not None and job.waiting_for_resources and only(job.cluster_id):
                found = self.pools.last_word(job.resources["request_id"]) if self.pools is not None else None
                if found is not None:
                    await self._take_pool_decision(*found)

    async def _take_pool_decision(self, name: str, pool: Pool, decision: Event) -> None:
        """A try that lost a race reloaded the job; the next one records what the first did
        not (its creates may be queued and not yet published: they go out again)."""
        assert self.pools is not None
        rid = decision.request_id  # type: ignore[attr-defined]
        for attempt in range(POOL_REACTION_TRIES):
            try:
                async with self._owned(job_id_of(rid)) as found:
                    reaction = await self.pools.react(name, pool, decision, *found) if found is not None else None
                    if found is not None and reaction is not None and reaction.advance:
                        await self.execution.advance(*found, chain=True, then=reaction.then, republish=attempt > 0)
                    elif found is not None and reaction is not None:
                        await self.execution.execute(*found, Effects())
                return
            except ConcurrencyError:
                log.info("pool reaction lost a race; the job was reloaded", request=rid, attempt=attempt + 1)

    # -- budgets (see routing.py) ----------------------------------------------------------------

    async def on_budget_change(self, name: str) -> None:
        """Another planner changed a limit's budget (gave slots back, say): the jobs of this one
        that wait on that limit may get slots now."""
        budget = self.execution.budget
        if budget is not None and budget.waits_on(name):
            async with self.state.lock:
                await self.execution.rebalance({key_of(name)})

    # -- timers (see routing.py) -----------------------------------------------------------------

    async def task_timed_out(self, job_id: str, task_id: str, attempt: int) -> None:
        await self.execution.timed_out(job_id, task_id, attempt)

    async def republish(self, job_id: str, task_id: str, attempt: int) -> None:
        await self.execution.republish(job_id, task_id, attempt)

    async def send_unsent(self, job_id: str) -> None:
        await self.execution.send_unsent(job_id)

    async def close_claims(self, job_id: str) -> None:
        await cancels.close_later(self.execution, job_id)

    # -- provisioners (the presence bucket's watch, entrypoint.py) ------------------------------

    async def provisioner_gone(self, provisioner_id: str) -> None:
        """A provisioner's presence record expired or was deleted: each cancelled job of this
        planner's that waits for claimed attempts is closed again, and those whose claimers
        are all gone end as lost, so its rollback starts now rather than at their timeouts
        (docs/decisions/0054). Without a cancel nothing is done: the work queue gives the
        message to another provisioner after its ack wait, and that one runs the attempt."""
        async with self.state.lock:
            waiting = [j for j in self.jobs.values() if cancels.waits_on_claims(j) and self._acts_for(j)]
            for job in waiting:
                try:
                    job, cluster = await self.state.fresh(job)
                except Exception as err:  # noqa: BLE001 - closed again from the retry timer
                    log.warning("job not read again; its cancel's claims are closed later", job=str(job.id),
                                provisioner=provisioner_id, error=str(err) or type(err).__name__)
                    self.timers.arm(("claims", str(job.id)), self.timers.clock.now() + timedelta(seconds=cancels.RETRY_S))
                    continue
                await cancels.close_claims(self.execution, job, cluster)

    async def approval_expired(self, job_id: str) -> None:
        async with self._owned(job_id) as found:
            if found is not None:
                await self.requests.approvals.expire(*found)

    async def lease_expired(self, tenant: str, cluster_id: str) -> None:
        if self.ownership.owns(tenant, cluster_id):
            await self.leases.expired(tenant, cluster_id)

    async def budget_retry(self) -> None:
        """A budget that could not be written (the bus was away) is tried again."""
        async with self.state.lock:
            await self.execution.rebalance()

    async def nudge(self, job_id: str) -> None:
        """Look at a job's ready tasks again: for a dispatch policy that held some back and
        now has room (a grant arrived, a limit freed up)."""
        async with self.state.lock:
            job = self.jobs.get(job_id)
            if job is not None and not job.is_final:
                await self.execution.advance(job, self.clusters[job.cluster_id])
