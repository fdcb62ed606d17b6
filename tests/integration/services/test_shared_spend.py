"""A tenant's budget holds across planners (decision 44): two planners on a real nats-server,
each holding half the shards; a cluster made on one planner's shard fills the tenant's budget
(examples/policies/tenant_budget.rego), and the other planner refuses a create on its own shard
that would go over it. Each planner counted only its own shards' clusters before: the tenant got
the whole budget again on every planner.

Strict (decision 44, "Strict"): two `muster planner` processes, two creates each of which fills
the budget sent at the same moment, one to each: one is admitted, the other refused. Before,
each was judged before the other was counted anywhere, and both were admitted. Two approvals at
the same moment are fenced the same way (session 29)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
import pytest_asyncio
from nats.aio.client import Client
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from contracts import subjects
from contracts.commands import Accepted, ApproveJob, CreateCluster, DeleteCluster, DryRun, ExpandCluster, Rejected
from contracts.events import JobSucceeded
from contracts.governance import GovernancePut
from contracts.records import Append
from muster.bus.connect import connect
from muster.bus.eventstore import EventStore
from muster.bus.shards import shard_of
from muster.bus.spend import NatsSpend
from muster.bus.streams import ensure_streams
from muster.catalog.store import apply_catalog
from muster.client import MusterClient
from services.planner.app import Planner, PlannerConfig
from services.planner.domain import planning, spend
from services.planner.entrypoint import start_planner
from services.provisioner.entrypoint import start_workers
from services.provisioner.plugins import PluginRegistry
from services.provisioner.worker import WorkerConfig
from services.solver.entrypoint import start_solver

from .conftest import quick_demo_catalog
from .test_shared_limits import Leases, planners

pytestmark = [pytest.mark.nats, pytest.mark.timeout(120)]
SHARDS = 4
BUDGET = (Path(__file__).parents[3] / "examples" / "policies" / "tenant_budget.rego").read_text()


async def _until_held(planner: Planner, count: int, timeout: float) -> None:
    """Wait, woken by the lease watch, until the planner holds `count` shards."""
    leases = planner.ownership.leases  # type: ignore[attr-defined]
    async with leases._changed:
        await asyncio.wait_for(leases._changed.wait_for(lambda: len(leases.held) == count), timeout)


async def _services(stack: AsyncExitStack, url: str, *more: str) -> dict[str, Client]:
    """A solver and a provisioner on the server, and connections named `client` and `more`."""
    conns = {}
    for name in ("solver", "provisioner", "client", *more):
        conns[name] = await connect(url, name=name)
        stack.push_async_callback(conns[name].close)
    await ensure_streams(conns["solver"].jetstream())
    await start_solver(conns["solver"], stack, "solver")
    registry = PluginRegistry.discover()
    stack.push_async_callback(registry.aclose)
    await start_workers(conns["provisioner"], stack, registry, WorkerConfig(provisioner_id="prov", capacity=16))
    return conns


@pytest_asyncio.fixture
async def two(fresh_nats: str) -> AsyncIterator[tuple[MusterClient, EventStore, dict[str, Planner]]]:
    async with AsyncExitStack() as stack:
        conns = await _services(stack, fresh_nats, "planner-a", "planner-b")
        store = EventStore(conns["client"])
        await apply_catalog(store, "default", quick_demo_catalog())
        planners = {}
        for name in ("planner-a", "planner-b"):
            planners[name] = await start_planner(conns[name], stack, PlannerConfig(instance=name, shards=SHARDS, lease_ttl_s=2.0))
        for planner in planners.values():
            await _until_held(planner, SHARDS // 2, 10)
        yield MusterClient(conns["client"]), store, planners


def _request_on(planner: Planner, start: int) -> str:
    """A request id whose new cluster lands on a shard this planner holds."""
    n = start
    while not planner.ownership.leases.owns_cluster(planning.created_ids("default", f"r{n}")[1]):  # type: ignore[attr-defined]
        n += 1
    return f"r{n}"


async def test_a_tenant_budget_holds_across_two_planners(two: tuple[MusterClient, EventStore, dict[str, Planner]]) -> None:
    client, store, planners = two
    a, b = planners["planner-a"], planners["planner-b"]
    rid = _request_on(a, 0)
    first = await client.request(CreateCluster(name="first", template="hadoop-small", nodes=4, request_id=rid), tenant="default")
    assert isinstance(first, Accepted), first
    assert isinstance(await client.wait(first.job_id, timeout=60), JobSucceeded)
    gone = await client.request(DeleteCluster(cluster_id=first.cluster_id, dry_run=True), tenant="default")
    assert isinstance(gone, DryRun) and gone.cost is not None, gone
    spent = gone.cost["before_per_hour"]
    assert spent > 0
    subject = subjects.governance_events("default", "policy", "tenant_budget")
    source = BUDGET.replace("budget := 5", f"budget := {spent * 1.5}")
    await store.append(subject, [Append(GovernancePut(kind="policy", name="tenant_budget", entity={"name": "tenant_budget", "source": source},
                                                      version=1, by="ada"), msg_id=f"{subject}:1")])
    key = f"default.{shard_of(first.cluster_id, SHARDS)}"
    board = b.spend.board if b.spend is not None else None
    assert isinstance(board, NatsSpend)
    await board.seen(key, lambda v: v.get("clusters") == 1, 10)  # planner-b knows planner-a's cluster

    other = _request_on(b, int(rid[1:]) + 1)
    over = await client.request(CreateCluster(name="second", template="hadoop-small", nodes=4, request_id=other), tenant="default")
    assert isinstance(over, Rejected) and "its budget is" in over.reason, over
    denied = [r.event for r in await store.read(f"{subjects.EVT}.default.denied.*") if r.type == "RequestDenied"]
    assert [d.cluster_id for d in denied] == [planning.created_ids("default", other)[1]]  # refused by planner-b, its owner
    small = _request_on(b, int(other[1:]) + 1)
    within = await client.request(CreateCluster(name="small", template="hadoop-small", nodes=2, request_id=small), tenant="default")
    assert isinstance(within, Accepted), within  # half the first fits the half left


async def test_an_expand_waiting_for_its_approver_holds_its_nodes_on_the_other_planner_without_a_budget_policy(
        two: tuple[MusterClient, EventStore, dict[str, Planner]]) -> None:
    """Admitted with only an approval rule (no policy reads the totals: no reservation), an
    expand leaves its cluster's layout as it was until approved: its shard's entry, written at
    layout changes only, never held its nodes, and another planner did not count them."""
    client, store, planners = two
    a, b = planners["planner-a"], planners["planner-b"]
    first = await client.request(CreateCluster(name="held", template="hadoop-small", nodes=2, request_id=_request_on(a, 0)),
                                 tenant="default")
    assert isinstance(first, Accepted), first
    assert isinstance(await client.wait(first.job_id, timeout=60), JobSucceeded)
    subject = subjects.governance_events("default", "rule", "big")
    await store.append(subject, [Append(GovernancePut(kind="rule", name="big", entity={"name": "big", "min_nodes": 3}, version=1,
                                                      by="ada"), msg_id=f"{subject}:1")])
    waiting = await client.request(ExpandCluster(cluster_id=first.cluster_id, nodes=5), tenant="default")
    assert isinstance(waiting, Accepted) and any("waits for approval" in w for w in waiting.warnings), waiting
    board = b.spend.board if b.spend is not None else None
    assert isinstance(board, NatsSpend)
    key = f"default.{shard_of(first.cluster_id, SHARDS)}"
    await board.seen(key, lambda v: spend.node_count(v) == 5, 10)  # planner-b counts the 5 the expand holds



async def test_two_approvals_at_once_on_two_planners_are_not_both_approved_past_the_budget(
        two: tuple[MusterClient, EventStore, dict[str, Planner]], monkeypatch: pytest.MonkeyPatch) -> None:
    """Decision 44, "An approval is fenced too": two creates waiting for approvers, one on each
    planner's shards, admitted before the budget policy; neither planner's board knows the
    other's hold (each planner's background write refused, as by a bus away for a moment: the
    window between a job's save and its hold reaching the others, held open). Approved at the
    same moment, each was judged on its own planner's clusters alone, and both were approved."""
    client, store, planners = two
    boards: list[NatsSpend] = []
    for planner in planners.values():
        assert planner.spend is not None and isinstance(planner.spend.board, NatsSpend)
        boards.append(planner.spend.board)

    async def refused(name: str, value: object) -> None:
        raise ConnectionError("the background write held back by the test")

    for board in boards:
        monkeypatch.setattr(board, "put", refused)  # the fenced writes (`put_if`) are not held back
    subject = subjects.governance_events("default", "rule", "big")
    await store.append(subject, [Append(GovernancePut(kind="rule", name="big", by="ada", version=1,
                                                      entity={"name": "big", "min_nodes": 3, "allow_self_approval": True}),
                                        msg_id=f"{subject}:1")])
    waiting = []
    for n, planner in enumerate(planners.values()):
        rid = _request_on(planner, 100 * n)
        made = await client.request(CreateCluster(name=f"waits-{n}", template="hadoop-small", nodes=4, request_id=rid), tenant="default")
        assert isinstance(made, Accepted) and any("waits for approval" in w for w in made.warnings), made
        waiting.append(made)
    asked = await client.request(CreateCluster(name="probe", template="hadoop-small", nodes=4, dry_run=True), tenant="default")
    assert isinstance(asked, DryRun) and asked.cost is not None and asked.cost["per_hour"] > 0, asked
    subject = subjects.governance_events("default", "policy", "tenant_budget")
    source = BUDGET.replace("budget := 5", f"budget := {asked.cost['per_hour'] * 1.5}")  # one fits, two do not
    await store.append(subject, [Append(GovernancePut(kind="policy", name="tenant_budget", by="ada", version=1,
                                                      entity={"name": "tenant_budget", "source": source}), msg_id=f"{subject}:1")])
    assert all(spend.node_count(v) == 0 for b in boards for v in b.known().values())  # neither hold was shared

    replies = await asyncio.gather(*(client.request(ApproveJob(job_id=w.job_id), tenant="default") for w in waiting))
    approved = [r for r in replies if isinstance(r, Accepted)]
    refused_ = [r for r in replies if isinstance(r, Rejected)]
    assert len(approved) == 1 and len(refused_) == 1, replies
    assert refused_[0].code == "forbidden" and "its budget is" in refused_[0].reason, refused_[0]
    monkeypatch.undo()  # the background writes land (tried again within 5 s): 4 nodes in all, the refused job's none
    kept = next(w for w in waiting if w.job_id == approved[0].job_id)
    for board in boards:
        await board.seen(f"default.{shard_of(kept.cluster_id, SHARDS)}", lambda v: spend.node_count(v) == 4, 15)
    assert all(spend.node_count(spend.total(v for k, v in b.known().items() if k.startswith("default."))) == 4 for b in boards)

PROCESSES = ("planner-1", "planner-2")
ROUNDS = 4
"""Tenants, each with a pair of creates sent at once: one pair could miss the moment."""


def _one_on_each(owners: dict[int, str], tenant: str) -> list[str]:
    """A request id of the tenant whose new cluster lands on each planner's shards."""
    picked: dict[str, str] = {}
    n = 0
    while len(picked) < len(PROCESSES):
        owner = owners[shard_of(planning.created_ids(tenant, f"at-once-{n}")[1], SHARDS)]
        picked.setdefault(owner, f"at-once-{n}")
        n += 1
    return list(picked.values())


async def test_two_creates_at_the_same_moment_on_two_planner_processes_are_not_both_admitted_past_the_budget(
        fresh_nats: str) -> None:
    async with AsyncExitStack() as stack:
        conns = await _services(stack, fresh_nats)
        store, client = EventStore(conns["client"]), MusterClient(conns["client"])
        tenants = [f"t{n}" for n in range(ROUNDS)]
        for tenant in tenants:
            await apply_catalog(store, tenant, quick_demo_catalog())
        leases = Leases(PROCESSES, SHARDS)
        await stack.enter_async_context(leases.follow(conns["client"]))
        procs = stack.enter_context(planners(fresh_nats, PROCESSES, SHARDS, more=()))
        await asyncio.wait_for(leases.split.wait(), 60)
        asked = await client.request(CreateCluster(name="probe", template="hadoop-small", nodes=4, dry_run=True), tenant=tenants[0])
        assert isinstance(asked, DryRun) and asked.cost is not None and asked.cost["per_hour"] > 0, asked
        source = BUDGET.replace("budget := 5", f"budget := {asked.cost['per_hour'] * 1.5}")  # one fits, two do not
        for tenant in tenants:
            subject = subjects.governance_events(tenant, "policy", "tenant_budget")
            await store.append(subject, [Append(GovernancePut(kind="policy", name="tenant_budget",
                                                              entity={"name": "tenant_budget", "source": source}, version=1, by="ada"),
                                                msg_id=f"{subject}:1")])
        for tenant in tenants:
            replies = await asyncio.gather(*(client.request(CreateCluster(name=rid, template="hadoop-small", nodes=4, request_id=rid),
                                                            tenant=tenant) for rid in _one_on_each(leases.owners, tenant)))
            admitted = [r for r in replies if isinstance(r, Accepted)]
            refused = [r for r in replies if isinstance(r, Rejected)]
            assert len(admitted) == 1 and len(refused) == 1, (tenant, replies)
            assert "its budget is" in refused[0].reason and refused[0].code == "forbidden", refused[0]
        kv = await conns["client"].jetstream().key_value("spend")
        for tenant in tenants:  # the admitted create counts (or holds) its 4 nodes, the refused one nothing
            # Each shard's key got (nats-py's `keys()` listing once said "no keys found" of a
            # bucket with some, a fresh clone's run under load).
            entries = [json.loads(entry.value or b"{}") for shard in range(SHARDS)
                       if (entry := await _entry(kv, spend.key(tenant, shard))) is not None]
            assert spend.node_count(spend.total(entries)) == 4, (tenant, entries)
        assert all(p.poll() is None for p in procs), "a planner died"


async def _entry(kv: KeyValue, key: str) -> KeyValue.Entry | None:
    try:
        return await kv.get(key)
    except KeyNotFoundError:
        return None


async def test_a_reservation_is_written_only_if_none_of_the_tenant_s_keys_moved(fresh_nats: str) -> None:
    """The conditional write on a real nats-server: the expected last sequence is checked
    against the wildcard `$KV.spend.<tenant>.*`, so another shard's write of the same tenant
    fails it, another tenant's does not."""
    async with AsyncExitStack() as stack:
        nc = await connect(fresh_nats, name="spend")
        stack.push_async_callback(nc.close)
        await ensure_streams(nc.jetstream())
        board, other = NatsSpend(nc.jetstream()), NatsSpend(nc.jetstream())
        for b in (board, other):
            await b.start()
            stack.push_async_callback(b.stop)
        one = {"clusters": 1, "nodes": {"sim": {"small": 3}}}
        assert await board.put_if("acme.0", one, "acme", 0) is None  # a tenant with no key yet: 0
        seen = board.revision("acme")
        await other.put("acme.1", one)  # another planner's shard of the same tenant, meanwhile
        await other.put("zeta.0", one)  # another tenant's: no bearing
        moved = await board.put_if("acme.0", spend.total([one, one]), "acme", seen)
        assert moved is not None and moved > seen
        await board.caught_up("acme", moved, 5)  # the watch brings the other planner's write
        assert board.known()["acme.1"] == one and board.known()["acme.0"] == one
        assert await board.put_if("acme.0", spend.total([one, one]), "acme", board.revision("acme")) is None
        await other.seen("acme.0", lambda v: v.get("clusters") == 2, 5)
