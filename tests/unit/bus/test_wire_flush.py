"""`wire.flush` is a round trip behind everything sent before it. The order of the protocol lines
is what matters, so a loopback peer records what a nats-py client writes, in order, and answers
its PINGs (the real server's side: tests/integration/bus/test_wire.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest_asyncio
from nats.aio.client import Client

from muster.bus import wire

INFO = b'INFO {"server_id":"peer","version":"2.15.1","proto":1,"max_payload":1048576,"headers":true}\r\n'


class Peer:
    """Takes one connection: what the client wrote, line by line, and what it had written when
    each PING came (the server answers a PING once it has read everything before it)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.before_ping: list[list[str]] = []
        self.done = asyncio.Event()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(INFO)
        while line := await reader.readline():
            if line.startswith(b"PING"):
                self.before_ping.append(list(self.lines))
                writer.write(b"PONG\r\n")
            else:
                self.lines.append(line.decode().strip())
        writer.close()
        await writer.wait_closed()
        self.done.set()


@pytest_asyncio.fixture
async def peer() -> AsyncIterator[tuple[Peer, Client]]:
    p = Peer()
    server = await asyncio.start_server(p.serve, "127.0.0.1", 0)
    nc = Client()
    await nc.connect(f"nats://127.0.0.1:{server.sockets[0].getsockname()[1]}", allow_reconnect=False)
    p.before_ping.clear()
    try:
        yield p, nc
    finally:
        await nc.close()
        await asyncio.wait_for(p.done.wait(), 10)
        server.close()
        await server.wait_closed()


async def test_the_pong_of_a_flush_comes_after_the_subscription_made_before_it(peer: tuple[Peer, Client]) -> None:
    p, nc = peer
    await nc.subscribe("muster.cb.a.>")
    await wire.flush(nc)
    assert any(line.startswith("SUB muster.cb.a.>") for line in p.before_ping[-1]), p.before_ping


async def test_an_unsubscribe_and_a_publish_are_behind_it_too(peer: tuple[Peer, Client]) -> None:
    p, nc = peer
    sub = await nc.subscribe("a")
    await sub.unsubscribe()
    await nc.publish("b", b"x")
    await wire.flush(nc)
    last = p.before_ping[-1]
    assert [line.split()[0] for line in last[-4:]] == ["SUB", "UNSUB", "PUB", "x"], last
