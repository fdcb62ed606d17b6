"""Two pool services under two identities, for availability (docs/pools.md): they share the durable
of requesters' facts (`pool-requests`, one queue group). Its deliveries went to the inbox of the
identity that made it, `_INBOX.pool-1.…`, where the second may not subscribe: its subscription
was a permission violation, and once the first stopped no fact reached anyone. The durable now
delivers on `muster.deliver.pool-requests`, which every pool identity may subscribe to."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

from contracts import subjects
from contracts.pool_commands import AddHosts
from contracts.pools import HostSpec, NodeNeed, PoolHostsRequested, PoolRequest
from muster.bus.consume import consume_events
from muster.bus.eventstore import Append, EventStore
from services.pool.entrypoint import start_pool_service
from services.pool.routing import REQUESTS

from .conftest import Authed

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIP9DiqvhZyeLipjDVoIHhA2p8Eu/ozCrJdp0qXEeYYyF"
WAIT_S = 20.0


async def test_a_second_pool_service_under_its_own_identity_takes_the_requests_when_the_first_stops(authed: Authed) -> None:
    tokens = await authed.people({p: {"role": "service", "service": "pool"} for p in ("pool-1", "pool-2")})
    root = await authed.raw(authed.admin_token, "root")
    system = await authed.raw(authed.system_token, "sys")  # (writes a requester's fact, as a planner would)
    violations: list[str] = []

    async def on_error(err: Exception) -> None:
        violations.append(str(err).lower())

    first = await authed.raw(tokens["pool-1"], "pool-1", error_cb=on_error)
    second = await authed.raw(tokens["pool-2"], "pool-2", error_cb=on_error)
    granted = asyncio.get_running_loop().create_future()

    async def on_pool_event(msg: object) -> None:
        if getattr(msg, "headers", None) and msg.headers.get("Muster-Type") == "HostsGranted" and not granted.done():  # type: ignore[attr-defined]
            granted.set_result(msg)

    watch = await root.subscribe(subjects.pool_events("lab"), cb=on_pool_event)
    try:
        async with AsyncExitStack() as stack, AsyncExitStack() as first_stack:
            await start_pool_service(first, first_stack, "pool-a")  # it makes the durable
            await start_pool_service(second, stack, "pool-b")
            hosts = AddHosts(hosts=[HostSpec(id="h1", address="10.9.0.1", host_keys=[KEY])])
            answer = await root.request(subjects.pool_command("root", "lab", "add-hosts"), hosts.model_dump_json().encode(), timeout=5)
            assert b"PoolAnswer" in answer.data, answer.data
            await first_stack.aclose()
            await first.close()  # the first pool service is gone: the second takes what comes
            request = PoolRequest(request_id="r1", pool="lab", tenant="acme", cluster_id="c-r1", job_id="r1",
                                  nodes=[NodeNeed(node_id="n0")])
            await EventStore(system).append(subjects.pool_request_events("acme", "lab", "r1"),
                                          [Append(PoolHostsRequested(request=request), msg_id="r1")])
            await asyncio.wait_for(granted, WAIT_S)
        assert not any("permissions violation" in v for v in violations), violations
    finally:
        await watch.unsubscribe()
        for nc in (first, second, root, system):
            if not nc.is_closed:
                await nc.close()


async def test_a_durable_an_older_version_made_on_its_inbox_is_moved_at_the_next_start(authed: Authed) -> None:
    """Upgrading: `pool-requests` as a pool service before this change made it delivers to its
    maker's inbox; a pool service of another identity starting moves it and takes the facts."""
    tokens = await authed.people({p: {"role": "service", "service": "pool"} for p in ("pool-1", "pool-2")})
    old = await authed.raw(tokens["pool-1"], "pool-1")
    sub = await consume_events(old.jetstream(), subjects.ALL_POOL_REQUEST_EVENTS, REQUESTS, _ignore, queue=REQUESTS)
    assert (await sub.consumer_info()).config.deliver_subject.startswith("_INBOX.pool-1.")  # type: ignore[union-attr]
    await old.close()
    violations: list[str] = []

    async def on_error(err: Exception) -> None:
        violations.append(str(err).lower())

    second = await authed.raw(tokens["pool-2"], "pool-2", error_cb=on_error)
    try:
        async with AsyncExitStack() as stack:
            await start_pool_service(second, stack, "pool-b")
            await second.flush()  # (a refused subscription is told before the flush's answer)
            info = await second.jetstream().consumer_info(subjects.EVENTS_STREAM, REQUESTS)
            assert info.config.deliver_subject == subjects.POOL_REQUESTS_DELIVERY
            assert not any("permissions violation" in v for v in violations), violations
    finally:
        await second.close()


async def _ignore(recorded: object) -> None:
    return None
