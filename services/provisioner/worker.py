"""The provisioner's worker runtime: tasks arrive as the bus delivers them.

One long-poll pull per (tenant, class) queue: `fetch()` waits on the server until at least one
task is there and returns at once when one arrives; no worker ever sleeps and asks again.
Capacity bounds the tasks in flight: a puller asks for at most as many tasks as there are free
slots, and a task that arrives with no slot free (two tenants' pulls answered at once) goes
straight back to the queue. While a task runs its claim is kept alive with in-progress acks, so
only a dead worker loses its task (which the server then redelivers to another worker after
`ack_wait`). Drain stops the pulls (the pull subscriptions are removed, so the server drops
their waiting requests and hands new tasks to other provisioners) and waits for the tasks in
flight. docs/provisioner.md has the whole story.

Longer than most modules (~350 lines) on purpose: the pulls, the slots, the claim keep-alive and
the drain are one state machine over the same subscriptions and counters.
"""

from __future__ import annotations

import asyncio
import heapq
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

import structlog
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, ConsumerInfo
from nats.js.errors import BadRequestError, NotFoundError, ServiceUnavailableError
from pydantic import ValidationError

from contracts import subjects
from contracts.events import TaskClaimed, TaskFailed, TaskSucceeded
from contracts.tasks import TaskMessage, TaskOutcome, trim_output
from muster.bus.eventstore import Append, EventStore
from muster.bus.streams import ensure_tasks_stream
from muster.bus.wire import settle
from muster.ports.delivery import ACK

from .nodes import NodesResolver
from .pull import RawPull

log = structlog.get_logger("muster.provisioner")

FETCH_WAIT_S = 5.0
"""How long one pull waits on the server for a task. It returns as soon as one arrives; the
renewal only bounds how long a pull lost with a broken connection goes unnoticed."""
MAX_BATCH = 256
"""The most tasks one pull asks for."""
FINISHING_PER_SLOT = 4
"""Tasks whose plugin is done but whose outcome is still being written hold no slot; pulls wait
while more than this many per slot are (the log is slow, or down)."""
RETRY_DELAY_S = 1.0
"""Redelivery delay of a task whose handling failed for a reason of the bus or the log."""
MAX_PAUSE_S = 10.0
"""The longest pause of a puller after the bus failed it (it doubles from 0.5 s)."""
SHORT_RUN_S = 1.0
"""A plugin that returns within this lets the worker claim one more task ahead (up to
`claim_ahead`); a longer one stops the claiming ahead: slots that turn over slowly gain nothing
from it, and a task claimed ahead would wait for them."""
AHEAD_WAIT_S = 1.0
"""A task claimed ahead that finds no free slot within this goes back to the queue (nak, no
delay), for a provisioner with room; its claim stays in the log, as a dead worker's does."""
CONSUMER_EXISTS = 10148  # the durable exists with other settings: use it as it is
STREAM_NOT_FOUND = 10059


class Executor(Protocol):
    async def execute(self, task: TaskMessage) -> TaskOutcome: ...


@dataclass
class WorkerConfig:
    provisioner_id: str
    tenants: tuple[str, ...] = ("default",)
    provisioner_class: str = "default"
    capacity: int = 8
    ack_wait_s: float = 30.0
    avoid_deliveries: int = 2
    """A provisioner named in a task's `avoid` lets this many deliveries of it go."""
    avoid_delay_s: float = 0.5
    """...each coming back to the queue after this delay, for another provisioner to take."""
    claim_ahead: int | None = None
    """Tasks taken and claimed beyond `capacity` while the slots turn over fast (each waits for
    a slot with its claim stored, so a freed slot never waits for a claim's commit); None =
    `capacity`, 0 = never. At most `capacity` plugins run at once whatever this is."""


def lets_go(task: TaskMessage, provisioner_id: str, delivery: int, config: WorkerConfig) -> bool:
    """Prefer another provisioner on retry: one that ran an earlier attempt (it is in `avoid`)
    passes on the first `avoid_deliveries` deliveries, and runs the task after that."""
    return provisioner_id in task.avoid and delivery <= config.avoid_deliveries


class Slots:
    """Numbered places for the tasks a provisioner holds (the worker numbers in `TaskClaimed`):
    `capacity + claim_ahead` of them. The lowest free number is taken first."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._free = list(range(capacity))  # a heap
        self._available = asyncio.Event()
        self._available.set()

    @property
    def free(self) -> int:
        return len(self._free)

    @property
    def busy(self) -> int:
        return self.capacity - len(self._free)

    def take(self) -> int | None:
        if not self._free:
            return None
        slot = heapq.heappop(self._free)
        if not self._free:
            self._available.clear()
        return slot

    def give(self, slot: int) -> None:
        heapq.heappush(self._free, slot)
        self._available.set()

    async def available(self) -> None:
        """Return when at least one slot is free (without taking it)."""
        await self._available.wait()


@dataclass
class Workers:
    js: JetStreamContext
    store: EventStore
    executor: Executor
    config: WorkerConfig
    running: set[asyncio.Task[None]] = field(default_factory=set)

    def __post_init__(self) -> None:
        # Plugins get the nodes map back and may return only so much (services/provisioner/nodes.py).
        self.executor = NodesResolver(self.executor, self.js)
        capacity = self.config.capacity
        self.ahead = capacity if self.config.claim_ahead is None else max(self.config.claim_ahead, 0)
        self.slots = Slots(capacity + self.ahead)
        """A place for every task held, from its arrival until its plugin returns."""
        self._ahead_ok = 0
        """Tasks that may be held beyond capacity now: one more per plugin that returned within
        SHORT_RUN_S, none after a longer one or after a task claimed ahead found no slot."""
        self._running = 0
        """Plugins running (at most `capacity`)."""
        self._line: deque[asyncio.Future[bool]] = deque()
        """Claimed tasks waiting for a plugin slot, first come first served."""
        self._open = asyncio.Event()
        self._open.set()
        """Set while the pulls may ask for tasks (`_want() > 0`)."""
        self.draining = asyncio.Event()
        self.idle = asyncio.Event()
        self.idle.set()
        self.stopped = asyncio.Event()
        """Set when the pulls have stopped (after a drain, or if `run` never started)."""
        self.completed = 0
        self.passed = 0
        """Deliveries let go: `avoid`, overflow, or arriving while draining."""
        self._keepalive_s: dict[str, float] = {}
        self.finishing: set[asyncio.Future[int]] = set()
        """Outcomes being written (then acked): their plugins are done, their slots free."""
        self.holding: set[str] = set()
        """Attempts held (`<job>.<task>.<attempt>`): claimed or being claimed, until the outcome
        is stored or the task goes back to the queue. A planner asks for them after the task
        queue was lost (`Provisioner.on_held_request`, docs/decisions/0013)."""
        self._room = asyncio.Event()
        self._room.set()
        self._pullers: list[asyncio.Task[None]] = []
        self._side: set[asyncio.Task[None]] = set()
        self._started = False

    @property
    def in_flight(self) -> int:
        """Tasks held: claimed (or being claimed) and not yet returned by their plugin."""
        return self.slots.busy

    @property
    def plugins_running(self) -> int:
        """Plugins running now (never more than `capacity`)."""
        return self._running

    def _want(self) -> int:
        return self.config.capacity + self._ahead_ok - self.slots.busy

    def _update_open(self) -> None:
        if self._want() > 0:
            self._open.set()
        else:
            self._open.clear()

    # -- queues -----------------------------------------------------------------------------

    async def ensure_queues(self) -> None:
        for tenant in self.config.tenants:
            await self._ensure_queue(tenant)

    async def _ensure_queue(self, tenant: str) -> None:
        durable = subjects.task_consumer(tenant, self.config.provisioner_class)
        config = ConsumerConfig(
            durable_name=durable,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=self.config.ack_wait_s,
            max_deliver=-1,
            filter_subject=subjects.task_queue(tenant, self.config.provisioner_class),
            max_ack_pending=-1,
        )
        try:
            info = await self._add_consumer(config)
        except BadRequestError as err:
            if err.err_code != CONSUMER_EXISTS:
                raise
            info = await self.js.consumer_info(subjects.TASKS_STREAM, durable)
        # Keep claims alive by the queue's real ack_wait, which another provisioner may have set.
        ack_wait = info.config.ack_wait or self.config.ack_wait_s
        self._keepalive_s[tenant] = max(min(ack_wait, self.config.ack_wait_s) / 3, 0.05)

    async def _add_consumer(self, config: ConsumerConfig) -> ConsumerInfo:
        try:
            return await self.js.add_consumer(subjects.TASKS_STREAM, config)
        except NotFoundError as err:
            if err.err_code != STREAM_NOT_FOUND:
                raise
        # TASKS lives in memory (docs/decisions/0013): a restarted server lost it, queue and
        # all. Declared again here; the planners queue their lost attempts again themselves.
        await ensure_tasks_stream(self.js)
        return await self.js.add_consumer(subjects.TASKS_STREAM, config)

    # -- running and draining ---------------------------------------------------------------

    async def run(self) -> None:
        """Take and run tasks until drained; return when the last one in flight is done."""
        if not self.draining.is_set():
            missing = [t for t in self.config.tenants if t not in self._keepalive_s]
            for tenant in missing:
                await self._ensure_queue(tenant)
            await self.store.writer.publisher.start()  # claims sent from the read loop (`_claim_now`)
            pulls = []
            for tenant in self.config.tenants:
                durable = subjects.task_consumer(tenant, self.config.provisioner_class)
                pulls.append(RawPull(self.store.nc, subjects.TASKS_STREAM, durable, partial(self._accept, tenant=tenant)))
                await pulls[-1].start()
            self._pullers = [
                asyncio.create_task(self._pull(tenant, pull), name=f"pull-{tenant}")
                for tenant, pull in zip(self.config.tenants, pulls, strict=True)
            ]
            self._started = True
            try:
                await self.draining.wait()
            finally:
                for p in self._pullers:
                    p.cancel()
                await asyncio.gather(*self._pullers, return_exceptions=True)
                # Without its subscription a waiting pull request has no interest: the server
                # drops it, and the next task goes to another provisioner at once.
                for pull in pulls:
                    await pull.stop()
        self.stopped.set()
        await self.idle.wait()
        if self._side:
            await asyncio.gather(*self._side, return_exceptions=True)

    async def drain(self) -> None:
        """Take no new tasks; return when the ones in flight are finished."""
        self.draining.set()
        if self._started:
            await self.stopped.wait()
        await self.idle.wait()

    async def abort(self) -> None:
        """Stop at once, abandoning the tasks in flight (they come back after `ack_wait`):
        for tests that play a dying process, and for a shutdown that cannot wait."""
        self.draining.set()
        pending: list[asyncio.Future[Any]] = [*self._pullers, *self.running, *self.finishing, *self._side]
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def _pull(self, tenant: str, pull: RawPull) -> None:
        failures = 0
        # Not `while True`: `run` cancels this task when draining, but a cancel that lands
        # inside a pull can be lost (as the pull times out; Python 3.11's wait_for), and
        # the loop then pulled on and kept the drain waiting: about 1 in 20 runs of
        # tests/fault/test_found_bugs.py's cleanup test under load; none in 40 with this check.
        while not self.draining.is_set():
            await self._open.wait()
            await self._room.wait()
            want = min(self._want(), MAX_BATCH)
            if want <= 0:
                continue
            asked = asyncio.get_running_loop().time()
            try:
                # Each task goes to `_accept` as it arrives, from the connection's read loop.
                got = await pull.pull(want, FETCH_WAIT_S)
            except NatsTimeout:
                continue
            except Exception as err:  # noqa: BLE001 - the bus failed us: pause, then ask again
                failures += 1
                pause = min(0.5 * 2 ** (failures - 1), MAX_PAUSE_S)
                log.warning("task pull failed", tenant=tenant, error=str(err) or type(err).__name__, retry_in_s=pause)
                await self._pause(pause)
                if isinstance(err, (NotFoundError, ServiceUnavailableError)):  # deleted, or no leader yet
                    try:
                        await self._ensure_queue(tenant)
                    except Exception as again:  # noqa: BLE001 - the next fetch will tell
                        log.warning("task queue declaration failed", tenant=tenant, error=str(again) or type(again).__name__)
                continue
            if got:
                failures = 0
            elif asyncio.get_running_loop().time() - asked < FETCH_WAIT_S / 2:
                # A status ended the request early with nothing (no leader, a request cut):
                # do not ask again at once, or the loop would spin until the server is back.
                failures += 1
                pause = min(0.5 * 2 ** (failures - 1), MAX_PAUSE_S)
                log.warning("task pull ended empty", tenant=tenant, retry_in_s=pause)
                await self._pause(pause)

    async def _pause(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self.draining.wait(), seconds)
        except TimeoutError:
            pass

    def _accept(self, msg: Msg, *, tenant: str) -> None:
        slot = None if self.draining.is_set() or self._want() <= 0 else self.slots.take()
        self._update_open()
        if slot is None:
            # Draining, or two queues answered at once beyond capacity: back to the queue
            # now, for a provisioner that has room.
            self.passed += 1
            self._aside(self._settle(msg.nak()))
            return
        self.idle.clear()
        try:
            early = self._claim_now(msg, slot)
        except Exception:  # noqa: BLE001 - the task's coroutine decodes again and tells
            early = None
        task = asyncio.create_task(self._handle(msg, tenant, slot, early))
        self.running.add(task)

        def done(t: asyncio.Task[None]) -> None:
            self.running.discard(t)
            self.slots.give(slot)
            self._update_open()
            self._check_idle()

        task.add_done_callback(done)

    def _check_idle(self) -> None:
        if not self.running and not self.finishing:
            self.idle.set()

    def _aside(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run a fire-and-forget ack/nak, keeping a reference until it is done."""
        t = asyncio.ensure_future(coro)
        self._side.add(t)
        t.add_done_callback(self._side.discard)

    # -- one task ---------------------------------------------------------------------------

    def _claim_now(self, msg: Msg, slot: int) -> Early:
        """In the read loop, as the task arrives: decode it, build its claim and, when the
        writer is idle, put the claim on the wire at once (`GroupedAppends.append_now`), before
        the event loop comes round to the task's coroutine; else add it to the appends waiting
        for the next group (`GroupedAppends.submit`). Raises if the task is undecodable (the
        coroutine decodes it again, and terminates it)."""
        task = TaskMessage.model_validate_json(msg.data)
        delivery = _delivered(msg)
        if lets_go(task, self.config.provisioner_id, delivery, self.config):
            return Early(task, delivery, "", None, None)
        subject, claim = self._subject(task), self._claim(task, delivery, f"{self.config.provisioner_id}/w{slot}")
        return Early(task, delivery, subject, claim, self.store.submit(subject, claim))

    async def _handle(self, msg: Msg, tenant: str, slot: int, early: Early | None = None) -> None:
        if early is None:
            try:
                task = TaskMessage.model_validate_json(msg.data)
            except ValidationError as err:
                log.error("undecodable task terminated", error=str(err)[:500])
                await self._settle(msg.term())
                return
            delivery = _delivered(msg)
            early = Early(task, delivery, "", None, None)
            if not lets_go(task, self.config.provisioner_id, delivery, self.config):
                early.subject, early.claim = self._subject(task), self._claim(task, delivery, f"{self.config.provisioner_id}/w{slot}")
        task, delivery = early.task, early.delivery
        if early.claim is None:
            self.passed += 1
            log.info("task let go for another provisioner", task=task.task_id, attempt=task.attempt, delivery=delivery)
            await self._settle(msg.nak(delay=self.config.avoid_delay_s))
            return
        # In-progress acks from here until the ack: the claim stays ours while the plugin runs
        # and while its outcome is written.
        keepalive = KeepAlive(msg, self._keepalive_s.get(tenant, 1.0), self._aside)
        held = _key(task)
        self.holding.add(held)
        try:
            result = await self._claim_and_run(task, early.subject, early.claim, early.sent, f"{self.config.provisioner_id}/w{slot}")
            if result is None:
                # Claimed ahead, and no slot came free in time: back to the queue for a
                # provisioner with room (the claim stays in the log, as a dead worker's does).
                keepalive.cancel()
                self.holding.discard(held)
                self.passed += 1
                log.info("task claimed ahead let go: no free slot", task=task.task_id, attempt=task.attempt)
                await self._settle(msg.nak())
                return
        except Exception:
            # The bus or the log failed us (a plugin failure is an outcome, not an
            # exception): let the task come back rather than lose it.
            keepalive.cancel()
            self.holding.discard(held)
            log.exception("task handling failed; will be redelivered", task=task.task_id)
            await self._settle(msg.nak(delay=RETRY_DELAY_S))
            return
        # The plugin is done: its slot is free for the next task while the outcome is written.
        # No task of its own for that: the outcome's future calls back, and the ack goes out
        # with the others of its group (`Acks`).
        stored = self.store.submit(early.subject, Append(result, msg_id=f"{_key(task)}.outcome"))
        self.finishing.add(stored)
        if len(self.finishing) >= FINISHING_PER_SLOT * self.config.capacity:
            self._room.clear()
        stored.add_done_callback(partial(self._finished, msg, task, result, keepalive))

    @staticmethod
    async def _settle(ack: Awaitable[None]) -> None:
        try:
            await ack
        except Exception as err:  # noqa: BLE001 - lost with the connection: the server redelivers
            log.warning("ack failed", error=str(err) or type(err).__name__)

    def _subject(self, task: TaskMessage) -> str:
        """The task's events, with this provisioner's id last (only it may write there)."""
        return subjects.task_events(task.tenant, task.job_id, task.task_id, self.config.provisioner_id)

    def _claim(self, task: TaskMessage, delivery: int, worker: str) -> Append:
        claim = TaskClaimed(job_id=task.job_id, task_id=task.task_id, attempt=task.attempt,
                            provisioner=self.config.provisioner_id, worker=worker, delivery=delivery)
        return Append(claim, msg_id=f"{_key(task)}.claim.{delivery}")

    async def _claim_and_run(self, task: TaskMessage, subject: str, claim: Append, sent: asyncio.Future[int] | None,
                             worker: str) -> TaskSucceeded | TaskFailed | None:
        """The claim, stored before the plugin runs (`sent`: already on its way); then a
        plugin slot; then the plugin; returns the outcome event, or None if no slot came free
        in time (`AHEAD_WAIT_S`)."""
        if sent is not None:
            await sent
        else:
            await self.store.submit(subject, claim)
        if not await self._turn():
            return None
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            outcome = await self.executor.execute(task)
        finally:
            self._leave(loop.time() - started)
        if outcome.ok:
            return TaskSucceeded(
                job_id=task.job_id, task_id=task.task_id, attempt=task.attempt,
                provisioner=self.config.provisioner_id, worker=worker, result=outcome.result,
                ipaddresses=outcome.ipaddresses, hostname=outcome.hostname,
                stdout=trim_output(outcome.stdout), stderr=trim_output(outcome.stderr),
            )
        return TaskFailed(
            job_id=task.job_id, task_id=task.task_id, attempt=task.attempt,
            provisioner=self.config.provisioner_id, worker=worker, error=outcome.error or "failed",
            stdout=trim_output(outcome.stdout), stderr=trim_output(outcome.stderr),
        )

    def _finished(self, msg: Msg, task: TaskMessage, result: TaskSucceeded | TaskFailed, keepalive: KeepAlive,
                  stored: asyncio.Future[int]) -> None:
        """The outcome is stored (one per attempt: its key): ack. Or it is not (the log failed
        us): the task comes back and runs again. Or the worker was aborted: nothing."""
        keepalive.cancel()
        self.finishing.discard(stored)
        self.holding.discard(_key(task))
        if len(self.finishing) < FINISHING_PER_SLOT * self.config.capacity:
            self._room.set()
        if not stored.cancelled():
            err = stored.exception()
            if err is not None:
                log.error("outcome not recorded; will be redelivered", task=task.task_id, error=str(err) or type(err).__name__)
                self._aside(self._settle(msg.nak(delay=RETRY_DELAY_S)))
            else:
                settle(self.store.nc, msg.reply, ACK)
                self.completed += 1
                log.info("task finished", job=task.job_id, task=task.task_id, attempt=task.attempt, worker=result.worker,
                         ok=isinstance(result, TaskSucceeded))
        self._check_idle()

    # -- plugin slots -------------------------------------------------------------------------

    async def _turn(self) -> bool:
        """Take a plugin slot: at once if one is free and nobody waits, else in turn; False
        if none came within AHEAD_WAIT_S (only a task held beyond capacity can wait)."""
        while self._line and self._line[0].done():  # gave up (timed out, cancelled)
            self._line.popleft()
        if self._running < self.config.capacity and not self._line:
            self._running += 1
            return True
        loop = asyncio.get_running_loop()
        turn: asyncio.Future[bool] = loop.create_future()
        self._line.append(turn)
        timer = loop.call_later(AHEAD_WAIT_S, _resolve, turn, False)
        try:
            got = await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled() and turn.result():
                self._next()  # handed a slot in the same instant: pass it on
            raise
        finally:
            timer.cancel()
        if not got:
            self._ahead_ok = 0  # the slots turn over slowly: claim no more ahead
            self._update_open()
        return got

    def _leave(self, ran_s: float) -> None:
        """A plugin returned: its slot goes to the next task in line, or is free."""
        self._ahead_ok = min(self._ahead_ok + 1, self.ahead) if ran_s < SHORT_RUN_S else 0
        self._next()
        self._update_open()

    def _next(self) -> None:
        while self._line:
            turn = self._line.popleft()
            if not turn.done():  # (not given up: timed out or cancelled)
                turn.set_result(True)
                return
        self._running -= 1


@dataclass
class Early:
    """A task decoded (in the read loop, or in its coroutine), with its claim (None: a task let
    go for another provisioner) and, if it already went, the claim's acknowledgement."""

    task: TaskMessage
    delivery: int
    subject: str
    claim: Append | None
    sent: asyncio.Future[int] | None


def _delivered(msg: Msg) -> int:
    """The delivery count, from the reply subject (`$JS.ACK.<stream>.<consumer>.<delivered>...`,
    or with domain and account hash before the stream), without nats-py's whole metadata."""
    tokens = msg.reply.split(".")
    if len(tokens) == 9 and tokens[0] == "$JS":
        return int(tokens[4])
    if len(tokens) >= 11 and tokens[0] == "$JS":
        return int(tokens[6])
    return msg.metadata.num_delivered


def _resolve(future: asyncio.Future[bool], value: bool) -> None:
    if not future.done():
        future.set_result(value)


def _key(task: TaskMessage) -> str:
    return f"{task.job_id}.{task.task_id}.{task.attempt}"


class KeepAlive:
    """In-progress acks every `interval` seconds from a timer (no task, no loop), until cancelled."""

    def __init__(self, msg: Msg, interval: float, aside: Callable[[Coroutine[Any, Any, None]], None]) -> None:
        self.msg, self.interval, self.aside = msg, interval, aside
        self._timer: asyncio.TimerHandle | None = asyncio.get_running_loop().call_later(interval, self._ping)

    def _ping(self) -> None:
        self.aside(Workers._settle(self.msg.in_progress()))
        self._timer = asyncio.get_running_loop().call_later(self.interval, self._ping)

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
