"""Carrying out the saga's decisions (`domain/saga.py`): record, then publish, then arm timers.

Everything here runs under the planner's lock, as a reaction to an event or a timer. Events
are recorded before anything is published: a task message goes to the queue only after its
`TaskQueued` is in the log, so a restarted planner re-publishes exactly the attempts the log
says are queued (same message id, de-duplicated by the queue) and never invents a new one.

Talks to the outside only through ports: the event log (via `PlannerState`), the task queue,
and the clock (via `Timers`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

import structlog

from contracts import subjects
from contracts.catalog import Catalog
from contracts.events import LayoutRequested, LayoutSolved, LayoutUnsolvable, TaskClaimed, TaskFailed, TaskQueued, TaskSucceeded
from contracts.tasks import TaskMessage
from muster import tracing
from muster.ports.eventlog import Append, ConcurrencyError, Recorded
from muster.ports.taskqueue import TaskQueue

from . import cancels, closing, leases, traces
from .attempts import AttemptHolders
from .budget import SharedBudget
from .config import PlannerConfig
from .domain import planning, saga, segments
from .domain.cluster import Cluster
from .domain.job import Job
from .domain.limits import Key, Limits
from .domain.saga import Attempt, DispatchPolicy, Effects
from .metrics import QueueMetrics
from .nodemaps import NodeMaps
from .ports import Ownership, Pools, Workers
from .state import PlannerState
from .tasks import needs_nodes, task_message
from .timers import Timers
from .wake import Waker

log = structlog.get_logger("muster.planner")

REPUBLISH_MAX_S = 15.0
REPUBLISH_QUEUED_EVERY_S = 10.0
"""A job's queued attempts go out again at most this often on redelivered outcomes: a planner
slow to ack gets redeliveries by the hundred, and republishing every queued attempt for each
spends its CPU on duplicates (docs/planner.md, "Execution"). Once is enough to repair lost
messages; task timeouts are the net behind it."""
STALE_WAIT_S = 5.0
"""How long a timeout waits for a job the log could not give back after a failed save."""
UNSENT_CHECK_S = 1.0
"""From a failed save to the check that every attempt the log then holds queued went out."""
CHAIN_MOST = 16
"""The most events of one chained save (`execute(chain=True)`): a chain costs the server one
disk sync per event, an atomic batch one commit whatever its size (decision 6, docs/bus.md)."""
CHAINED_OUTCOMES = frozenset({"TaskCompleted", "TaskQueued"})
"""An outcome's save holding only these job events goes as a chain, not an atomic batch (a
batch's staging costs nats-server ~1.1 ms of CPU whatever its size, three to ten times the
few links a lone outcome records: docs/decisions/0036). Its prefix is a valid history:
`saga.take_outcomes` queues what a cut left unqueued when the outcome comes again. A failure's
retry or a job's end keep the atomic save."""


class Execution:
    def __init__(self, state: PlannerState, queue: TaskQueue, timers: Timers, config: PlannerConfig, *,
                 dispatch: DispatchPolicy, ownership: Ownership, metrics: QueueMetrics, nodemaps: NodeMaps,
                 limits: Limits | None = None, pools: Pools | None = None, budget: SharedBudget | None = None,
                 workers: Workers | None = None, attempts: AttemptHolders | None = None) -> None:
        self.state, self.queue, self.timers, self.config = state, queue, timers, config
        self.workers = workers
        """The live provisioners: a cancel's claimed attempts whose provisioner is gone end (cancels.py)."""
        self.dispatch, self.ownership, self.pools = dispatch, ownership, pools
        self.metrics, self.nodemaps, self.limits, self.budget = metrics, nodemaps, limits, budget
        self.waker = Waker(state, ownership, timers, limits, budget)
        self.attempts = attempts if attempts is not None else AttemptHolders(state.log)
        """The claims seen: who ran a task's earlier attempts, which its retries avoid where
        possible (best effort: not rebuilt after a restart)."""
        self.republish_tries: dict[tuple[str, str, int], int] = {}
        self.republished_at: dict[str, datetime] = {}
        """When each job's queued attempts last went out again (REPUBLISH_QUEUED_EVERY_S)."""
        self.traces = traces.JobTraces()

    # -- executing effects ----------------------------------------------------------------

    async def execute(self, job: Job, cluster: Cluster, effects: Effects, chain: bool = False) -> None:
        """Record the aggregates' new events, then publish, then arm the timeouts. `chain`: the
        events are each a whole decision, record them in one round trip (`PlannerState.save`)
        unless there are so many that the server's syncs of each would cost more."""
        recorded = bool(job.pending_events or cluster.pending_events)
        if tracing.enabled():
            traces.marks(job, [getattr(e, "payload", None) for e in job.pending_events])
        rest = list(effects.dispatch)
        try:
            if effects.dispatch and len(job.pending_events) > self.state.part:
                rest = await self._save_and_publish(job, cluster, effects.dispatch)
            else:
                await self.state.save(job, cluster, chain=chain and len(job.pending_events) + len(cluster.pending_events) <= CHAIN_MOST)
        except Exception as err:
            log.info("save failed; the log's view taken", job=str(job.id), error=str(err)[:200] or type(err).__name__)
            # It may have landed (its ack lost in a failover): then the log, whose view is taken
            # now, queues attempts nothing here publishes (that follows a save that returned),
            # nor times out (a timeout is armed with the publish). The event that brought us here
            # comes again, but as a duplicate, whose republish is throttled (the compose
            # topology's stall, docs/testing.md); a timeout's does not come again at all.
            self.timers.arm(("unsent", str(job.id)), self.timers.clock.now() + timedelta(seconds=UNSENT_CHECK_S))
            raise
        # Only now: an outcome not recorded keeps its attempt's timeout (the net if it never comes
        # again), and an attempt with no timeout armed is one never sent from here (`send_unsent`).
        for a in effects.disarm:
            self.timers.disarm(("timeout", str(job.id), a.task_id, a.attempt))
            if job.task_state.get(a.task_id) == "cancelled":  # (a segment's follower ended unrun: no backlog)
                self.metrics.dropped(str(job.id), a.task_id, a.attempt)
        if effects.ask_layout:
            await self.ask_for_layout(job, planning.layout_request_of(job, cluster, await self.state.catalog_of(job)))
        again: list[Attempt] = []
        if effects.republish_queued:
            dispatched = set(effects.dispatch)
            again = [a for a in self._queued_again(job) if a not in dispatched]
        if rest or again:
            catalog = await self.state.catalog_of(job)
            await self.publish_many(job, cluster, catalog, [(a, None) for a in rest])
            await self.publish_many(job, cluster, catalog, [(a, None) for a in again], again=True)
        if job.is_final:
            self.republished_at.pop(str(job.id), None)
            if self.limits is not None:
                # Nothing of an ended job is in flight any more. A job that ends without one
                # more dispatch (a create whose next layout the solver did not have, after
                # its rollback) still counted its last task against its limits, for good.
                self.limits.forget(str(job.id))
        if recorded and job.is_final:
            log.info("job finished", job=str(job.id), operation=job.operation, state=job.state, error=job.error)
            self.traces.ended(job, self.timers.clock.now())
            # A lease that ended while the cluster was busy is due now.
            leases.arm(self.timers, cluster)
        if self.pools is not None:
            await self.pools.after(job, cluster)
        await self._wake(job)

    async def _save_and_publish(self, job: Job, cluster: Cluster, dispatch: list[Attempt]) -> list[Attempt]:
        """A wave of more attempts than one atomic append takes: recorded part by part, and the
        attempts of each part published as soon as it is in the log, while the next part is
        recorded (the server stores one while it takes the other). Each task still goes out
        only after its own `TaskQueued` is stored; a part that failed is not published (the
        log's view is taken again, `PlannerState.save`). Returns the attempts no part held."""
        catalog = await self.state.catalog_of(job)
        waiting = {(a.task_id, a.attempt) for a in dispatch}  # (tuples: hashed in C, unlike Attempt)
        sending: list[asyncio.Future[None]] = []
        if any(needs_nodes(job.tasks[a.task_id].action) for a in dispatch):
            # The nodes map is stored while the first part is recorded (it is content-addressed
            # and names no attempt: storing it early is harmless); the publishes find it stored.
            sending.append(asyncio.ensure_future(self._store_nodes_map(cluster, catalog)))

        held: list[tuple[Attempt, datetime | None]] = []  # segments' steps not all stored yet

        def whole(a: Attempt) -> bool:  # (a segment goes out once each of its steps is stored)
            if not job.segment_after and not job.segment_next:
                return True
            return all((t, job.attempts[t]) not in waiting for t in segments.chain(job, segments.root(job, a.task_id)))

        def stored(part: Sequence[Append]) -> None:
            ready: list[tuple[Attempt, datetime | None]] = []
            for item in part:
                event = item.event
                if isinstance(event, TaskQueued):
                    key = (event.task_id, event.attempt)
                    if key in waiting:
                        waiting.discard(key)
                        ready.append((Attempt(*key), None))
            ready = [*held, *ready]
            held[:] = [r for r in ready if not whole(r[0])]
            ready = [r for r in ready if whole(r[0])]
            if ready:
                sending.append(asyncio.ensure_future(self.publish_many(job, cluster, catalog, ready)))

        try:
            await self.state.save(job, cluster, stored=stored)
        finally:
            await asyncio.gather(*sending)
        return [a for a in dispatch if (a.task_id, a.attempt) in waiting] + [a for a, _ in held]

    async def _store_nodes_map(self, cluster: Cluster, catalog: Catalog) -> None:
        try:
            await self.nodemaps.ref(cluster, catalog)
        except Exception:  # noqa: BLE001 - the publishes ask again, and fail their tasks for it
            return

    def _queued_again(self, job: Job) -> list[Attempt]:
        now, last = self.timers.clock.now(), self.republished_at.get(str(job.id))
        if last is not None and now - last < timedelta(seconds=REPUBLISH_QUEUED_EVERY_S):
            return []
        self.republished_at[str(job.id)] = now
        return saga.queued_attempts(job)

    async def _wake(self, job: Job | None, keys: set[Key] | None = None) -> None:
        await self.waker.wake(job, self.advance, keys)

    async def rebalance(self, keys: set[Key] | None = None) -> None:
        """Under the lock: the budgets of `keys` (default all) in line again, and the jobs
        waiting on them woken (another planner gave slots back; a retry after a failure)."""
        await self._wake(None, keys)

    async def advance(self, job: Job, cluster: Cluster, chain: bool = False, then: Callable[[], object] | None = None,
                      republish: bool = False) -> None:
        """Take the job one step (`saga.advance`) and execute it. `then`: a change made after
        the step's, before they are recorded (its events follow the step's in the log).
        `republish`: the job's queued attempts go out again too (an earlier try may have
        recorded them and stopped before publishing)."""
        catalog = await self.state.catalog_of(job)
        effects = saga.advance(job, cluster, catalog.services, self.config.settings, self.dispatch)
        effects.republish_queued |= republish
        if then is not None:
            then()
        await self.execute(job, cluster, effects, chain=chain)

    async def publish_many(self, job: Job, cluster: Cluster, catalog: Catalog, attempts: list[tuple[Attempt, datetime | None]],
                           again: bool = False) -> None:
        """Publish attempts (each already recorded as queued), pipelined by the queue; each
        timeout is armed first, and an attempt whose publish failed is published again later.
        A segment's steps go in one message from its first step still queued, whichever of
        them `attempts` names (`domain/segments.py`); only that step's timeout is armed (a
        follower's runs from the outcome before it, `_arm_followers`). `again`: sent before,
        maybe (a restart, a lost queue or publish): a segment's provisioner reads first which
        steps ran."""
        if not attempts:
            return
        now = self.timers.clock.now()
        klass = saga.queue_class(cluster, self.config.settings)
        timeout = timedelta(seconds=self.config.task_timeout_s)
        passed = {a.task_id: at for a, at in attempts}
        units = segments.groups(job, passed) if job.segment_after or job.segment_next else [([t], None) for t in passed]
        ref: str | None = None
        # (every step a message carries: a segment sent again from its head, a create, whose
        # followers read the map)
        if any(needs_nodes(job.tasks[t].action) for steps, _ in units for t in steps):
            try:
                # The nodes map travels by reference (nodemaps.py); only automators get one.
                ref = await self.nodemaps.ref(cluster, catalog)
            except Exception as err:  # noqa: BLE001 - the attempts needing it are published again
                log.warning("nodes map not stored; its tasks will be published again", job=str(job.id), error=repr(err))
        sending: list[Attempt] = []
        messages: list[TaskMessage] = []
        failed: list[tuple[Attempt, BaseException]] = []
        job_id = str(job.id)
        shared: dict[Any, Any] = {}
        times: list[datetime] = []
        def message(a: Attempt) -> TaskMessage:
            needs = needs_nodes(job.tasks[a.task_id].action)
            if needs and ref is None:
                raise RuntimeError("no nodes map")
            avoid = self.attempts.ran(job_id, a.task_id, a.attempt) if a.attempt > 1 else []
            return task_message(job, cluster, catalog, a.task_id, a.attempt, klass,
                                self.config.action_timeout_s, avoid, ref if needs else None, shared)

        for steps, key in units:
            a = Attempt(steps[0], job.attempts[steps[0]])
            at = passed.get(a.task_id) or now
            if a.task_id in passed:  # (a step before those asked for is on its way: its timer runs)
                # A follower is in no provisioner's backlog: it counts once the step before succeeded.
                self.metrics.queued(job.tenant, klass, job_id, a.task_id, a.attempt, at)
                self.timers.arm(("timeout", job_id, a.task_id, a.attempt), at + timeout)
            try:
                head = message(a)
                if key is not None:
                    rest = [message(Attempt(t, job.attempts[t])) for t in steps[1:]]
                    # (each step's claim and run go in its own attempt's span, as its head's do)
                    traced = self.traces.queue(job, [(m.task_id, m.attempt, at) for m in rest]) if tracing.enabled() else None
                    if traced is not None:
                        rest = [m.model_copy(update={"trace": c}) for m, c in zip(rest, traced, strict=True)]
                    head = head.model_copy(update={"then": rest, "segment": key, "again": again})
                messages.append(head)
                sending.append(a)
                times.append(at)
            except Exception as err:  # noqa: BLE001 - whatever failed, the message is published again
                failed.append((a, err))
        if messages:
            contexts = self.traces.queue(job, [(a.task_id, a.attempt, at) for a, at in zip(sending, times, strict=True)]) \
                if tracing.enabled() else None
            try:
                outcomes = await (self.queue.publish_many(messages) if contexts is None
                                  else self.queue.publish_many(messages, traces=contexts))
            except Exception as err:  # noqa: BLE001 - as for each message
                outcomes = [err] * len(messages)
            failed += [(a, e) for a, e in zip(sending, outcomes, strict=True) if e is not None]
        if failed:
            # The attempts are recorded (TaskQueued); only their messages are missing. Publish
            # each again from a timer, backing off, until it gets out or stops being current.
            first, why = failed[0]
            log.warning("task publish failed; will publish again", job=str(job.id), task=first.task_id,
                        attempt=first.attempt, error=repr(why), tasks=len(failed))
            for a, _ in failed:
                self._schedule_republish(str(job.id), a)

    async def publish(self, job: Job, cluster: Cluster, catalog: Catalog, a: Attempt, queued_at: datetime | None = None) -> None:
        await self.publish_many(job, cluster, catalog, [(a, queued_at)])

    def _schedule_republish(self, job_id: str, a: Attempt) -> None:
        key = (job_id, a.task_id, a.attempt)
        tries = self.republish_tries.get(key, 0) + 1
        delay = min(REPUBLISH_MAX_S, 0.25 * 2 ** (tries - 1))
        if self.timers.arm(("republish", *key), self.timers.clock.now() + timedelta(seconds=delay)):
            self.republish_tries[key] = tries

    async def republish(self, job_id: str, task_id: str, attempt: int) -> None:
        async with self.state.lock:
            job = self.state.jobs.get(job_id)
            try:
                job, cluster = await self.state.fresh(job) if job is not None else (None, None)
            except Exception as err:  # noqa: BLE001 - the log unreadable: no attempt it may not hold goes out
                log.warning("job not read again; its publish waits", job=job_id, error=str(err) or type(err).__name__)
                self._schedule_republish(job_id, Attempt(task_id, attempt))
                return
            if job is None or cluster is None or not job.is_current(task_id, attempt):
                self.republish_tries.pop((job_id, task_id, attempt), None)
                return
            await self.publish_many(job, cluster, await self.state.catalog_of(job), [(Attempt(task_id, attempt), None)], again=True)

    async def send_unsent(self, job_id: str) -> None:
        """After a failed save (`execute`): the attempts the log holds queued for the job that
        were never sent from here, their timeouts not armed, go out (as a resume sends every
        queued attempt, under its own message id: the queue takes each once). Waits while the
        log cannot be read."""
        async with self.state.lock:
            job = self.state.jobs.get(job_id)
            if job is None or not self.ownership.owns(job.tenant, job.cluster_id):
                return  # another planner's now (its resume sends them)
            try:
                job, cluster = await self.state.fresh(job)
            except Exception as err:  # noqa: BLE001 - checked once the log can be read
                log.warning("job not read again; its attempts' check waits", job=job_id, error=str(err) or type(err).__name__)
                self.timers.arm(("unsent", job_id), self.timers.clock.now() + timedelta(seconds=STALE_WAIT_S))
                return
            if job.is_final:  # (decided on the log's view: a stale copy may have ended where the log has not)
                return
            unsent = [a for a in saga.queued_attempts(job) if not self._armed(job, a.task_id)]
            if unsent:
                log.warning("attempts queued by a save whose answer was lost; publishing them", job=job_id,
                            tasks=[a.task_id for a in unsent][:10], attempts=len(unsent))
                await self.publish_many(job, cluster, await self.state.catalog_of(job), [(a, None) for a in unsent], again=True)

    def _armed(self, job: Job, task_id: str) -> bool:
        """Whether the attempt went out from here: its timeout is armed (a segment's follower:
        its first queued step's)."""
        first = segments.root(job, task_id) if job.segment_after else task_id
        return ("timeout", str(job.id), first, job.attempts[first]) in self.timers.handles

    def _arm_followers(self, job: Job, cluster: Cluster, events: Sequence[TaskSucceeded | TaskFailed]) -> None:
        """A segment step's success starts the next step's timeout (it was sent with the step
        before, and waits for it: docs/decisions/0058)."""
        if not job.segment_next:
            return
        # One time for the batch's followers, taken together: one deadline, one call of the clock
        # (timers.py), as a wave's heads have.
        now = self.timers.clock.now()
        at, job_id = now + timedelta(seconds=self.config.task_timeout_s), str(job.id)
        klass = saga.queue_class(cluster, self.config.settings)
        for e in events:
            nxt = job.segment_next.get(e.task_id) if isinstance(e, TaskSucceeded) else None
            if nxt is not None and job.segment_after.get(nxt) == e.task_id and job.is_current(nxt, job.attempts[nxt]):
                key = ("timeout", job_id, nxt, job.attempts[nxt])
                if key not in self.timers.handles:
                    self.metrics.queued(job.tenant, klass, job_id, nxt, job.attempts[nxt], now)
                    self.timers.arm(key, at)

    # -- reactions ---------------------------------------------------------------------------

    def on_claimed(self, recorded: Recorded, first: bool = False) -> None:
        """`first`: the first claim of its attempt seen here, from which its timeout counts."""
        event: TaskClaimed = recorded.event
        if event.job_id not in self.state.jobs:
            return  # another planner's job
        self.metrics.claimed(event.job_id, event.task_id, event.attempt, recorded.time)
        if first:
            self._from_claim(event.job_id, event.task_id, event.attempt, recorded.time)

    def _from_claim(self, job_id: str, task_id: str, attempt: int, claimed_at: datetime) -> None:
        """An attempt's timeout counts from its first claim, not from its queueing: the wait for
        a free provisioner is not the provisioner's silence, and only from the claim does the
        timeout outlast the action's own (docs/decisions/0059). Only an armed timeout moves (an
        attempt in flight from here), and only later: a task nobody claims still ends a timeout
        after its queueing. A later claim (a redelivery's) moves nothing: a delivery given back
        unrun and claimed again, over and over, must not keep its attempt from ending. The claim's
        time is its writer's clock: never later than now here, so a provisioner's clock ahead
        cannot put the deadline off (at most a timeout after the planner saw the claim)."""
        since = min(claimed_at, self.timers.clock.now())
        self.timers.postpone(("timeout", job_id, task_id, attempt), since + timedelta(seconds=self.config.task_timeout_s))

    async def take_outcome(self, job: Job, cluster: Cluster, event: TaskSucceeded | TaskFailed,
                           recorded: Recorded | None = None) -> None:
        if not tracing.enabled():
            await self.take_outcomes(job, cluster, [event])
            return
        catalog = await self.state.catalog_of(job)
        current = job.is_current(event.task_id, event.attempt)
        # Under the provisioner's run when its outcome names it, else under the attempt's span.
        parent = recorded.trace if recorded is not None and recorded.trace else (
            tracing.attempt(traces.of(job), str(job.id), event.task_id, event.attempt))
        with traces.span(job, f"outcome {event.task_id}", parent, task=event.task_id, attempt=event.attempt,
                         provisioner=event.provisioner, ok=event.type == "TaskSucceeded"):
            effects = saga.take_outcome(job, cluster, event, catalog.services, self.config.settings, self.dispatch)
            await self.execute(job, cluster, effects, chain=self._chained_outcomes(job))
            self._arm_followers(job, cluster, [event])
        if current:
            at = recorded.time if recorded is not None else self.timers.clock.now()
            self.traces.attempt_ended(job, event.task_id, event.attempt, at, error=getattr(event, "error", None),
                                      provisioner=event.provisioner)

    async def take_outcomes(self, job: Job, cluster: Cluster, events: Sequence[TaskSucceeded | TaskFailed]) -> None:
        catalog = await self.state.catalog_of(job)
        effects = saga.take_outcomes(job, cluster, events, catalog.services, self.config.settings, self.dispatch)
        await self.execute(job, cluster, effects, chain=self._chained_outcomes(job))
        self._arm_followers(job, cluster, events)

    def _chained_outcomes(self, job: Job) -> bool:
        """Whether an outcome's save goes as a chain (`CHAINED_OUTCOMES`): on a log of one
        replica, where an atomic batch is staged on disk. A replicated stream stages it in
        memory, and sends a chain's links one at a time (`EventStore.append_chain`)."""
        return self.config.replicas == 1 and all(
            getattr(getattr(e, "payload", None), "type", None) in CHAINED_OUTCOMES for e in job.pending_events)

    async def take_layout(self, job: Job, cluster: Cluster, event: LayoutSolved | LayoutUnsolvable) -> None:
        catalog = await self.state.catalog_of(job)
        with traces.span(job, "plan", layout=event.type):
            # Planning 10,000 nodes takes seconds of CPU: in a thread, so the loop keeps the
            # planner's leases and answers meanwhile (the state lock keeps other handlers out).
            effects = await asyncio.to_thread(saga.take_layout, job, cluster, event, catalog, self.config.settings,
                                              self.dispatch)
            await self.execute(job, cluster, effects)

    async def timed_out(self, job_id: str, task_id: str, attempt: int) -> None:
        async with self.state.lock:
            job = self.state.jobs.get(job_id)
            if job is None:
                return
            try:
                job, cluster = await self.state.fresh(job)
            except Exception as err:  # noqa: BLE001 - decided once the log can be read
                log.warning("job not read again; its timeout waits", job=job_id, error=str(err) or type(err).__name__)
                self.timers.arm(("timeout", job_id, task_id, attempt), self.timers.clock.now() + timedelta(seconds=STALE_WAIT_S))
                return
            if not job.is_current(task_id, attempt):
                self.metrics.dropped(job_id, task_id, attempt)  # (waited for by nobody)
                return
            if not job.is_final and await self._claimed_before_close(job, task_id, attempt):
                return
            catalog = await self.state.catalog_of(job)
            effects = saga.time_out(job, cluster, Attempt(task_id, attempt), self.config.task_timeout_s,
                                    catalog.services, self.config.settings, self.dispatch)
            log.warning("task timed out", job=job_id, task=task_id, attempt=attempt)
            self.traces.attempt_ended(job, task_id, attempt, self.timers.clock.now(), error="timed out")
            try:
                await self.execute(job, cluster, effects or Effects())
            except Exception as err:  # noqa: BLE001 - decided again on the log's view
                # The timer is spent, and nothing comes again to take it up: the attempt, current
                # in the log when the save did not land, would never time out.
                log.warning("timeout not recorded; decided again on the log's view", job=job_id, task=task_id,
                            attempt=attempt, error=str(err) or type(err).__name__, lost_race=isinstance(err, ConcurrencyError))
                self.timers.arm(("timeout", job_id, task_id, attempt), self.timers.clock.now() + timedelta(seconds=STALE_WAIT_S))
                return
            # Waited for no more: out of the backlog the autoscaler reads (its message may stay
            # in the queue unclaimed, or its silent provisioner never reports).
            self.metrics.dropped(job_id, task_id, attempt)

    async def _claimed_before_close(self, job: Job, task_id: str, attempt: int) -> bool:
        """At the deadline: close the attempt, so that no claim of it is stored after
        (`closing.py`). True when it does not fail now, its timer armed again: a claim stored
        before the close that the planner had not taken moves the deadline (docs/decisions/0059),
        or the close failed and is tried again."""
        key, now = ("timeout", str(job.id), task_id, attempt), self.timers.clock.now()
        try:
            claims = await closing.close(self.state.log, job, task_id, attempt)
        except Exception as err:  # noqa: BLE001 - decided once the log can be read, on its view
            if isinstance(err, ConcurrencyError):
                self.state.stale.add(f"job:{job.id}")  # (moved on in the log: read again first)
            log.warning("attempt not closed; its timeout waits", job=str(job.id), task=task_id, attempt=attempt,
                        error=str(err) or type(err).__name__)
            self.timers.arm(key, now + timedelta(seconds=STALE_WAIT_S))
            return True
        seen = bool(self.attempts.holders(str(job.id), task_id, attempt))
        for r in claims:  # (seen from now on: the deadline counts from a claim once)
            self.attempts.claimed(r)
        later = closing.deadline(claims, seen, now, self.config.task_timeout_s)
        if later is not None:
            log.info("claimed before its timeout; its deadline counts from the claim", job=str(job.id), task=task_id,
                     attempt=attempt)
            self.timers.arm(key, later)
        return later is not None

    # -- the solver's request, and a restart ---------------------------------------------------

    async def ask_for_layout(self, job: Job, request: LayoutRequested) -> None:
        """Append the request (once per round: a restart after a crash between the job's save
        and this append asks again, and finds it asked)."""
        subject = subjects.layout_events(job.tenant, str(job.id))
        last = 0
        if request.round:  # another layout: after the earlier rounds' requests and answers
            history = await self.state.log.read(subject)
            if any(r.type == "LayoutRequested" and r.event.round == request.round for r in history):
                return
            last = history[-1].seq if history else 0
        try:
            await self.state.log.append(subject, [Append(request, msg_id=f"{job.id}:layout:{request.round + 1}", trace=traces.of(job))],
                                        expect_last_seq=last)
        except ConcurrencyError:
            pass  # already asked

    async def resume_job(self, job: Job, cluster: Cluster, queued_at: dict[tuple[str, int], datetime], since_seq: int = 1,
                         attempts: AttemptHolders | None = None) -> None:
        """Carry on with an open job rebuilt from the log. First the outcomes it has not taken
        in (they came while nobody acted for its cluster: a planner died, or the shard moved;
        every outcome of an attempt still queued comes after that attempt's `TaskQueued`, so
        the log is read from the earliest of those, `since_seq`). Then the attempts still
        queued: their messages may never have reached the queue; publishing them again is
        harmless, and their timeouts count from when they were queued."""
        self.traces.queued_at(job, queued_at)
        succeeded_at: dict[str, datetime] = {}  # (a segment's step's timeout runs from the success before it)
        claimed_at: dict[tuple[str, int], datetime] = {}  # (and an attempt's from its first claim)
        for r in await self.state.log.read(subjects.job_task_outcomes(job.tenant, str(job.id)), start_seq=since_seq):
            if r.type == "TaskSucceeded" and job.segment_next:
                succeeded_at[r.event.task_id] = r.time
            if r.type == "TaskClaimed":
                if attempts is not None:
                    attempts.claimed(r)
                claimed_at.setdefault((r.event.task_id, r.event.attempt), r.time)
                self.on_claimed(r)
            elif r.type in ("TaskSucceeded", "TaskFailed") and job.is_current(r.event.task_id, r.event.attempt) and not job.is_final:
                if attempts is not None and not await attempts.holds(r):
                    continue  # not the attempt's holder (attempts.py): recorded, changes nothing
                await self.take_outcome(job, cluster, r.event, r)
        await cancels.close_claims(self, job, cluster)  # (a cancel recorded by a planner that stopped before closing)
        if job.is_final:
            return
        catalog = await self.state.catalog_of(job)
        links = job.segment_after

        def since(a: Attempt) -> datetime | None:
            before = links.get(a.task_id)
            return succeeded_at.get(before) if before is not None and before in succeeded_at else queued_at.get((a.task_id, a.attempt))
        queued = saga.queued_attempts(job)
        await self.publish_many(job, cluster, catalog, [(a, since(a)) for a in queued], again=True)
        for a in queued:
            if (a.task_id, a.attempt) in claimed_at:
                self._from_claim(str(job.id), a.task_id, a.attempt, claimed_at[(a.task_id, a.attempt)])
        await self.advance(job, cluster)
