"""A request for a cluster whose shard no live planner serves (its owner died; the lease has
not expired) is answered before the client's per-try timeout, with a `retry` rejection, and
holds up no other request (issue #18.10: in the soak one request went unanswered for 12 tries
of 10 s while planners were killed and shards moved).

The dead owner is a "ghost": leases taken with a 60 s TTL and never renewed, so its shards stay
held, as a killed planner's do until its TTL runs out. The live planner has the default 10 s
TTL: before the fix it waited twice that (20 s) for the ghost's shards, one request at a time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import pytest
import pytest_asyncio

from contracts.commands import REPLY_ADAPTER, Rejected, RestartServices
from muster.bus.connect import connect, principal_of
from muster.bus.shards import ShardLeases, shard_of
from muster.bus.streams import ensure_streams
from muster.client import MusterClient
from services.planner.app import Planner, PlannerConfig
from services.planner.entrypoint import start_planner
from services.planner.sharding import FORWARD_WAIT_S, shard_subject

pytestmark = [pytest.mark.nats, pytest.mark.timeout(120)]
SHARDS = 8
CLIENT_TIMEOUT_S = 10.0  # MusterClient's default per-try timeout, and the soak's


async def _until_held(planner: Planner, count: int, timeout: float) -> None:
    """Wait, woken by the lease watch, until the planner holds `count` shards."""
    leases = planner.ownership.leases  # type: ignore[attr-defined]
    async with leases._changed:
        await asyncio.wait_for(leases._changed.wait_for(lambda: len(leases.held) == count), timeout)


def _cluster_in(shards: set[int], prefix: str) -> str:
    return next(f"{prefix}-{i}" for i in range(10_000) if shard_of(f"{prefix}-{i}", SHARDS) in shards)


@pytest_asyncio.fixture
async def half_ghost(fresh_nats: str) -> AsyncIterator[tuple[Planner, MusterClient, set[int]]]:
    """A planner holding half the shards; the other half held by a dead member."""
    async with AsyncExitStack() as stack:
        conns = []
        for name in ("ghost", "planner", "client"):
            nc = await connect(fresh_nats, name=name)
            conns.append(nc)
            stack.push_async_callback(nc.close)
        await ensure_streams(conns[0].jetstream())
        ghost = ShardLeases(conns[0].jetstream(), "ghost", shards=SHARDS, ttl_s=60.0)
        await ghost.start()  # alone: it takes every shard
        pstack = AsyncExitStack()
        stack.push_async_callback(pstack.aclose)
        planner = await start_planner(conns[1], pstack, PlannerConfig(instance="planner", shards=SHARDS, ack_wait_s=1.0))
        await _until_held(planner, SHARDS // 2, 30)  # the ghost handed half over, as a live member does
        await ghost.abort()  # and then died: its half stays held until its 60 s TTL runs out
        ghosts = set(range(SHARDS)) - set(planner.ownership.leases.held)  # type: ignore[attr-defined]
        yield planner, MusterClient(conns[2], tenant="default"), ghosts


def test_the_forwarders_wait_is_below_the_clients_per_try_timeout() -> None:
    assert FORWARD_WAIT_S < CLIENT_TIMEOUT_S


async def test_a_request_for_a_shard_nobody_serves_is_answered_before_the_client_gives_up(half_ghost: tuple[Planner, MusterClient, set[int]]) -> None:
    _, client, ghosts = half_ghost
    cluster = _cluster_in(ghosts, "ghostly")
    reply = await client.request(RestartServices(cluster_id=cluster), timeout=CLIENT_TIMEOUT_S, attempts=1)
    assert isinstance(reply, Rejected) and reply.retry, reply
    assert f"no planner holds shard {shard_of(cluster, SHARDS)}" in reply.reason


async def test_a_request_waiting_for_a_shard_holds_up_no_other(half_ghost: tuple[Planner, MusterClient, set[int]]) -> None:
    _, client, ghosts = half_ghost
    waiting = asyncio.create_task(
        client.request(RestartServices(cluster_id=_cluster_in(ghosts, "ghostly")), timeout=CLIENT_TIMEOUT_S, attempts=1))
    # Sent after it on the same connection: the planner receives it second.
    mine = _cluster_in(set(range(SHARDS)) - ghosts, "mine")
    reply = await client.request(RestartServices(cluster_id=mine), timeout=CLIENT_TIMEOUT_S, attempts=1)
    assert isinstance(reply, Rejected) and not reply.retry and "no cluster " in reply.reason, reply
    assert not waiting.done()  # answered while the other still waits for its shard's owner
    first = await waiting
    assert isinstance(first, Rejected) and first.retry, first


async def test_a_slow_forwarded_request_holds_up_no_other_of_its_shard(half_ghost: tuple[Planner, MusterClient, set[int]]) -> None:
    """Requests forwarded to a shard's owner are answered each in a task of its own: one waiting
    (for the planner's lock, or a lease renewed late) must not make the next one of the same
    shard miss its forwarder's deadline (in the partition soak a queue formed behind a slow one,
    every answer came too late, and a request went unanswered for 100 s)."""
    planner, client, ghosts = half_ghost
    shard = min(set(range(SHARDS)) - ghosts)
    slow_cluster, quick_cluster = _cluster_in({shard}, "slow"), _cluster_in({shard}, "quick")
    release = asyncio.Event()
    real = planner.handle

    async def handle(ctx: Any) -> Any:
        if slow_cluster.encode() in ctx.body:
            await release.wait()
        return await real(ctx)

    planner.handle = handle  # type: ignore[method-assign]
    subject = shard_subject(shard, "default", principal_of(client.nc), "restart")
    slow = asyncio.create_task(client.nc.request(subject, RestartServices(cluster_id=slow_cluster).model_dump_json().encode(), timeout=30))
    await asyncio.sleep(0)  # sent first
    reply = REPLY_ADAPTER.validate_json((await client.nc.request(
        subject, RestartServices(cluster_id=quick_cluster).model_dump_json().encode(), timeout=FORWARD_WAIT_S)).data)
    assert isinstance(reply, Rejected) and "no cluster " in reply.reason, reply
    assert not slow.done()
    release.set()
    assert "no cluster " in REPLY_ADAPTER.validate_json((await slow).data).reason
