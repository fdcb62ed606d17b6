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

import pytest
import pytest_asyncio

from contracts.commands import Rejected, RestartServices
from muster.bus.connect import connect
from muster.bus.shards import ShardLeases, shard_of
from muster.bus.streams import ensure_streams
from muster.client import MusterClient
from services.planner.app import Planner, PlannerConfig
from services.planner.entrypoint import start_planner
from services.planner.sharding import FORWARD_WAIT_S

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
    assert isinstance(reply, Rejected) and not reply.retry and "unknown cluster" in reply.reason, reply
    assert not waiting.done()  # answered while the other still waits for its shard's owner
    first = await waiting
    assert isinstance(first, Rejected) and first.retry, first
