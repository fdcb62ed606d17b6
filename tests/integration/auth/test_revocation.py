"""Revocation, expiry and the auth service's death: what is refused, when, and what goes on."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

import nats.errors
import pytest

from .conftest import Authed

DEADLINE_S = 10.0


async def _closed(nc: Any) -> asyncio.Event:
    gone = asyncio.Event()

    async def on_closed() -> None:
        gone.set()

    nc._closed_cb = on_closed
    return gone


async def _user(authed: Authed, root: Any, pid: str, **fields: Any) -> dict[str, Any]:
    made = await authed.ask(root, "root", "user-create", principal=pid, tenant="a", **fields)
    assert made["ok"], made
    return made["data"]


async def test_a_revoked_token_is_refused_at_once_and_its_connections_closed_within_seconds(authed: Authed) -> None:
    root = await authed.raw(authed.admin_token, "root")
    alice = await _user(authed, root, "alice")
    live = await authed.raw(alice["token"], "alice")
    gone = await _closed(live)
    started = time.monotonic()
    assert (await authed.ask(root, "root", "token-revoke", token_id=alice["token_id"]))["ok"]
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await authed.raw(alice["token"], "alice")
    await asyncio.wait_for(gone.wait(), DEADLINE_S)
    print(f"[revocation] open connection closed {time.monotonic() - started:.2f} s after the request")
    assert authed.service.kicked >= 1
    await root.close()


async def test_a_disabled_user_loses_every_connection_and_token(authed: Authed) -> None:
    root = await authed.raw(authed.admin_token, "root")
    carol = await _user(authed, root, "carol")
    second = (await authed.ask(root, "root", "token-create", principal="carol"))["data"]["token"]
    conns = [await authed.raw(carol["token"], "carol"), await authed.raw(second, "carol")]
    closed = [await _closed(c) for c in conns]
    assert (await authed.ask(root, "root", "user-disable", principal="carol"))["ok"]
    await asyncio.wait_for(asyncio.gather(*(c.wait() for c in closed)), DEADLINE_S)
    for token in (carol["token"], second):
        with pytest.raises(nats.errors.Error, match="Authorization Violation"):
            await authed.raw(token, "carol")
    await root.close()


async def test_an_expired_token_is_cut_off_by_the_server_itself(authed: Authed) -> None:
    root = await authed.raw(authed.admin_token, "root")
    # 3 s, not 1: the user JWT's exp is in whole seconds (cut down, never up), so a 1 s token
    # lived 0-1 s, too short to connect with on a loaded machine.
    dave = await _user(authed, root, "dave", expires_in_s=3)
    live = await authed.raw(dave["token"], "dave")
    gone = await _closed(live)
    await asyncio.wait_for(gone.wait(), DEADLINE_S)  # the user JWT's exp is the token's
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await authed.raw(dave["token"], "dave")
    await root.close()


async def _start_auth_process(authed: Authed) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "muster", "auth", "--nats-url", authed.url, "--keys-dir", str(authed.folder / "keys"),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, env={**os.environ, "MUSTER_LOG_LEVEL": "INFO"},
    )
    assert proc.stderr is not None

    async def started() -> None:
        async for line in proc.stderr:  # type: ignore[union-attr]
            if b'"started"' in line:
                return
        raise AssertionError("the auth service exited during start")

    await asyncio.wait_for(started(), 30)
    return proc


async def test_the_auth_service_killed_9_existing_work_goes_on_new_connections_fail_a_restart_recovers(authed: Authed) -> None:
    root = await authed.raw(authed.admin_token, "root")
    alice = await _user(authed, root, "alice2")
    await root.close()
    await authed.service.stop()  # the in-process one: this test needs a process to kill
    proc = await _start_auth_process(authed)
    try:
        system = await authed.raw(authed.system_token, "sys")
        async def done(msg: Any) -> None:
            await msg.respond(b"done")

        responder = await system.subscribe("muster.ops.>", cb=done)
        live = await authed.raw(alice["token"], "alice2")
        proc.kill()
        await proc.wait()
        # Existing connections go on: requests, replies, subscriptions.
        reply = await live.request("muster.ops.a.alice2.create", b"{}", timeout=5)
        assert reply.data == b"done"
        # New connections fail clearly: the server's callout gets no answer.
        with pytest.raises(nats.errors.Error, match="Authorization Violation"):
            await authed.raw(alice["token"], "alice2")
        proc = await _start_auth_process(authed)
        again = await authed.raw(alice["token"], "alice2")
        assert (await again.request("muster.ops.a.alice2.create", b"{}", timeout=5)).data == b"done"
        for nc in (again, live):
            await nc.close()
        await responder.unsubscribe()
        await system.close()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await authed.start_service()  # for the fixture's teardown


async def test_a_revocation_the_auth_service_did_not_enforce_before_dying_is_enforced_at_its_start(authed: Authed) -> None:
    from contracts import subjects
    from contracts.identity import TokenRevoked
    from muster.bus.eventstore import Append, EventStore
    from services.auth.keys import LOG_USER

    root = await authed.raw(authed.admin_token, "root")
    erin = await _user(authed, root, "erin")
    await root.close()
    live = await authed.raw(erin["token"], "erin")
    gone = await _closed(live)
    await authed.service.stop()  # it never sees the revocation as news
    # With the auth service down only its own users get in (as it would, appending the revocation).
    system = await authed.raw(None, user=LOG_USER, password=authed.keys.bus_secret)
    event = TokenRevoked(token_id=erin["token_id"], principal="erin", by="root")
    await EventStore(system).append(subjects.identity_events("token", erin["token_id"]), [Append(event, msg_id="sweep-1")])  # type: ignore[arg-type]  # an identity event: not a contracts.events.Event
    await system.close()
    await authed.start_service()
    await asyncio.wait_for(gone.wait(), DEADLINE_S)
