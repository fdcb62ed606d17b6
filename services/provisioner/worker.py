"""The provisioner's worker runtime: tasks arrive as the bus delivers them.

One long-poll pull per (tenant, class) queue: `fetch()` waits on the server until at least one
task is there and returns at once when one arrives; no worker ever sleeps and asks again.
Capacity bounds the tasks in flight. While a task runs its claim is kept alive with
in-progress acks, so only a dead worker loses its task (which the server then redelivers to
another worker after `ack_wait`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Protocol

import structlog
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig
from nats.js.errors import BadRequestError
from pydantic import ValidationError

from contracts import subjects
from contracts.events import TaskClaimed, TaskFailed, TaskSucceeded
from contracts.tasks import TaskMessage, TaskOutcome, trim_output
from muster.bus.eventstore import Append, EventStore

log = structlog.get_logger("muster.provisioner")

FETCH_WAIT_S = 30.0


class Executor(Protocol):
    async def execute(self, task: TaskMessage) -> TaskOutcome: ...


@dataclass
class WorkerConfig:
    provisioner_id: str
    tenants: tuple[str, ...] = ("default",)
    provisioner_class: str = "default"
    capacity: int = 8
    ack_wait_s: float = 30.0


@dataclass
class Workers:
    js: JetStreamContext
    store: EventStore
    executor: Executor
    config: WorkerConfig
    running: set[asyncio.Task[None]] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.slots = asyncio.Semaphore(self.config.capacity)
        self.draining = asyncio.Event()
        self.idle = asyncio.Event()
        self.idle.set()
        self.completed = 0

    async def ensure_queues(self) -> None:
        for tenant in self.config.tenants:
            config = ConsumerConfig(
                durable_name=subjects.task_consumer(tenant, self.config.provisioner_class),
                ack_policy=AckPolicy.EXPLICIT,
                ack_wait=self.config.ack_wait_s,
                max_deliver=-1,
                filter_subject=subjects.task_queue(tenant, self.config.provisioner_class),
                max_ack_pending=-1,
            )
            try:
                await self.js.add_consumer(subjects.TASKS_STREAM, config)
            except BadRequestError as err:
                if err.err_code != 10148:  # exists with other settings: use it as it is
                    raise

    async def run(self) -> None:
        """Fetch and run tasks until drained."""
        await self.ensure_queues()
        pullers = [
            asyncio.create_task(self._pull(tenant), name=f"pull-{tenant}") for tenant in self.config.tenants
        ]
        await self.draining.wait()
        for p in pullers:
            p.cancel()
        await asyncio.gather(*pullers, return_exceptions=True)
        await self.idle.wait()

    async def drain(self) -> None:
        """Take no new tasks; return when the ones in flight are finished."""
        self.draining.set()
        await self.idle.wait()

    async def _pull(self, tenant: str) -> None:
        psub = await self.js.pull_subscribe_bind(
            durable=subjects.task_consumer(tenant, self.config.provisioner_class), stream=subjects.TASKS_STREAM
        )
        while not self.draining.is_set():
            await self.slots.acquire()
            free = 1
            while free < 256 and not self.slots.locked():
                await self.slots.acquire()
                free += 1
            try:
                msgs = await psub.fetch(batch=free, timeout=FETCH_WAIT_S)
            except NatsTimeout:
                msgs = []
            except Exception:
                for _ in range(free):
                    self.slots.release()
                raise
            for _ in range(free - len(msgs)):
                self.slots.release()
            for msg in msgs:
                self._start(msg)

    def _start(self, msg: Msg) -> None:
        self.idle.clear()
        task = asyncio.create_task(self._handle(msg))
        self.running.add(task)

        def done(t: asyncio.Task[None]) -> None:
            self.running.discard(t)
            self.slots.release()
            if not self.running:
                self.idle.set()

        task.add_done_callback(done)

    async def _handle(self, msg: Msg) -> None:
        try:
            task = TaskMessage.model_validate_json(msg.data)
        except ValidationError as err:
            log.error("undecodable task terminated", error=str(err)[:500])
            await msg.term()
            return
        try:
            await self._run(msg, task)
        except Exception:
            # The bus or the log failed us (a plugin failure is an outcome, not an
            # exception): let the task come back rather than lose it.
            log.exception("task handling failed; will be redelivered", task=task.task_id)
            await msg.nak(delay=1.0)

    async def _run(self, msg: Msg, task: TaskMessage) -> None:
        worker = f"{self.config.provisioner_id}/w{id(asyncio.current_task()) % 10000:04d}"
        bound = log.bind(job=task.job_id, task=task.task_id, attempt=task.attempt, action=task.action.value)
        subject = subjects.task_events(task.tenant, task.job_id, task.task_id)
        delivery = msg.metadata.num_delivered
        claim = TaskClaimed(job_id=task.job_id, task_id=task.task_id, attempt=task.attempt,
                            provisioner=self.config.provisioner_id, worker=worker, delivery=delivery)
        await self.store.append(subject, [Append(claim, msg_id=f"{task.job_id}.{task.task_id}.{task.attempt}.claim.{delivery}")])
        outcome = await self._run_keeping_claim(msg, task)
        if outcome.ok:
            result: TaskSucceeded | TaskFailed = TaskSucceeded(
                job_id=task.job_id, task_id=task.task_id, attempt=task.attempt,
                provisioner=self.config.provisioner_id, worker=worker, result=outcome.result,
                ipaddresses=outcome.ipaddresses, hostname=outcome.hostname,
                stdout=trim_output(outcome.stdout), stderr=trim_output(outcome.stderr),
            )
        else:
            result = TaskFailed(
                job_id=task.job_id, task_id=task.task_id, attempt=task.attempt,
                provisioner=self.config.provisioner_id, worker=worker, error=outcome.error or "failed",
                stdout=trim_output(outcome.stdout), stderr=trim_output(outcome.stderr),
            )
        await self.store.append(subject, [Append(result, msg_id=f"{task.job_id}.{task.task_id}.{task.attempt}.outcome")])
        await msg.ack()
        self.completed += 1
        bound.info("task finished", ok=outcome.ok)

    async def _run_keeping_claim(self, msg: Msg, task: TaskMessage) -> TaskOutcome:
        run = asyncio.ensure_future(self.executor.execute(task))
        interval = max(self.config.ack_wait_s / 3, 0.05)
        while True:
            # Wait on the task itself, with a deadline: on each deadline tell the server we
            # still hold the task.
            done, _ = await asyncio.wait({run}, timeout=interval)
            if done:
                return run.result()
            await msg.in_progress()
