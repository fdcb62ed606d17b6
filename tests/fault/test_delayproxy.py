"""The nemesis's delaying proxy (`delayproxy.Proxy`), in this test's loop on loopback: a link
whose one end goes away is closed at its other end too, a reset as a close; else a NATS node
would keep a route that leads nowhere (seen in the soak when a node was killed mid-link)."""

from __future__ import annotations

import asyncio
import socket
import struct

import pytest

from .delayproxy import Proxy

HOST = "127.0.0.1"


async def _behind_a_proxy() -> tuple[asyncio.Queue[bytes], asyncio.Event, asyncio.Server, Proxy, int]:
    """A server that queues what it reads and says when its client went away, the proxy in
    front of it, and the proxy's port: (got, ended, server, proxy, port)."""
    got: asyncio.Queue[bytes] = asyncio.Queue()
    ended = asyncio.Event()

    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(1024):
                got.put_nowait(data)
        except ConnectionError:
            pass
        ended.set()
        writer.close()

    server = await asyncio.start_server(upstream, HOST, 0)
    proxy = Proxy()
    await proxy.listen(HOST, 0, HOST, server.sockets[0].getsockname()[1])  # a port of the kernel's
    return got, ended, server, proxy, proxy.servers[-1].sockets[0].getsockname()[1]


@pytest.mark.parametrize("reset", [False, True], ids=["closed", "reset"])
async def test_an_end_that_goes_away_closes_the_other_end(reset: bool) -> None:
    got, ended, server, proxy, port = await _behind_a_proxy()
    try:
        _, writer = await asyncio.open_connection(HOST, port)
        writer.write(b"hello")
        await writer.drain()
        assert await asyncio.wait_for(got.get(), 5) == b"hello"
        if reset:  # linger 0: the close sends RST, the proxy's read fails with ECONNRESET
            writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        else:
            writer.close()
        await asyncio.wait_for(ended.wait(), 5)
        assert proxy.links == 1
    finally:
        for s in [server, *proxy.servers]:
            s.close()


async def test_a_held_link_passes_nothing_read_after_the_hold_until_its_release() -> None:
    got, ended, server, proxy, port = await _behind_a_proxy()
    try:
        _, writer = await asyncio.open_connection(HOST, port)
        writer.write(b"before")
        await writer.drain()
        assert await asyncio.wait_for(got.get(), 5) == b"before"
        proxy.hold(HOST, HOST)
        writer.write(b"held")
        await writer.drain()
        getting = asyncio.create_task(got.get())
        done, _ = await asyncio.wait({getting}, timeout=0.5)  # (a wait for what must not come)
        assert not done, "a chunk read while the link was held went on"
        proxy.release()
        assert await asyncio.wait_for(getting, 5) == b"held"
        writer.close()
        # Every end closed before the loop is (a socket left to the garbage collector fails
        # whichever test of the worker runs next with its ResourceWarning).
        await asyncio.wait_for(ended.wait(), 5)
        links = [t for t in asyncio.all_tasks() if "accept" in t.get_coro().__qualname__]  # type: ignore[union-attr]
        await asyncio.wait_for(asyncio.gather(*links, return_exceptions=True), 5)
        await writer.wait_closed()
    finally:
        proxy.release()
        for s in [server, *proxy.servers]:
            s.close()
