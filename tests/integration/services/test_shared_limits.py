"""Concurrency limits hold across planners: three `muster planner` processes on a real
nats-server, each acting for its share of the shards, keep one provider's `maxconcurrent` and one
`--tenant-limit` together (each limit's budget is a KV value changed by compare-and-set:
docs/decisions/0029-shared-budget.md). Without the shared budget each planner would allow the
limit over its own clusters: three times as many.

In flight is measured on the log's own order: from an attempt's `TaskQueued` to the planner's
record of its outcome (`TaskCompleted` / `TaskAttemptFailed`), which comes before the slot is
given back, which comes before another planner may take it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack
from typing import Any

import pytest
import pytest_asyncio
from nats.aio.client import Client

from contracts import subjects
from contracts.commands import Accepted, CreateCluster
from contracts.events import JobSucceeded
from muster.bus import shards
from muster.bus.connect import connect
from muster.bus.eventstore import EventStore
from muster.bus.streams import ensure_streams
from muster.bus.wire import stop_watch
from muster.catalog.store import apply_catalog
from muster.client import MusterClient
from services.planner.domain import planning
from services.planner.domain.limits import PROVIDER_ACTIONS
from services.provisioner.entrypoint import start_workers
from services.provisioner.plugins import PluginRegistry
from services.provisioner.worker import WorkerConfig
from services.solver.entrypoint import start_solver

from .conftest import quick_demo_catalog

pytestmark = [pytest.mark.nats, pytest.mark.timeout(120)]
T = "default"
SHARDS = 6
PLANNERS = ("planner-1", "planner-2", "planner-3")
MAXCONCURRENT = 2
TENANT_LIMIT = 3


@contextlib.contextmanager
def planners(url: str, names: tuple[str, ...] = PLANNERS, shard_count: int = SHARDS,
             more: tuple[str, ...] = ("--tenant-limit", str(TENANT_LIMIT))) -> Iterator[list[subprocess.Popen[bytes]]]:
    """`muster planner` processes, stopped (by their pids) on the way out."""
    procs = [subprocess.Popen([sys.executable, "-m", "muster", "planner", "--nats-url", url, "--instance", name,
                               "--shards", str(shard_count), *more],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ.copy())
             for name in names]
    try:
        yield procs
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@pytest_asyncio.fixture
async def nc(fresh_nats: str) -> AsyncIterator[Client]:
    async with AsyncExitStack() as stack:
        conns = []
        for name in ("solver", "provisioner", "test"):
            conn = await connect(fresh_nats, name=name)
            stack.push_async_callback(conn.close)
            conns.append(conn)
        await ensure_streams(conns[0].jetstream())
        await start_solver(conns[0], stack, "solver")
        registry = PluginRegistry.discover()
        stack.push_async_callback(registry.aclose)
        await start_workers(conns[1], stack, registry, WorkerConfig(provisioner_id="prov", capacity=16))
        yield conns[2]


class Leases:
    """Shard -> planner, from a watch of the leases bucket made before any planner starts (no
    polling). A watch, not a subscription to `$KV.leases.shard.*`: a core subscriber also sees
    the writes the stream refused (a take that lost its compare-and-set, a late renewal), and
    one of those seen last named an owner that never held the shard."""

    def __init__(self, names: tuple[str, ...] = PLANNERS, count: int = SHARDS) -> None:
        self.names, self.count = names, count
        self.owners: dict[int, str] = {}
        self.split = asyncio.Event()

    @contextlib.asynccontextmanager
    async def follow(self, nc: Client) -> AsyncIterator[None]:
        watcher = await (await shards.leases_bucket(nc.jetstream())).watch("shard.*")
        task = asyncio.create_task(self._read(watcher))
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await stop_watch(watcher)

    async def _read(self, watcher: Any) -> None:
        async for entry in watcher:
            if entry is None:  # the bucket's state so far has been delivered
                continue
            self.owners = shards.owners_after(self.owners, entry)
            held = Counter(self.owners.values())
            if set(held) == set(self.names) and set(held.values()) == {self.count // len(self.names)}:  # each its fair share
                self.split.set()


def requests_on_every_planner(owners: dict[int, str], per_planner: int) -> list[str]:
    """Request ids whose new clusters land `per_planner` on each planner's shards."""
    picked: dict[str, list[str]] = {p: [] for p in PLANNERS}
    n = 0
    while any(len(v) < per_planner for v in picked.values()):
        rid = f"shared-{n}"
        owner = owners[shards.shard_of(planning.created_ids(T, rid)[1], SHARDS)]
        if len(picked[owner]) < per_planner:
            picked[owner].append(rid)
        n += 1
    return [rid for rids in picked.values() for rid in rids]


def most_at_once(history: list[tuple[int, str, str]], counted: set[str]) -> int:
    """The most attempts of the `counted` actions in flight at once, in the log's order."""
    action: dict[str, str] = {}
    now = peak = 0
    for _, kind, attempt in sorted(history):
        if kind == "queued":
            action[attempt] = attempt.split("|")[1]
            now += action[attempt] in counted
        elif attempt in action:
            now -= action.pop(attempt) in counted
        peak = max(peak, now)
    return peak


async def test_three_planners_keep_a_provider_limit_and_a_tenant_limit_together(nc: Client, fresh_nats: str) -> None:
    catalog = quick_demo_catalog("60-120")
    catalog.providers["sim"] = catalog.providers["sim"].model_copy(update={"maxconcurrent": MAXCONCURRENT})
    store = EventStore(nc)
    await apply_catalog(store, T, catalog)
    leases = Leases()
    async with leases.follow(nc):
        with planners(fresh_nats) as procs:
            await asyncio.wait_for(leases.split.wait(), 60)
            await _run(nc, store, leases.owners)
            for p in procs:
                assert p.poll() is None, "a planner died"


async def _where(nc: Client, store: EventStore, replies: list[Accepted]) -> str:
    """What a stuck run looks like: each job's last event and the budgets (a slot never given
    back would show here)."""
    last = {r.job_id[:8]: (await store.read(subjects.job_events(T, r.job_id)))[-1].type for r in replies}
    kv = await nc.jetstream().key_value("budgets")
    budgets = {key: (await kv.get(key)).value for key in await kv.keys()}
    return f"jobs {last}; budgets {budgets}"


async def _run(nc: Client, store: EventStore, owners: dict[int, str]) -> None:
    client = MusterClient(nc)
    replies = []
    for rid in requests_on_every_planner(owners, 2):
        reply = await client.request(CreateCluster(name=rid, template="hadoop-small", nodes=2, services=["base"], request_id=rid),
                                     tenant=T)
        assert isinstance(reply, Accepted), reply
        replies.append(reply)
    try:
        finals = await asyncio.gather(*(client.wait(r.job_id, T, timeout=90) for r in replies))
    except TimeoutError:
        raise AssertionError(f"not every job ended within 90 s: {await _where(nc, store, replies)}") from None
    assert all(isinstance(f, JobSucceeded) for f in finals), finals

    history: list[tuple[int, str, str]] = []
    drivers = set()
    for r in replies:
        events = await store.read_many(subjects.job_filters(T, r.job_id))
        drivers.add(events[0].event.planner)
        actions = {e.event.task_id: e.event.action.value for e in events if e.type == "TaskQueued"}
        for e in events:
            if e.type in ("TaskQueued", "TaskCompleted", "TaskAttemptFailed"):
                attempt = f"{r.job_id}.{e.event.task_id}.{e.event.attempt}|{actions[e.event.task_id]}"
                history.append((e.seq, "queued" if e.type == "TaskQueued" else "done", attempt))
    assert drivers == set(PLANNERS)  # each planner drove two of the six jobs
    every_action = {a for _, _, attempt in history for a in [attempt.split("|")[1]]}
    # 24 provider tasks and 72 in all wanted to go: one planner alone would allow 2 and 3 of its own.
    assert most_at_once(history, {a.value for a in PROVIDER_ACTIONS}) == MAXCONCURRENT
    assert most_at_once(history, every_action) == TENANT_LIMIT
    budgets = await (await nc.jetstream().key_value("budgets")).get(f"provider.{T}.sim")
    assert budgets.value == b"{}"  # every slot given back
