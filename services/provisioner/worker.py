"""The provisioner's worker runtime: carries out on NATS what its pure core decides
(`domain.core.WorkerCore`): pulls in the read loop, the log port's `submit`, `wire.settle`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import structlog
from nats.js import JetStreamContext

from contracts.steps import StepOutcomes
from contracts.tasks import TaskMessage, TaskStep
from muster.bus.protocol import delivery_count
from muster.bus.wire import connection_of, settle
from muster.ports.eventlog import ConcurrencyError, EventLog, StepEnded

from .alarm import Alarm
from .attempt_trace import Executor, Traces
from .domain.actions import Action, Answer, Claim, Note, Read, Run, Stop, Store, StoreStep, WorkerConfig, lets_go
from .domain.core import Slots, WorkerCore
from .lease import Lease
from .nodes import NodesResolver
from .progress import reporting
from .pull import Pulls
from .queues import declare_queue
from .stepreads import LogSteps, StepReader

__all__ = ["Executor", "Slots", "WorkerConfig", "Workers", "lets_go"]

log = structlog.get_logger("muster.provisioner")


@dataclass
class Workers:
    js: JetStreamContext
    store: EventLog
    executor: Executor
    config: WorkerConfig
    running: set[asyncio.Task[None]] = field(default_factory=set)
    """Plugins running."""
    steps: StepReader | None = None
    """What the log holds of a segment's steps that came again (`stepreads`: the planner asked);
    None: read from `store` (in-process workers on a log they may read)."""

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
        self._alarm = Alarm(self._due)
        self._writing: set[asyncio.Future[int]] = set()
        self._runs: dict[int, asyncio.Task[None]] = {}
        self._pulls = Pulls(self._nc, self.config.provisioner_class, self._accept, self.core.wanted, self._may_pull,
                            self.draining, self._ensure_queue)
        self._started = self._aborted = False
        self._traces = Traces(self.config.provisioner_id)
        self._sync()

    # What the core says, for the provisioner's presence, its drain and tests.
    @property
    def in_flight(self) -> int:
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
    def cancelled(self) -> int:
        """Deliveries never run: their job was cancelled before their claim (docs/decisions/0046)."""
        return self.core.cancelled

    @property
    def ended(self) -> int:
        """Segments stopped: the planner had ended their next step unrun (docs/decisions/0058)."""
        return self.core.ended

    @property
    def lapsed(self) -> int:
        """Forward attempts stopped or not started because the lease lapsed (docs/decisions/0054)."""
        return self.core.stopped

    def keep(self, lease: Lease) -> None:
        """Run forward attempts only within `lease`'s terms, and stop them when it lapses."""
        self.core.leased = True
        lease.follow(self.core.lease_renewed, self._lapsed)

    def _lapsed(self) -> None:
        log.error("presence not renewed in time: the forward attempts held are stopped and given back",
                  running=self.core.running)
        self._do(self.core.lease_lapsed(asyncio.get_running_loop().time()))

    @property
    def holding(self) -> set[str]:
        return self.core.holding

    def promise(self) -> set[str]:
        """What it holds, told a planner that found the task queue lost (`Provisioner.on_held_request`):
        each of these is this provisioner's to finish (`WorkerCore.promise`)."""
        held = self.core.promise(asyncio.get_running_loop().time())
        self._sync()
        return held

    async def ensure_queues(self) -> None:
        for tenant in self.config.tenants:
            await self._pulls.declare(tenant)

    async def _ensure_queue(self, tenant: str) -> None:
        # Claims are kept alive by the queue's real ack_wait, which another provisioner may have set.
        self.core.queue_declared(tenant, await declare_queue(self.js, tenant, self.config))

    # -- running and draining ---------------------------------------------------------------

    async def run(self) -> None:
        """Take and run tasks until drained; return when the last one held is done."""
        if not self.draining.is_set():
            for tenant in self.config.tenants:
                await self._pulls.serve(tenant)
            self._started = True
            try:
                await self.draining.wait()
            finally:
                for tenant in list(self._pulls.served):
                    await self._pulls.let_go(tenant)
        self.stopped.set()
        await self.idle.wait()

    async def serve(self, tenants: tuple[str, ...]) -> None:
        """Serve these tenants' queues from now on (a grant changed): a new one is taken up at
        once, one no longer granted is let go (the tasks held of it go on)."""
        self.config.tenants = tenants
        if not self._started or self.draining.is_set():
            return
        for tenant in tenants:
            if tenant not in self._pulls.served:
                await self._pulls.serve(tenant)
        for tenant in [t for t in self._pulls.served if t not in tenants]:
            await self._pulls.let_go(tenant)

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
        pending: list[asyncio.Future[Any]] = [*(p for _, p in self._pulls.served.values()), *self.running, *self._writing]
        for t in pending:
            t.cancel()
        self._alarm.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    # -- the core's inputs and actions ------------------------------------------------------

    def _accept(self, tenant: str, reply: bytes, data: bytes, header_block: bytes = b"") -> None:
        """A task arrived (from the read loop)."""
        now = asyncio.get_running_loop().time()
        actions = self.core.delivered(tenant, reply.decode(), data, delivery_count(reply), now)
        if header_block:
            self._traces.delivered(actions, header_block, self.core.held)
        self._do(actions)

    def _do(self, actions: list[Action]) -> None:
        if self._aborted:
            return
        for action in actions:
            if isinstance(action, Claim):
                append = self._traces.claim(action.held, action.append, self._task(action.held)) \
                    if self._traces.held else action.append
                if action.marker is not None:  # (first: the two go in its lane, one batch)
                    self._write(self.store.submit(*action.marker, now=True), self._marker_stored)
                # At once when the writer is idle: the claim leaves in this read-loop callback.
                self._write(self.store.submit(action.subject, append, now=True), partial(self._claimed, action.held))
            elif isinstance(action, Run):
                run = asyncio.get_running_loop().create_task(self._run(action.held, action.task))
                self.running.add(run)
                self._runs[action.held] = run
                run.add_done_callback(partial(self._ran, action.held))
            elif isinstance(action, Stop):
                stopped = self._runs.pop(action.held, None)
                if stopped is not None:
                    stopped.cancel()  # (the core let it go: `ran` is not told)
            elif isinstance(action, Read):
                reading = asyncio.get_running_loop().create_task(self._read(action.held, action.steps))
                self.running.add(reading)  # (given up with the plugins on abort)
                reading.add_done_callback(self.running.discard)
            elif isinstance(action, StoreStep):
                # (the core holds the next step now: its claim follows)
                following = self._task(action.held)
                append = self._traces.step(action.held, action.append, following) \
                    if self._traces.held and following is not None else action.append
                self._write(self.store.submit(action.subject, append), self._step_stored)
            elif isinstance(action, Store):
                append = self._traces.outcome(action.held, action.append) if self._traces.held else action.append
                self._write(self.store.submit(action.subject, append), partial(self._stored, action.held))
            elif isinstance(action, Answer):
                if not settle(self._nc, action.reply, action.settle):
                    log.warning("answer lost with the connection; the task is redelivered", verdict=action.settle.verdict.value)
            elif isinstance(action, Note):
                getattr(log, action.level)(action.what, **action.fields)
        self._sync()

    def _task(self, held: int) -> TaskMessage | None:
        """The step the core holds for `held` now."""
        h = self.core.held.get(held)
        return h.task if h is not None else None

    def _ran(self, held: int, run: asyncio.Task[None]) -> None:
        self.running.discard(run)
        if self._runs.get(held) is run:
            del self._runs[held]

    def _write(self, written: asyncio.Future[int], then: Callable[[asyncio.Future[int]], None]) -> None:
        self._writing.add(written)
        written.add_done_callback(then)

    def _claimed(self, held: int, written: asyncio.Future[int]) -> None:
        self._writing.discard(written)
        if self._traces.held:
            self._traces.claimed(held, written, self.core.held[held].task if held in self.core.held else None)
        if not written.cancelled():
            error = written.exception()
            # A claim refused as stale can only be its cancel fence's doing (claims expect nothing
            # else), or its step's end, which the writer tells apart (`StepEnded`, decision 58).
            self._do(self.core.claimed(held, asyncio.get_running_loop().time(), error, closed=isinstance(error, ConcurrencyError),
                                       ended=isinstance(error, StepEnded)))

    async def _read(self, held: int, steps: tuple[TaskStep, ...]) -> None:
        """Each step's outcome of its attempt (the first stored, by whichever provisioner), in
        order, up to the first step without one; or why the steps are no longer to run."""
        answer, error = StepOutcomes(), None
        try:
            answer = await (self.steps or LogSteps(self.store))(steps)
        except Exception as err:  # noqa: BLE001 - the delivery goes back; read again at the next
            error = err
        self._do(self.core.read(held, list(answer.outcomes), asyncio.get_running_loop().time(), error, stale=answer.stale))

    def _marker_stored(self, written: asyncio.Future[int]) -> None:
        """A claim's marker: its claim's answer says what the two did (`_claimed`)."""
        self._writing.discard(written)
        if not written.cancelled():
            written.exception()  # (retrieved: a refusal is the claim's to tell)

    def _step_stored(self, written: asyncio.Future[int]) -> None:
        self._writing.discard(written)
        if not written.cancelled() and written.exception() is not None:
            log.error("a segment step's outcome not recorded", error=repr(written.exception()))

    def _stored(self, held: int, written: asyncio.Future[int]) -> None:
        self._writing.discard(written)
        if not written.cancelled():
            self._do(self.core.stored(held, written.exception(), asyncio.get_running_loop().time()))

    async def _run(self, held: int, task: TaskMessage) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            with reporting(self.store, task, self.config.provisioner_id, self.core.held[held].worker):
                outcome = await self._traces.run(self.executor, held, task)
        except Exception as err:  # noqa: BLE001 - a plugin failure is an outcome; this is the bus or a bug
            self._do(self.core.ran(held, None, loop.time() - started, err, now=loop.time()))
            return
        self._do(self.core.ran(held, outcome, loop.time() - started, now=loop.time()))

    def _sync(self) -> None:
        """The pulls, `idle` and the timer, as the core now stands."""
        _set(self._may_pull, self.core.wanted() > 0)
        _set(self.idle, self.core.idle)
        self._alarm.at(self.core.next_due())

    def _due(self) -> None:
        self._do(self.core.due(asyncio.get_running_loop().time()))


def _set(event: asyncio.Event, on: bool) -> None:
    if on:
        event.set()
    else:
        event.clear()
