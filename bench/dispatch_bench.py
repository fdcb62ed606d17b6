"""Provisioner dispatch benchmark: how fast a queued task reaches a worker and how many no-op
tasks go through, next to the raw JetStream figures of the same server in the same run.
Not a test: run it, read the table; `--write-docs` puts it into docs/benchmarks.md
("## Provisioner dispatch").

    .venv/bin/python bench/dispatch_bench.py [--samples 500] [--tasks 5000] [--in-flight 1000] [--write-docs]

What is measured (one nats-server of its own, `sync_interval: always`, a temp store; TASKS is
declared as shipped, on memory storage since decision 13; the raw queue is on file storage, the
baseline #16 was filed against):

- raw latency: `js.publish` of a 1 KB message on a work-queue stream -> received by a durable
  pull consumer waiting in nats-py's `fetch(16)`, one at a time (the workers read their pulls at the
  wire since #16.3, services/provisioner/pull.py: the raw figure is the standard client's).
- raw throughput: N messages published with `publish_async` while the consumer fetches (up to
  256 a time) and acks each; N / (last ack - first publish); run right before each provisioner
  run, because the machine (and its disk) is shared and the figures drift.
- dispatch latency: the task message published to TASKS (after which the planner has nothing
  more to do) -> its `TaskClaimed` seen in the log by a subscriber; one at a time, an idle
  provisioner of capacity 16. Raw and dispatch samples are taken in turn.
- one synced append: `EventStore.append` of one claim to the log, published -> acknowledged,
  taken in turn with the two above: what a claim costs on top of a raw pull (the task's own
  store and delivery are in both). Both go through nats-py (`fetch`, `js.publish`), whose
  per-message work the provisioner's wire pull and read-loop claim do not pay, so dispatch
  can come out below raw pull + append.
- task throughput: N tasks published as above -> each claimed (TaskClaimed appended), run by the
  `simulated` automator with no latency, outcome appended (TaskSucceeded), acked; N / (last
  outcome seen - first publish), for capacities 1, 4, 16 and 64, and for 1, 2 and 4 processes of
  capacity 16. The workers claim ahead as they do by default (`WorkerConfig.claim_ahead` =
  capacity: up to that many more tasks claimed and waiting for a slot). The subscriber that
  sees the outcomes reads them from the wire (`muster.bus.wire`), so that nats-py's per-message
  work does not take CPU from a provisioner in the same process; the latency subscriber is
  nats-py's, as before.
- in flight: 1,000 tasks of 5 s each on one provisioner of capacity 1,000 with a 2 s ack wait
  (so every claim lives on in-progress acks): all must run at once, none may fail or be
  delivered twice.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import re
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for `bench.goals` when run as a script

import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeout
from nats.js.api import AckPolicy, ConsumerConfig, RetentionPolicy, StorageType, StreamConfig

from bench import goals
from contracts import subjects
from contracts.events import TaskClaimed
from contracts.tasks import TaskMessage, TaskOutcome
from muster.bus.connect import connect
from muster.bus.eventstore import H_TYPE, Append, EventStore
from muster.bus.server import NatsServer
from muster.bus.streams import ensure_streams
from muster.bus.wire import raw_subscribe, raw_unsubscribe
from services.provisioner.heap import freeze_started_heap
from services.provisioner.plugins import PluginRegistry
from services.provisioner.plugins.testing import make_task
from services.provisioner.worker import WorkerConfig, Workers

DOCS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
SECTION = "## Provisioner dispatch"
PAYLOAD = 1024
DEADLINE_S = 300.0


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


# -- raw JetStream ----------------------------------------------------------------------------


async def raw_setup(nc: Client, name: str, storage: StorageType = StorageType.FILE) -> None:
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name=name, subjects=[f"{name.lower()}.>"], retention=RetentionPolicy.WORK_QUEUE,
                                     storage=storage))
    await js.add_consumer(name, ConsumerConfig(durable_name="c", ack_policy=AckPolicy.EXPLICIT, ack_wait=30,
                                               max_ack_pending=-1))


async def raw_consumer(nc: Client, name: str, on_msg: Callable[[Msg], Awaitable[None]], stop: asyncio.Event,
                       batch: int = 256) -> None:
    psub = await nc.jetstream().pull_subscribe_bind(durable="c", stream=name)
    while not stop.is_set():
        try:
            msgs = await psub.fetch(batch=batch, timeout=2)
        except (NatsTimeout, TimeoutError):  # nats-py raises either when nothing came
            continue
        for m in msgs:
            await on_msg(m)


async def raw_throughput(url: str, n: int, name: str, storage: StorageType = StorageType.FILE) -> float:
    pub, sub = await connect(url, name="raw-pub"), await connect(url, name="raw-sub")
    await raw_setup(pub, name, storage)
    done = asyncio.Event()
    count = 0
    last = 0.0

    async def on_msg(m: Msg) -> None:
        nonlocal count, last
        await m.ack()
        count += 1
        if count == n:
            last = time.perf_counter()
            done.set()

    stop = asyncio.Event()
    consumer = asyncio.create_task(raw_consumer(sub, name, on_msg, stop))
    js = pub.jetstream()
    body = b"x" * PAYLOAD
    start = time.perf_counter()
    for _ in range(n):
        await js.publish_async(f"{name.lower()}.x", body)
    await asyncio.wait_for(done.wait(), DEADLINE_S)
    stop.set()
    await asyncio.wait_for(consumer, 10)
    await pub.close()
    await sub.close()
    return n / (last - start)


async def log_appends(nc: Client, n: int, writers: int) -> float:
    """`EventStore.append` of a `TaskClaimed` to its own subject, `writers` at a time: what the
    log takes when every append waits for its fsync (a task needs two)."""
    store = EventStore(nc)
    event = TaskClaimed(job_id="j", task_id="t", attempt=1, provisioner="p", worker="w")
    gate = asyncio.Semaphore(writers)

    async def one(i: int) -> None:
        async with gate:
            await store.append(f"{subjects.EVT}.benchlog{writers}.task.j.t{i}", [Append(event, msg_id=f"benchlog{writers}.{i}")])

    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    return n / (time.perf_counter() - start)


# -- the provisioner --------------------------------------------------------------------------


@dataclass
class Counting:
    """The real plugin registry, noting the most plugins running at once (never more than
    capacity) and the most tasks the workers held (claimed, or claimed ahead and waiting for a
    slot: a no-op plugin returns at once, the appends around it take the time)."""

    registry: PluginRegistry
    in_flight: Callable[[], int] = lambda: 0
    held: Callable[[], int] = lambda: 0
    most: int = 0
    most_held: int = 0

    async def execute(self, task: TaskMessage) -> TaskOutcome:
        self.most = max(self.most, self.in_flight())
        self.most_held = max(self.most_held, self.held())
        return await self.registry.execute(task)


class Provisioner:
    """Workers with the real plugin registry, on a connection of their own; the process's heap
    frozen once they started, as `muster provisioner` does (services/provisioner/heap.py)."""

    def __init__(self, url: str, tenant: str, capacity: int, ack_wait_s: float = 30.0, index: int = 0) -> None:
        self.url, self.tenant, self.capacity, self.ack_wait_s, self.index = url, tenant, capacity, ack_wait_s, index

    async def __aenter__(self) -> Provisioner:
        self.nc = await connect(self.url, name=f"prov-{self.tenant}")
        self.registry = PluginRegistry.discover()
        self.executor = Counting(self.registry)
        config = WorkerConfig(provisioner_id=f"bench-{self.tenant}-{self.index}", tenants=(self.tenant,), capacity=self.capacity,
                              ack_wait_s=self.ack_wait_s)
        self.store = EventStore(self.nc)
        self.workers = Workers(self.nc.jetstream(), self.store, self.executor, config)
        self.executor.in_flight = lambda: self.workers.plugins_running
        self.executor.held = lambda: self.workers.in_flight
        await self.workers.ensure_queues()
        self.runner = asyncio.create_task(self.workers.run())
        freeze_started_heap()  # as `muster provisioner` does once started
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.workers.drain()
        await self.runner
        await self.registry.aclose()
        await self.nc.close()


class Observer:
    """Sees every event of a tenant's tasks as the log stores it (a core subscription)."""

    def __init__(self) -> None:
        self.claimed: dict[str, float] = {}
        self.claims = 0
        self.redelivered = 0
        self.succeeded = 0
        self.failed = 0
        self.last = 0.0
        self.waiting: tuple[int, asyncio.Event] | None = None
        self.claim_waiter: asyncio.Future[float] | None = None

    async def on_msg(self, msg: Msg) -> None:
        self.seen(time.perf_counter(), (msg.headers or {}).get(H_TYPE), msg.data)

    def on_raw(self, subject: bytes, reply: bytes, data: bytes, header_block: bytes) -> None:
        """The same from the wire (`muster.bus.wire`): no nats-py `Msg` and header parse for
        every event, whose CPU the provisioner in this process would share."""
        at = header_block.find(b"\r\n" + H_TYPE.encode() + b": ")
        kind = header_block[at + len(H_TYPE) + 4 : header_block.find(b"\r\n", at + 2)].decode() if at >= 0 else None
        self.seen(time.perf_counter(), kind, data)

    def seen(self, now: float, kind: str | None, data: bytes) -> None:
        if kind == "TaskClaimed":
            self.claims += 1
            if json.loads(data)["delivery"] != 1:
                self.redelivered += 1
            if self.claim_waiter is not None and not self.claim_waiter.done():
                self.claim_waiter.set_result(now)
        elif kind in ("TaskSucceeded", "TaskFailed"):
            if kind == "TaskSucceeded":
                self.succeeded += 1
            else:
                self.failed += 1
            self.last = now
            if self.waiting is not None and self.succeeded + self.failed >= self.waiting[0]:
                self.waiting[1].set()

    async def outcomes(self, n: int, timeout: float = DEADLINE_S) -> None:
        event = asyncio.Event()
        self.waiting = (n, event)
        if self.succeeded + self.failed >= n:
            return
        await asyncio.wait_for(event.wait(), timeout)


def tasks(tenant: str, n: int, **fields: str) -> list[tuple[str, bytes, dict[str, str]]]:
    out = []
    for i in range(n):
        t = make_task("install", service="svc", automator="simulated", action_fields=fields or None,
                      task_id=f"n{i}-install", tenant=tenant, cluster_id=f"c-{tenant}", node_id=f"n{i}")
        out.append((subjects.task_queue(tenant, "default"), t.model_dump_json().encode(),
                    {"Nats-Msg-Id": f"{t.job_id}.{t.task_id}.{t.attempt}"}))
    return out


async def observe(nc: Client, tenant: str, raw: bool = False) -> tuple[Observer, Any]:
    """A subscriber to the tenant's task events: through nats-py (latency: the figure's end
    point as it has always been measured), or from the wire (throughput: less CPU taken
    from the provisioner that runs in this process; the timing of the last outcome changes by
    a loop turn, not measurably over seconds)."""
    observer = Observer()
    if raw:
        sub = await raw_subscribe(nc, f"{subjects.EVT}.{tenant}.task.>", observer.on_raw)
    else:
        sub = await nc.subscribe(f"{subjects.EVT}.{tenant}.task.>", cb=observer.on_msg)
    await nc.flush()
    return observer, sub


async def latencies(url: str, nc: Client, samples: int) -> tuple[list[float], list[float], list[float]]:
    """Raw and dispatch latency, one sample of each in turn, so that both see the same load
    of a shared machine. Raw: publish -> a pull consumer waiting in `fetch(16)` has it.
    Dispatch: task published -> `TaskClaimed` seen (an idle provisioner of capacity 16).
    And a third in turn, the part of dispatch that raw JetStream does not pay: one synced
    append to the log (`EventStore.append` of a claim, published -> acknowledged)."""
    loop = asyncio.get_running_loop()
    raw_got: asyncio.Future[float] = loop.create_future()
    consumer_nc = await connect(url, name="raw-sub")
    await raw_setup(nc, "RAWLAT")

    async def on_raw(m: Msg) -> None:
        await m.ack()
        if not raw_got.done():
            raw_got.set_result(time.perf_counter())

    stop = asyncio.Event()
    consumer = asyncio.create_task(raw_consumer(consumer_nc, "RAWLAT", on_raw, stop, batch=16))
    tenant = "benchlat"
    observer, sub = await observe(nc, tenant)
    js = nc.jetstream()
    body = b"x" * PAYLOAD
    raw, dispatch, append = [], [], []
    store = EventStore(nc)
    async with Provisioner(url, tenant, capacity=16):
        for i, (subject, task, headers) in enumerate(tasks(tenant, samples + 20)):
            raw_got = loop.create_future()
            start = time.perf_counter()
            await js.publish("rawlat.x", body)
            raw_at = await asyncio.wait_for(raw_got, 10)

            observer.claim_waiter = loop.create_future()
            start2 = time.perf_counter()
            await js.publish(subject, task, headers=headers)
            claimed = await asyncio.wait_for(observer.claim_waiter, 10)
            await observer.outcomes(i + 1, 10)  # idle again before the next one

            claim = TaskClaimed(job_id="j", task_id=f"t{i}", attempt=1, provisioner="p", worker="w")
            start3 = time.perf_counter()
            await store.append(f"{subjects.EVT}.benchappend.task.j.t{i}", [Append(claim, msg_id=f"benchappend.{i}")])
            appended = time.perf_counter()
            if i >= 20:  # warm-up
                raw.append(raw_at - start)
                dispatch.append(claimed - start2)
                append.append(appended - start3)
    stop.set()
    await asyncio.wait_for(consumer, 10)
    await sub.unsubscribe()
    await consumer_nc.close()
    return raw, dispatch, append


@dataclass
class Throughput:
    rate: float
    observer: Observer
    most: int
    cpu_per_task: float
    """CPU seconds per task of the provisioners, and of this process (publisher, observer, and
    the provisioner when it runs here)."""
    group: float = 1.0
    """Claims and outcomes per append the provisioners sent (group commit, `muster.bus.appends`)."""
    most_held: int = 0


async def task_throughput(url: str, nc: Client, n: int, capacity: int) -> Throughput:
    """One provisioner of `capacity` in this process."""
    tenant = f"benchtput{capacity}x{time.perf_counter_ns() % 10**9}"
    observer, sub = await observe(nc, tenant, raw=True)
    js = nc.jetstream()
    batch = tasks(tenant, n)
    async with Provisioner(url, tenant, capacity=capacity) as prov:
        cpu = time.process_time()
        start = time.perf_counter()
        for subject, body, headers in batch:
            await js.publish_async(subject, body, headers=headers)
        await observer.outcomes(n)
        writes = prov.store.writer
        result = Throughput(n / (observer.last - start), observer, prov.executor.most, (time.process_time() - cpu) / n,
                            writes.events / max(writes.sent, 1), prov.executor.most_held)
    await raw_unsubscribe(nc, sub)
    return result


async def process_throughput(url: str, nc: Client, n: int, processes: int, capacity: int) -> Throughput:
    """`processes` provisioners of `capacity`, each a process of its own (`--serve`), on one queue."""
    tenant = f"benchproc{processes}x{time.perf_counter_ns() % 10**9}"
    children = [
        await asyncio.create_subprocess_exec(sys.executable, __file__, "--serve", url, tenant, str(capacity), str(i),
                                             stdout=asyncio.subprocess.PIPE)
        for i in range(processes)
    ]
    try:
        for child in children:  # each says when its queue is declared and it pulls
            assert child.stdout is not None
            line = await asyncio.wait_for(child.stdout.readline(), 60)
            if line.strip() != b"ready":
                raise RuntimeError(f"a provisioner process did not start: {line!r}")
        observer, sub = await observe(nc, tenant, raw=True)
        js = nc.jetstream()
        batch = tasks(tenant, n)
        cpu = time.process_time()
        start = time.perf_counter()
        for subject, body, headers in batch:
            await js.publish_async(subject, body, headers=headers)
        await observer.outcomes(n)
        rate, mine = n / (observer.last - start), time.process_time() - cpu
        await raw_unsubscribe(nc, sub)
    finally:
        for child in children:
            if child.returncode is None:
                child.send_signal(signal.SIGTERM)
    stats = [json.loads((await child.communicate())[0].decode().strip().splitlines()[-1]) for child in children]
    return Throughput(rate, observer, max(s["most"] for s in stats), (mine + sum(s["cpu"] for s in stats)) / n,
                      sum(s["events"] for s in stats) / max(sum(s["sent"] for s in stats), 1), max(s["held"] for s in stats))


async def serve(url: str, tenant: str, capacity: int, index: int) -> None:
    """A provisioner process for `process_throughput`: until SIGTERM, then its figures as JSON."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING), cache_logger_on_first_use=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with Provisioner(url, tenant, capacity=capacity, index=index) as prov:
        print("ready", flush=True)
        cpu = time.process_time()
        await stop.wait()
        cpu = time.process_time() - cpu
        writes = prov.store.writer
        stats = {"cpu": cpu, "most": prov.executor.most, "held": prov.executor.most_held, "sent": writes.sent,
                 "events": writes.events}
    print(json.dumps(stats), flush=True)


async def in_flight(url: str, nc: Client, n: int, seconds: float) -> tuple[float, Observer, int]:
    tenant = "benchinflight"
    observer, sub = await observe(nc, tenant)
    js = nc.jetstream()
    batch = tasks(tenant, n, latency_ms=str(int(seconds * 1000)))
    async with Provisioner(url, tenant, capacity=n, ack_wait_s=2.0) as prov:
        start = time.perf_counter()
        for subject, body, headers in batch:
            await js.publish_async(subject, body, headers=headers)
        await observer.outcomes(n)
        wall = observer.last - start
        most = prov.executor.most
    await sub.unsubscribe()
    return wall, observer, most


# -- report -----------------------------------------------------------------------------------


def verdict(ok: bool) -> str:
    return "meets" if ok else "**misses**"


CAPACITIES = (1, 4, 16, 64)
PROCESSES = (1, 2, 4)
PIPELINE_GOAL = 0.5
"""No-op tasks/s at capacity 16 against raw publish + fetch + ack (#16)."""
LATENCY_GOAL = 1.5
"""Dispatch latency p50 against a raw pull (#16)."""


async def run(args: argparse.Namespace) -> tuple[str, list[goals.Goal]]:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING), cache_logger_on_first_use=True)
    with tempfile.TemporaryDirectory(prefix="muster-dispatch-bench-") as scratch:
        tmp = args.data_dir or scratch
        async with NatsServer(Path(tmp) / "nats", name="dispatch-bench") as server:
            nc = await connect(server.url, name="bench")
            await ensure_streams(nc.jetstream())
            print(f"nats-server on {server.url}, store {tmp}", file=sys.stderr)

            raw_lat, lat, append_lat = await latencies(server.url, nc, args.samples)
            print(f"latency p50: raw {ms(pct(raw_lat, .5))}, dispatch {ms(pct(lat, .5))}, append {ms(pct(append_lat, .5))}",
                  file=sys.stderr)
            # A raw run right before each provisioner run: the machine (and its disk) is shared,
            # and the figures drift by more than the effects measured.
            rows: list[tuple[str, Throughput, float]] = []
            for capacity in CAPACITIES:
                raw = await raw_throughput(server.url, args.tasks, f"RAWC{capacity}")
                t = await task_throughput(server.url, nc, args.tasks, capacity)
                rows.append((f"capacity {capacity}, 1 process", t, raw))
                print(f"capacity {capacity}: {t.rate:,.0f}/s, raw {raw:,.0f}/s", file=sys.stderr)
            for procs in PROCESSES:
                raw = await raw_throughput(server.url, args.tasks, f"RAWP{procs}")
                t = await process_throughput(server.url, nc, args.tasks, procs, 16)
                rows.append((f"{procs} provisioner process{'es' if procs > 1 else ''} of capacity 16", t, raw))
                print(f"{procs} processes: {t.rate:,.0f}/s, raw {raw:,.0f}/s", file=sys.stderr)
            appends = await log_appends(nc, args.tasks, 16)
            print(f"log appends, 16 writers: {appends:,.0f}/s", file=sys.stderr)
            wall, seen, at_once = await in_flight(server.url, nc, args.in_flight, args.task_seconds)
            print(f"in flight: {at_once} at once, {wall:.1f} s", file=sys.stderr)
            await nc.close()

    p50_ratio = pct(lat, .5) / pct(raw_lat, .5)
    at16 = next(t.rate / raw for name, t, raw in rows if name == "capacity 16, 1 process")
    goal_list = [
        goals.Goal("dispatch latency p50 / raw pull p50", round(p50_ratio, 2), "<=", LATENCY_GOAL, "x"),
        goals.Goal("no-op tasks/s at capacity 16 / raw publish+fetch+ack", round(at16, 2), ">=", PIPELINE_GOAL, "x"),
    ]
    cpus = os.cpu_count()
    lines = [
        SECTION,
        "",
        f"`bench/dispatch_bench.py` (`.venv/bin/python bench/dispatch_bench.py --write-docs`), "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, load average at the end {' / '.join(f'{x:.1f}' for x in os.getloadavg())}. "
        f"One nats-server of its own (`sync_interval: always`, temp dir; the log on file storage, TASKS on memory storage "
        f"as shipped since decision 13, the raw work queue on file storage as in every run since #16 was filed: "
        f"`bench/tasks_storage_bench.py` shows both storages and both raw queues); the provisioner in this Python "
        f"process, or in processes of their own; {platform.python_implementation()} {platform.python_version()}, "
        f"{platform.machine()}, {cpus} CPUs shared with the server and, while measuring, with other jobs. Logging at "
        "WARNING. Raw figures are from the same server in the same run.",
        "",
        "| what | provisioner | raw JetStream | ratio | goal |",
        "|---|---|---|---|---|",
        f"| dispatch latency p50: task published to TASKS -> `TaskClaimed` in the log | {ms(pct(lat, .5))} | "
        f"{ms(pct(raw_lat, .5))} (publish -> pull consumer has it) | {p50_ratio:.1f}x | {goal_list[0].verdict()} |",
        f"| dispatch latency p99 | {ms(pct(lat, .99))} | {ms(pct(raw_lat, .99))} | "
        f"{pct(lat, .99) / pct(raw_lat, .99):.1f}x | |",
        f"| one synced log append p50 (`EventStore.append` of a claim through nats-py: published -> acknowledged; "
        f"what a claim adds to a raw pull) | | {ms(pct(append_lat, .5))} | (raw pull + append) / raw pull = "
        f"{(pct(raw_lat, .5) + pct(append_lat, .5)) / pct(raw_lat, .5):.1f}x | |",
    ]
    for name, t, raw in rows:
        ratio = t.rate / raw
        goal = goal_list[1].verdict() if name == "capacity 16, 1 process" else ""
        lines.append(
            f"| no-op tasks/s, {name} ({args.tasks:,} tasks; claim, run, outcome, ack) | {t.rate:,.0f} | "
            f"{raw:,.0f} (publish + fetch + ack, the run just before) | 1/{1 / ratio:.1f} | {goal} |"
        )
    lines.append(
        f"| log appends/s, 16 writers (`EventStore.append` one event each, each waiting for its fsync) | | "
        f"{appends:,.0f} | | |"
    )
    ok_flight = seen.succeeded == args.in_flight and seen.failed == 0 and seen.redelivered == 0 and at_once == args.in_flight
    lines += [
        f"| {args.in_flight:,} tasks of {args.task_seconds:g} s at once, capacity {args.in_flight:,}, ack wait 2 s | "
        f"{at_once:,} ran at once; {seen.succeeded:,} succeeded, {seen.failed} failed, {seen.redelivered} redelivered; "
        f"all done in {wall:.1f} s | | | no errors: {verdict(ok_flight)} |",
        "",
        f"Samples: {args.samples} latencies each (after 20 warm-up; one raw, one dispatch and one append sample in turn), "
        f"{args.tasks:,} tasks per throughput row, 1 KB raw messages (a task message is about 1 KB).",
        "",
        "| throughput row | failed or redelivered | most tasks held (claimed, running or waiting for a slot) / "
        "plugins running at once (per process) | claims and outcomes per append "
        "(group commit) | CPU per task (provisioners + publisher and observer) |",
        "|---|---|---|---|---|",
    ]
    for name, t, _ in rows:
        lines.append(f"| {name} | {t.observer.failed + t.observer.redelivered} | {t.most_held} / {t.most} | {t.group:.1f} | "
                     f"{t.cpu_per_task * 1e6:.0f} µs |")
    lines.append("")
    return "\n".join(lines), goal_list


def write_docs(section: str) -> None:
    """Replace this benchmark's section, or put it after "## Provisioner plugins"."""
    text = DOCS.read_text(encoding="utf-8") if DOCS.exists() else "# Benchmarks\n"
    pattern = re.compile(rf"^{re.escape(SECTION)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text, count=1)
    else:
        plugins = text.find("## Provisioner plugins")
        after = text.find("\n## ", plugins + 1) if plugins >= 0 else -1
        if after >= 0:
            text = text[: after + 1] + section + "\n" + text[after + 1 :]
        else:
            text = text.rstrip("\n") + "\n\n" + section
    DOCS.write_text(text, encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=500, help="latency samples")
    parser.add_argument("--tasks", type=int, default=5000, help="tasks per throughput run")
    parser.add_argument("--in-flight", type=int, default=1000, help="tasks at once on one provisioner")
    parser.add_argument("--task-seconds", type=float, default=5.0, help="length of each of those tasks")
    parser.add_argument("--data-dir", default=None, help="keep the server's store and log here (default: a temp dir)")
    parser.add_argument("--write-docs", action="store_true", help=f"replace '{SECTION}' in docs/benchmarks.md")
    parser.add_argument("--serve", nargs=4, metavar=("URL", "TENANT", "CAPACITY", "INDEX"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:  # a provisioner process of process_throughput
        url, tenant, capacity, index = args.serve
        asyncio.run(serve(url, tenant, int(capacity), int(index)))
        return
    section, goal_list = asyncio.run(run(args))
    print(section)
    print(goals.line(goal_list))
    if args.write_docs:
        write_docs(section)
        print(f"written to {DOCS}", file=sys.stderr)


if __name__ == "__main__":
    main()
