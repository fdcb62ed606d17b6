"""A webhook receiver for the notifier's tests (the governance tests and those with the real
services): it takes what is posted to it, and waits on what the notifier records in the log."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest_asyncio
from aiohttp import web
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy

from contracts import subjects
from muster.bus.eventstore import EventStore, recorded_from_msg
from muster.destinations import Allowed
from services.notifier.domain.signing import DELIVERY

LOCAL = Allowed.parse(["127.0.0.1"])
"""What the test deployment's operator allows webhooks to reach besides public addresses: the
receiver here, on loopback (as an operator allows an internal receiver; the notifier refuses it
by default: decision 38)."""


@dataclass
class Webhook:
    secret: str = "s3cr3t-for-the-hook"
    """The test's own value: give the notifier `{"hook": webhook.secret}` as its secrets, and a
    subscription `secret://hook`."""
    got: asyncio.Queue[tuple[dict[str, Any], bytes, dict[str, str]]] = field(default_factory=asyncio.Queue)
    """Each delivery once: a retry of one whose answer the notifier did not see in time (a busy
    machine) carries the same `Muster-Delivery` id, and is taken once, as receivers are told to."""
    url: str = ""
    ids: set[str] = field(default_factory=set)

    async def handle(self, request: web.Request) -> web.Response:
        data = await request.read()
        if request.headers.get(DELIVERY) not in self.ids:
            self.ids.add(request.headers.get(DELIVERY, ""))
            await self.got.put((json.loads(data), data, dict(request.headers)))
        return web.Response(status=204)

    @staticmethod
    async def until(store: EventStore, subject: str, check: Callable[[list[Any]], bool], timeout: float = 20.0) -> list[Any]:
        """The subject's events once `check` holds of them: an ordered consumer from its first
        event (what was appended before and after alike; no sleep loop)."""
        seen: list[Any] = []
        done = asyncio.Event()

        async def on_msg(msg: Msg) -> None:
            seen.append(recorded_from_msg(msg).event)
            if check(seen):
                done.set()

        sub = await store.js.subscribe(subject, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL, cb=on_msg,
                                       stream=subjects.EVENTS_STREAM)
        try:
            await asyncio.wait_for(done.wait(), timeout)
            return seen
        finally:
            await sub.unsubscribe()


async def serve_on_loopback(runner: web.AppRunner) -> int:
    """Serve on a port of the kernel's choosing (none chosen first that another process could take); its number."""
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return int(runner.addresses[0][1])


@pytest_asyncio.fixture
async def webhook() -> AsyncIterator[Webhook]:
    receiver = Webhook()
    app = web.Application()
    app.router.add_post("/hook", receiver.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    port = await serve_on_loopback(runner)
    receiver.url = f"http://127.0.0.1:{port}/hook"
    try:
        yield receiver
    finally:
        await runner.cleanup()


@pytest_asyncio.fixture
async def moved(webhook: Webhook) -> AsyncIterator[str]:
    """A receiver that answers every POST with a redirect to the test's webhook receiver."""
    app = web.Application()

    async def redirect(_: web.Request) -> web.Response:
        raise web.HTTPTemporaryRedirect(webhook.url)

    app.router.add_post("/moved", redirect)
    runner = web.AppRunner(app)
    await runner.setup()
    port = await serve_on_loopback(runner)
    try:
        yield f"http://127.0.0.1:{port}/moved"
    finally:
        await runner.cleanup()
