"""What the bus layer makes, it ends (muster/bus/wire.py, "Ending"): the tasks nats-py runs
for a JetStream push subscription (heartbeat and flow-control checks) end when it is closed, not
when its loop is closed under them ("Task was destroyed but it is pending!"), the KV watches
of the budgets and the shard leases end when they stop, a refused connect closes its socket, and
a server started for a fixture its log pipe."""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import warnings
from collections.abc import AsyncIterator
from pathlib import Path

import nats.errors
import pytest
import pytest_asyncio
from nats.aio.client import Client
from nats.js.api import DeliverPolicy, KeyValueConfig

from contracts import subjects
from muster.bus.budgets import NatsBudgets
from muster.bus.connect import connect
from muster.bus.server import start_blocking
from muster.bus.shards import ShardLeases
from muster.bus.streams import ensure_bucket, ensure_streams
from muster.bus.wire import close_push, stop_watch
from services.auth.domain.tokens import make_token

pytestmark = [pytest.mark.nats, pytest.mark.timeout(60)]


class Running:
    """What runs of nats-py's for subscriptions made since this was made (the JetStream checks,
    the callbacks' tasks), by name."""

    def __init__(self) -> None:
        self.before = asyncio.all_tasks()

    def __call__(self) -> list[str]:
        return sorted(name for t in asyncio.all_tasks() - self.before if not t.done()
                      for name in [t.get_coro().__qualname__]  # type: ignore[union-attr]
                      if name.startswith(("JetStreamContext._JSI.", "_answer_flow_control", "Subscription._wait_for_msgs")))


ORDERED = ["JetStreamContext._JSI.activity_check", "Subscription._wait_for_msgs", "_answer_flow_control"]
"""What nats-py runs for one ordered consumer with a callback (its flow-control check as
muster.bus.wire replaces it)."""


@pytest_asyncio.fixture
async def own(fresh_nats: str) -> AsyncIterator[Client]:
    """A connection of the test's own on a server of its own: the test closes it, and nothing
    else subscribes there."""
    nc = await connect(fresh_nats, name="closing")
    await ensure_streams(nc.jetstream())
    try:
        yield nc
    finally:
        await nc.close()


async def _ordered(nc: Client, running: Running) -> object:
    sub = await nc.jetstream().subscribe(f"{subjects.EVT}.closing.>", ordered_consumer=True, deliver_policy=DeliverPolicy.ALL,
                                         stream=subjects.EVENTS_STREAM, idle_heartbeat=2.0, cb=_ignore)
    assert running() == ORDERED
    return sub


async def _ignore(msg: object) -> None:
    return None


async def test_a_closed_ordered_consumer_leaves_nothing_of_it_running(own: Client) -> None:
    running = Running()
    sub = await _ordered(own, running)
    await close_push(sub)  # type: ignore[arg-type]
    assert running() == []  # ended, not only told to (nats-py's own unsubscribe)
    await close_push(sub)  # type: ignore[arg-type]  # twice is harmless


async def test_an_ordered_consumer_closed_after_its_connection_leaves_nothing_running(own: Client) -> None:
    """nats-py's unsubscribe raises on a closed connection before it cancels anything, and its
    close cancels the subscription's delivering task only."""
    running = Running()
    sub = await _ordered(own, running)
    await own.close()
    await close_push(sub)  # type: ignore[arg-type]
    assert running() == []


async def test_a_stopped_kv_watch_leaves_nothing_running_and_its_iterator_ends(own: Client) -> None:
    kv = await ensure_bucket(own.jetstream(), KeyValueConfig(bucket="closing"))
    await kv.put("k", b"v")
    running = Running()
    watcher = await kv.watchall()
    assert running() == ORDERED
    assert (await watcher.updates(timeout=5)).key == "k"
    await stop_watch(watcher)
    assert running() == []
    assert [entry async for entry in watcher] == [None]  # (nats-py's marker of the end of what was current)
    await stop_watch(watcher)


async def test_budgets_and_shard_leases_stopped_leave_no_watch_running(own: Client) -> None:
    async def nothing(name: object) -> None:
        return None

    running = Running()
    budgets = NatsBudgets(own.jetstream())
    await budgets.start(nothing)
    leases = ShardLeases(own.jetstream(), "m1", shards=4, ttl_s=3.0)
    await leases.start()
    assert running() == sorted(ORDERED * 2)  # a watch each
    await budgets.stop()
    await leases.stop()
    assert running() == []


async def test_a_refused_connect_leaves_no_socket_open(nats_url: str) -> None:
    """A token the bus refuses (a tracker acting for a revoked one does this per request)."""
    unknown = make_token("nobody", os.urandom(6), os.urandom(32), os.urandom(16))[0]

    async def refused() -> None:
        try:
            await connect(nats_url, token=unknown, allow_reconnect=False, max_reconnect_attempts=0, error_cb=_ignore)
        except nats.errors.Error as err:
            assert "Authorization Violation" in str(err)
        else:
            raise AssertionError("the bus took an unknown token")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        await refused()
        gc.collect()  # the client is garbage now: an open socket of its says so
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []


def test_a_server_started_for_a_fixture_closes_its_log_pipe_once_it_exited(tmp_path: Path) -> None:
    proc, url = start_blocking(tmp_path / "nats", name="piped")
    copier = next(t for t in threading.enumerate() if t.name == f"nats-log-{url.rsplit(':', 1)[1]}")
    proc.terminate()
    proc.wait(10)
    copier.join(10)
    assert not copier.is_alive() and proc.stderr is not None and proc.stderr.closed
