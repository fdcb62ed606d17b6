"""Reconnecting to an authorizing server whose auth callout is away (muster/bus/wire.py,
"Connecting again"; docs/testing.md, "A provisioner's connection closed for good, silently").

A real nats-server with its auth callout, reached through a proxy on 127.0.0.1 that can cut its
links (the client sees what a server restart shows it) and, once, put a PING of the server's
ahead of the server's answer to a reconnect's CONNECT: nats-py 2.16 took that handshake for done,
and the server's "Authorization Violation" that followed closed the connection for good, without
its closed callback."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
import pytest_asyncio
from nats.aio.client import Client

from muster.bus import wire
from muster.bus.connect import connect, on_reconnect
from muster.runtime.service import run_service
from services.auth.keys import AuthKeys
from tests.conftest import AuthThread, _stop, start_authorized

pytestmark = [pytest.mark.nats, pytest.mark.timeout(90)]

DEADLINE_S = 30.0
"""For what comes (a reconnect; the server's answer after its callout's 2 s)."""


class Proxy:
    """Forwards 127.0.0.1:<port> to the server. `cut` ends every link; `ping_ahead` makes the
    next link's server answer to CONNECT come behind a PING, and then ends the link."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.rsplit("//", 1)[-1].rsplit(":", 1)
        self.upstream = (host, int(port))
        self.links: set[asyncio.Task[None]] = set()
        self.ping_ahead = False
        self.pinged = asyncio.Event()
        """Set once the tampered link has passed the server's answer on."""

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return f"nats://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def close(self) -> None:
        self.server.close()
        await self.cut()
        await self.server.wait_closed()

    async def cut(self) -> None:
        for link in list(self.links):
            link.cancel()
        await asyncio.gather(*self.links, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        link = asyncio.current_task()
        assert link is not None
        self.links.add(link)
        tamper, self.ping_ahead = self.ping_ahead, False
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
            try:
                to_server = asyncio.ensure_future(_pump(reader, up_writer))
                try:
                    if tamper:
                        writer.write(await up_reader.readline())  # INFO
                        answer = await up_reader.readline()  # to CONNECT + PING: -ERR or PONG
                        writer.write(b"PING\r\n" + answer)
                        await writer.drain()
                        self.pinged.set()
                        return
                    await _pump(up_reader, writer)
                finally:
                    to_server.cancel()
                    await asyncio.gather(to_server, return_exceptions=True)
            finally:
                up_writer.close()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            self.links.discard(link)


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while chunk := await reader.read(65536):
        writer.write(chunk)
        await writer.drain()


class Server:
    """A server of the test's own, with its auth service in a thread that can be stopped (the
    callout then has no responder: a connect is refused after the callout's timeout) and
    started again."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.proc, self.url, self.auth = start_authorized(data_dir, name="muster-reconnect")
        self.auth_up = True

    def stop_auth(self) -> None:
        self.auth.stop()
        self.auth_up = False

    def start_auth(self) -> None:
        self.auth = AuthThread(self.url, AuthKeys.load_or_create(self.data_dir / "auth"))
        self.auth_up = True

    def stop(self) -> None:
        try:
            if self.auth_up:
                self.auth.stop()
        finally:
            _stop(self.proc)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    s = Server(tmp_path / "server")
    try:
        yield s
    finally:
        s.stop()


@pytest_asyncio.fixture
async def proxy(server: Server) -> AsyncIterator[Proxy]:
    p = Proxy(server.url)
    try:
        yield p
    finally:
        await p.close()


async def _first_of(**waits: asyncio.Event) -> str:
    tasks = {asyncio.ensure_future(e.wait()): name for name, e in waits.items()}
    try:
        done, _ = await asyncio.wait(tasks, timeout=DEADLINE_S, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return tasks[done.pop()] if done else "nothing"


async def test_a_reconnect_the_server_refuses_behind_a_ping_is_tried_again_and_made(server: Server, proxy: Proxy) -> None:
    told_closed = asyncio.Event()

    async def closed_cb() -> None:
        told_closed.set()

    nc = await connect(await proxy.start(), name="reconnecting", closed_cb=closed_cb)
    reconnected, closed = asyncio.Event(), asyncio.Event()

    async def on_back() -> None:
        reconnected.set()

    on_reconnect(nc, on_back)
    wire.on_closed(nc, closed.set)
    try:
        for i in range(5):  # resubscribed by the reconnect: written to the socket the server closed
            await nc.subscribe(f"muster.test.reconnect.{i}")
        await wire.flush(nc)
        server.stop_auth()  # as after a restart, before the auth service is connected again
        proxy.ping_ahead = True
        await proxy.cut()
        assert await _first_of(pinged=proxy.pinged) == "pinged", "the server never answered the reconnect's CONNECT"
        server.start_auth()
        outcome = await _first_of(reconnected=reconnected, closed=closed)
        assert outcome == "reconnected", (
            f"{outcome}: the connection was closed for good instead of reconnecting (status {nc._status}, "
            f"last error {nc.last_error!r}, nats-py's closed callback called: {told_closed.is_set()})")
        await wire.flush(nc)
        assert nc.is_connected and not told_closed.is_set()
    finally:
        await nc.close()


async def test_a_service_whose_connection_nats_py_closes_without_its_callback_exits(server: Server) -> None:
    """However nats-py closes a service's connection for good (here as it does when an -ERR comes
    while it reconnects: `_close` with no callbacks), the service exits to be started again."""
    silently: list[asyncio.Task[None]] = []

    async def setup(nc: Client, stack: AsyncExitStack) -> None:
        loop = asyncio.get_running_loop()
        loop.call_later(0.2, lambda: silently.append(asyncio.ensure_future(nc._close(Client.CLOSED, do_cbs=False))))

    loop = asyncio.get_running_loop()
    try:
        with pytest.raises(SystemExit) as exited:  # (in this task: asyncio lets a task's SystemExit out of the loop)
            async with asyncio.timeout(DEADLINE_S):
                await run_service("probe", server.url, setup)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await asyncio.gather(*silently, return_exceptions=True)
    assert exited.value.code == 1
