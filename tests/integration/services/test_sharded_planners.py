"""Planners share the clusters (#14.1), in one event loop on a server of the test's own: each
acts for its shards, requests reach the owner wherever they arrive, a dead planner's jobs
finish under the other, a stopped planner's shards move at once, a stale planner is fenced."""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field

import pytest
import pytest_asyncio
from nats.aio.client import Client

from contracts import subjects
from contracts.commands import Accepted, ApplyPlan, CreateCluster, DryRun, RestartServices
from contracts.events import JobSucceeded
from muster.bus.connect import connect, principal_of
from muster.bus.eventstore import EventStore
from muster.bus.shards import shard_of
from muster.bus.streams import ensure_streams
from muster.catalog.store import apply_catalog
from muster.client import MusterClient
from muster.ports.eventlog import ConcurrencyError
from services.planner.app import Planner, PlannerConfig
from services.planner.entrypoint import nats_planner, start_planner
from services.provisioner.entrypoint import start_workers
from services.provisioner.plugins import PluginRegistry
from services.provisioner.worker import WorkerConfig
from services.solver.entrypoint import start_solver
from tests.integration.lease_history import LAPSED, RELEASED, lease_history

from .conftest import quick_demo_catalog

pytestmark = [pytest.mark.nats, pytest.mark.timeout(180)]
SHARDS = 8
TTL = 2.0


@dataclass
class Fleet:
    url: str
    client: MusterClient
    store: EventStore
    planners: dict[str, Planner] = field(default_factory=dict)
    stacks: dict[str, AsyncExitStack] = field(default_factory=dict)
    conns: dict[str, Client] = field(default_factory=dict)

    async def start(self, name: str) -> Planner:
        self.conns[name] = nc = await connect(self.url, name=name)
        self.stacks[name] = stack = AsyncExitStack()
        self.planners[name] = await start_planner(nc, stack, PlannerConfig(
            instance=name, shards=SHARDS, lease_ttl_s=TTL, ack_wait_s=1.0, task_timeout_s=60))
        return self.planners[name]

    async def stop(self, name: str) -> None:
        await self.stacks.pop(name).aclose()
        await self.conns.pop(name).close()
        self.planners.pop(name)

    async def kill(self, name: str) -> None:
        """As close to kill -9 as one process allows."""
        planner = self.planners.pop(name)
        planner.timers.cancel_all()
        await planner.ownership.leases.abort()  # type: ignore[attr-defined]
        await self.conns.pop(name).close()
        self.stacks.pop(name)


@pytest_asyncio.fixture
async def fleet(fresh_nats: str) -> AsyncIterator[Fleet]:
    async with AsyncExitStack() as stack:
        ncs = []
        for name in ("solver", "provisioner", "client"):
            nc = await connect(fresh_nats, name=name)
            ncs.append(nc)
            stack.push_async_callback(nc.close)
        await ensure_streams(ncs[0].jetstream())
        await start_solver(ncs[0], stack, "solver")
        registry = PluginRegistry.discover()
        stack.push_async_callback(registry.aclose)
        await start_workers(ncs[1], stack, registry, WorkerConfig(provisioner_id="prov", capacity=16))
        store = EventStore(ncs[2])
        await apply_catalog(store, "default", quick_demo_catalog("50-150"))
        fleet = Fleet(fresh_nats, MusterClient(ncs[2]), store)
        try:
            yield fleet
        finally:
            for name in list(fleet.stacks):
                await fleet.stop(name)


async def _creates(fleet: Fleet, n: int, prefix: str) -> list[Accepted]:
    replies = [await fleet.client.request(CreateCluster(name=f"{prefix}{i}", template="hadoop-small", nodes=2), tenant="default")
               for i in range(n)]
    assert all(isinstance(r, Accepted) for r in replies), replies
    return replies  # type: ignore[return-value]


async def _creates_on_both(fleet: Fleet, prefix: str, n: int = 6) -> list[Accepted]:
    """`n` creates once the two planners hold half the shards each, then more until each owns
    one: shards follow a hash of the new cluster's id, so a few can all land on one side."""
    await _until_held(fleet.planners["planner-a"], SHARDS // 2, 10)
    await _until_held(fleet.planners["planner-b"], SHARDS // 2, 10)
    replies = await _creates(fleet, n, prefix)
    while len({_owner(fleet, r.cluster_id) for r in replies}) < 2 and len(replies) < 24:
        replies += await _creates(fleet, 1, f"{prefix}x{len(replies)}")
    return replies


async def _queued_twice(fleet: Fleet, job_id: str) -> int:
    history = await fleet.store.read_many(subjects.job_filters("default", job_id))
    counts = Counter((r.event.task_id, r.event.attempt) for r in history if r.type == "TaskQueued")
    return sum(c > 1 for c in counts.values())


async def _until_held(planner: Planner, count: int, timeout: float) -> None:
    """Wait, woken by the lease watch, until the planner holds `count` shards."""
    leases = planner.ownership.leases  # type: ignore[attr-defined]
    async with leases._changed:
        await asyncio.wait_for(leases._changed.wait_for(lambda: len(leases.held) == count), timeout)


async def _moved_to_b(fleet: Fleet, end: Callable[[str], Awaitable[None]]) -> dict[int, str | None]:
    """planner-a ended by `end` (`Fleet.kill` or `Fleet.stop`), once planner-b holds every
    shard: what ended each lease planner-a held before planner-b took it (lease_history.py)."""
    async with lease_history(fleet.client.nc.jetstream()) as history:
        held = set(fleet.planners["planner-a"].ownership.leases.held)  # type: ignore[attr-defined]
        await end("planner-a")
        await _until_held(fleet.planners["planner-b"], SHARDS, 30)
        return await history.taken(held, "planner-b", 30)


async def _all_succeeded_once(fleet: Fleet, replies: list[Accepted]) -> None:
    finals = await asyncio.gather(*(fleet.client.wait(r.job_id, timeout=90) for r in replies))
    assert all(isinstance(f, JobSucceeded) for f in finals), finals
    assert [await _queued_twice(fleet, r.job_id) for r in replies] == [0] * len(replies)  # no task sent twice


def _owner(fleet: Fleet, cluster_id: str) -> str:
    [name] = [n for n, p in fleet.planners.items() if p.ownership.leases.owns_cluster(cluster_id)]  # type: ignore[attr-defined]
    return name


async def test_planners_split_the_shards_and_requests_reach_the_owner(fleet: Fleet) -> None:
    a = await fleet.start("planner-a")
    b = await fleet.start("planner-b")
    await _until_held(a, SHARDS // 2, 10)
    await _until_held(b, SHARDS // 2, 10)
    replies = await _creates_on_both(fleet, "c", 8)
    # What an operator sees: `muster planners`.
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "muster", "planners", "--json", "--nats-url", fleet.url,
                                                stdout=asyncio.subprocess.PIPE)
    table = json.loads((await proc.communicate())[0])
    assert table["shards"] == SHARDS and table["unowned"] == []
    assert {n: len(s) for n, s in table["planners"].items()} == {"planner-a": SHARDS // 2, "planner-b": SHARDS // 2}
    finals = await asyncio.gather(*(fleet.client.wait(r.job_id, timeout=90) for r in replies))
    assert all(isinstance(f, JobSucceeded) for f in finals)
    owners = {r.cluster_id: _owner(fleet, r.cluster_id) for r in replies}
    assert set(owners.values()) == {"planner-a", "planner-b"}  # new clusters spread over both
    for r in replies:  # each job was recorded by the owner of its cluster's shard, and only it has it
        requested = (await fleet.store.read(subjects.job_events("default", r.job_id)))[0].event
        assert requested.planner == owners[r.cluster_id]
        assert [n for n, p in fleet.planners.items() if r.job_id in p.jobs] == [owners[r.cluster_id]]
        # The job's owner answers status queries, naming itself.
        view = await fleet.client.nc.request(subjects.job_query("default", principal_of(fleet.client.nc), r.job_id), b"", timeout=5)
        assert b'"owner": "' + owners[r.cluster_id].encode() in view.data

    # A saved plan's apply names no cluster: it reaches the owner of the plan's, whichever
    # planner takes it (each apply sent three times: the same job).
    for owner in ("planner-a", "planner-b"):
        cluster_id = next(c for c, o in owners.items() if o == owner)
        dry = await fleet.client.request(RestartServices(cluster_id=cluster_id, dry_run=True), tenant="default")
        assert isinstance(dry, DryRun) and dry.plan_id, dry
        applied = [await fleet.client.request(ApplyPlan(plan_id=dry.plan_id), tenant="default") for _ in range(3)]
        accepted = [a for a in applied if isinstance(a, Accepted)]
        assert len(accepted) == 3 and len({a.job_id for a in accepted}) == 1, applied
        assert isinstance(await fleet.client.wait(accepted[0].job_id, timeout=90), JobSucceeded)
    # A create's plan: its cluster is the one it makes (derived from the dry run's job).
    dry = await fleet.client.request(CreateCluster(name="planned", template="hadoop-small", nodes=2, dry_run=True), tenant="default")
    assert isinstance(dry, DryRun) and dry.plan_id, dry
    made = [await fleet.client.request(ApplyPlan(plan_id=dry.plan_id), tenant="default") for _ in range(3)]
    assert all(isinstance(m, Accepted) for m in made) and len({m.cluster_id for m in made if isinstance(m, Accepted)}) == 1, made


async def test_a_dead_planners_jobs_finish_under_the_other_once_its_leases_expired(fleet: Fleet) -> None:
    await fleet.start("planner-a")
    await fleet.start("planner-b")
    replies = await _creates_on_both(fleet, "d")
    victims = [r for r in replies if _owner(fleet, r.cluster_id) == "planner-a"]
    assert victims
    # Mid-job: wait for a first outcome of a victim's job, then kill its planner.
    async for r in fleet.client.events(victims[0].job_id):
        if r.type == "TaskCompleted":
            break
    ended = await _moved_to_b(fleet, fleet.kill)
    # Taken once the server had expired each lease (its marker), not before; it was timed
    # (within 2 TTLs of the kill), which a loaded machine's scheduling could outlast.
    assert set(ended.values()) == {LAPSED}, ended
    await _all_succeeded_once(fleet, replies)
    view = await fleet.client.nc.request(subjects.job_query("default", principal_of(fleet.client.nc), victims[0].job_id), b"", timeout=5)
    assert b'"owner": "planner-b"' in view.data  # the owner followed


async def test_a_graceful_stop_moves_the_shards_without_waiting_for_the_ttl(fleet: Fleet) -> None:
    await fleet.start("planner-a")
    await fleet.start("planner-b")
    replies = await _creates_on_both(fleet, "g")
    assert any(_owner(fleet, r.cluster_id) == "planner-a" for r in replies)
    ended = await _moved_to_b(fleet, fleet.stop)
    # Without waiting for the TTL: each lease deleted by planner-a before planner-b took it (it
    # was timed: within one TTL of 2 s, which a loaded machine's scheduling could outlast).
    assert set(ended.values()) == {RELEASED}, ended
    await _all_succeeded_once(fleet, replies)


async def test_a_planner_that_wrongly_believes_it_owns_a_cluster_is_fenced_by_the_log(fleet: Fleet) -> None:
    """The lease decides who acts; should two ever act at once, expected-sequence appends let
    only one of them record anything."""
    await fleet.start("planner-a")
    [reply] = await _creates(fleet, 1, "f")
    assert isinstance(await fleet.client.wait(reply.job_id, timeout=90), JobSucceeded)
    # A stale copy: a planner that owns everything, loaded from the log before the real owner
    # records more.
    nc = await connect(fleet.url, name="stale")
    try:
        stale = nats_planner(nc, PlannerConfig(instance="stale"))
        await stale.resume()
        # The real owner records more: a restart of the cluster's services.
        restart = await fleet.client.request(RestartServices(cluster_id=reply.cluster_id), tenant="default")
        assert isinstance(restart, Accepted)
        assert isinstance(await fleet.client.wait(restart.job_id, timeout=90), JobSucceeded)
        cluster = stale.clusters[reply.cluster_id]
        cluster.set_status("needs_attention", "stale-job", "written from a stale view")
        with pytest.raises(ConcurrencyError):
            await stale.state.save_cluster(cluster)
        history = await fleet.store.read(subjects.cluster_events("default", reply.cluster_id))
        assert all(getattr(r.event, "reason", "") != "written from a stale view" for r in history)
        stale.timers.cancel_all()
    finally:
        await nc.close()
    assert shard_of(reply.cluster_id, SHARDS) in fleet.planners["planner-a"].ownership.leases.held  # type: ignore[attr-defined]
