"""The provisioner's worker runtime: the adapter of its pure core (`domain.core.WorkerCore`).

One long-poll pull per (tenant, class) queue: a pull waits on the server until a task is there
and each task reaches the core as it arrives, from the connection's read loop; no worker ever
sleeps and asks again. The core decides (claim, run, store the outcome, ack, nak, terminate,
keep alive); this carries it out: claims and outcomes through the event log port (`submit`:
the claim of a task that has just arrived leaves in the same read-loop callback), plugins in
tasks of their own, answers through `muster.bus.wire.settle`, the core's deadlines on one
timer. Drain stops the pulls (the server drops their waiting requests and hands new tasks to
other provisioners) and waits for the tasks held. docs/provisioner.md has the whole story.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Protocol

import structlog
from nats.js import JetStreamContext

from contracts import subjects
from contracts.tasks import TaskMessage, TaskOutcome
from muster import tracing
from muster.bus.protocol import delivery_count
from muster.bus.wire import connection_of, settle
from muster.ports.eventlog import EventLog

from . import progress
from .attempt_trace import Traced, attempt_of, attributes, traced_run, tracer
from .domain.actions import Action, Answer, Claim, Note, Run, Store, WorkerConfig, lets_go
from .domain.core import Slots, WorkerCore
from .nodes import NodesResolver
from .progress import Reporter
from .pull import RawPull, keep_pulling
from .queues import declare_queue

__all__ = ["Executor", "Slots", "WorkerConfig", "Workers", "lets_go"]

log = structlog.get_logger("muster.provisioner")


class Executor(Protocol):
    async def execute(self, task: TaskMessage) -> TaskOutcome: ...


@dataclass
class Workers:
    js: JetStreamContext
    store: EventLog
    executor: Executor
    config: WorkerConfig
    running: set[asyncio.Task[None]] = field(default_factory=set)
    """Plugins running."""

    def __post_init__(self) -> None:
        # Plugins get the nodes map back and may return only so much (services/provisioner/nodes.py).
        self.executor = NodesResolver(self.executor, self.js)
        self.core = WorkerCore(self.config)
        self._nc = connection_of(self.js)
        self.draining = asyncio.Event()
        self.idle = asyncio.Event()
        self.idle.set()
        self.stopped = asyncio.Event()
        """Set when the pulls have stopped (after a drain, or if `run` never started)."""
        self._may_pull = asyncio.Event()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._writing: set[asyncio.Future[int]] = set()
        self._pulls: dict[str, tuple[RawPull, asyncio.Task[None]]] = {}
        """The tenants served now: each one's pull and the task that keeps it asking."""
        self._started = self._aborted = False
        self._declared: set[str] = set()
        self._traced: dict[int, Traced] = {}
        """Held tasks' traces, by held id (only when tracing is on)."""
        self._sync()

    @property
    def in_flight(self) -> int:
        """Tasks held: claimed (or being claimed) and not yet returned by their plugin."""
        return self.core.in_flight

    @property
    def plugins_running(self) -> int:
        return self.core.running

    @property
    def completed(self) -> int:
        return self.core.completed

    @property
    def passed(self) -> int:
        return self.core.passed

    @property
    def holding(self) -> set[str]:
        """Attempts held (`<job>.<task>.<attempt>`), from taking the task until its outcome is
        stored or it goes back to the queue; a planner asks for them after the task queue was
        lost (`Provisioner.on_held_request`, docs/decisions/0013)."""
        return self.core.holding

    async def ensure_queues(self) -> None:
        for tenant in self.config.tenants:
            await self._ensure_queue(tenant)

    async def _ensure_queue(self, tenant: str) -> None:
        # Claims are kept alive by the queue's real ack_wait, which another provisioner may have set.
        self.core.queue_declared(tenant, await declare_queue(self.js, tenant, self.config))
        self._declared.add(tenant)

    # -- running and draining ---------------------------------------------------------------

    async def run(self) -> None:
        """Take and run tasks until drained; return when the last one held is done."""
        if not self.draining.is_set():
            for tenant in self.config.tenants:
                await self._serve(tenant)
            self._started = True
            try:
                await self.draining.wait()
            finally:
                for tenant in list(self._pulls):
                    await self._let_go(tenant)
        self.stopped.set()
        await self.idle.wait()

    async def serve(self, tenants: tuple[str, ...]) -> None:
        """Serve these tenants' queues from now on (a grant changed): a new one is taken up at
        once, one no longer granted is let go (the tasks held of it go on)."""
        self.config.tenants = tenants
        if not self._started or self.draining.is_set():
            return
        for tenant in tenants:
            if tenant not in self._pulls:
                await self._serve(tenant)
        for tenant in [t for t in self._pulls if t not in tenants]:
            await self._let_go(tenant)

    async def _serve(self, tenant: str) -> None:
        if tenant not in self._declared:
            await self._ensure_queue(tenant)
        durable = subjects.task_consumer(tenant, self.config.provisioner_class)
        pull = RawPull(self._nc, subjects.TASKS_STREAM, durable, partial(self._accept, tenant))
        await pull.start()
        puller = asyncio.create_task(keep_pulling(pull, tenant, self.core.wanted, self._may_pull, self.draining,
                                                  partial(self._ensure_queue, tenant)), name=f"pull-{tenant}")
        self._pulls[tenant] = (pull, puller)

    async def _let_go(self, tenant: str) -> None:
        pull, puller = self._pulls.pop(tenant)
        puller.cancel()
        await asyncio.gather(puller, return_exceptions=True)
        await pull.stop()  # without its subscription a waiting pull has no interest: the server drops it

    def stop_taking(self) -> None:
        """Take no new task from now on (a task that arrives goes back to the queue)."""
        self.draining.set()
        self.core.drain()
        self._sync()

    async def drain(self) -> None:
        """Take no new tasks; return when the ones held are finished."""
        self.stop_taking()
        if self._started:
            await self.stopped.wait()
        await self.idle.wait()

    async def abort(self) -> None:
        """Stop at once, abandoning the tasks held (they come back after `ack_wait`): for tests
        that play a dying process, and for a shutdown that cannot wait."""
        self._aborted = True
        self.draining.set()
        pending: list[asyncio.Future[Any]] = [*(p for _, p in self._pulls.values()), *self.running, *self._writing]
        for t in pending:
            t.cancel()
        if self._timer is not None:
            self._timer.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    # -- the core's inputs and actions ------------------------------------------------------

    def _accept(self, tenant: str, reply: bytes, data: bytes, header_block: bytes = b"") -> None:
        """A task arrived (from the read loop)."""
        now = asyncio.get_running_loop().time()
        actions = self.core.delivered(tenant, reply.decode(), data, delivery_count(reply), now)
        if header_block and tracing.enabled():
            self._trace(actions, header_block)
        self._do(actions)

    def _trace(self, actions: list[Action], header_block: bytes) -> None:
        """The delivery's claim goes in the trace its message names (its attempt's span)."""
        context = attempt_of(header_block)
        if context is None:
            return
        if len(self._traced) > 2 * len(self.core.held) + 64:  # those let go without an outcome
            self._traced = {h: t for h, t in self._traced.items() if h in self.core.held}
        for action in actions:
            if isinstance(action, Claim):
                self._traced[action.held] = Traced(context)

    def _do(self, actions: list[Action]) -> None:
        if self._aborted:
            return
        for action in actions:
            if isinstance(action, Claim):
                traced = self._traced.get(action.held) if self._traced else None
                append = action.append
                if traced is not None:
                    traced.claim, traced.claimed_from = tracing.child(traced.attempt), time.time()
                    append = replace(append, trace=traced.claim)
                # At once when the writer is idle: the claim leaves in this read-loop callback.
                self._write(self.store.submit(action.subject, append, now=True), partial(self._claimed, action.held))
            elif isinstance(action, Run):
                run = asyncio.get_running_loop().create_task(self._run(action.held, action.task))
                self.running.add(run)
                run.add_done_callback(self.running.discard)
            elif isinstance(action, Store):
                traced = self._traced.pop(action.held, None) if self._traced else None
                append = replace(action.append, trace=traced.run) if traced is not None and traced.run else action.append
                self._write(self.store.submit(action.subject, append), partial(self._stored, action.held))
            elif isinstance(action, Answer):
                if not settle(self._nc, action.reply, action.settle):
                    log.warning("answer lost with the connection; the task is redelivered", verdict=action.settle.verdict.value)
            elif isinstance(action, Note):
                getattr(log, action.level)(action.what, **action.fields)
        self._sync()

    def _write(self, written: asyncio.Future[int], then: Any) -> None:
        self._writing.add(written)
        written.add_done_callback(then)

    def _claimed(self, held: int, written: asyncio.Future[int]) -> None:
        self._writing.discard(written)
        traced = self._traced.get(held) if self._traced else None
        if traced is not None:
            failed = None if written.cancelled() or written.exception() is None else str(written.exception())
            task = self.core.held[held].task if held in self.core.held else None
            tracer.record("claim", traced.claim, traced.attempt, traced.claimed_from, time.time(), error=failed,
                          provisioner=self.config.provisioner_id, **attributes(task))
            if failed:
                self._traced.pop(held, None)
        if not written.cancelled():
            self._do(self.core.claimed(held, asyncio.get_running_loop().time(), written.exception()))

    def _stored(self, held: int, written: asyncio.Future[int]) -> None:
        self._writing.discard(written)
        if not written.cancelled():
            self._do(self.core.stored(held, written.exception()))

    async def _run(self, held: int, task: TaskMessage) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        traced = self._traced.get(held) if self._traced else None
        me = self.config.provisioner_id
        reporter = Reporter(self.store, task, subjects.task_progress(task.tenant, task.job_id, task.task_id, me), me,
                            self.core.held[held].worker)
        progress.current.set(reporter)  # this task's own context: the registry hands it to the plugin
        try:
            outcome = await (self.executor.execute(task) if traced is None else traced_run(self.executor, traced, task, me))
        except Exception as err:  # noqa: BLE001 - a plugin failure is an outcome; this is the bus or a bug
            reporter.close()
            self._do(self.core.ran(held, None, loop.time() - started, err))
            return
        reporter.close()  # its lines are submitted before the outcome: the log has them first
        self._do(self.core.ran(held, outcome, loop.time() - started))

    def _sync(self) -> None:
        """The pulls, `idle` and the timer, as the core now stands."""
        if self.core.wanted() > 0:
            self._may_pull.set()
        else:
            self._may_pull.clear()
        if self.core.idle:
            self.idle.set()
        else:
            self.idle.clear()
        due = self.core.next_due()
        if due is not None and (self._timer is None or due < self._timer_at):
            if self._timer is not None:
                self._timer.cancel()
            self._timer, self._timer_at = asyncio.get_running_loop().call_at(due, self._due), due

    def _due(self) -> None:
        self._timer = None
        self._do(self.core.due(asyncio.get_running_loop().time()))
