"""`http_connector`: a TLS connection closed in the middle of a response (a followed stream left
at its end, as `muster watch` does) leaves no socket for the garbage collector to find once the
command's loop is gone (python/cpython#118960; a CLI command run in a test's process left one,
reported by an unrelated test)."""

from __future__ import annotations

import asyncio
import gc
import ssl
import sys
import warnings
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
import trustme
from aiohttp.connector import NEEDS_CLEANUP_CLOSED

from muster.tls.context import http_connector


@pytest.fixture
def tls() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return server, client


@asynccontextmanager
async def _stream_server(context: ssl.SSLContext) -> AsyncIterator[int]:
    """A TLS server that answers with the start of an endless stream, then reads nothing more,
    so a client's closing handshake waits on it (as it may on a tracker busy elsewhere): the
    case where the socket outlives the client's loop is then certain, not a race."""
    left = asyncio.Event()
    writers: list[asyncio.StreamWriter] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"a\r\ndata: {}\n\n\r\n")
        await writer.drain()
        writer.transport.pause_reading()  # type: ignore[attr-defined]  # (a socket transport: it reads too)
        await left.wait()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=context)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        left.set()
        for w in writers:
            w.transport.abort()
        server.close()
        await server.wait_closed()


def _left_behind(connector: Callable[[ssl.SSLContext], Any], tls: tuple[ssl.SSLContext, ssl.SSLContext]) -> list[str]:
    """What the garbage collector warns of after three commands each read one message of a
    stream and leave it, each on a loop of its own, as a command run in-process does."""
    server, client = tls

    async def command(port: int) -> None:
        async with aiohttp.ClientSession(connector=connector(client)) as http, http.get(f"https://127.0.0.1:{port}/") as resp:
            await resp.content.readline()

    async def main() -> None:
        async with _stream_server(server) as port:
            for _ in range(3):
                await asyncio.to_thread(asyncio.run, command(port))

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", ResourceWarning)
        asyncio.run(main())
        gc.collect()
    return [str(w.message) for w in seen if issubclass(w.category, ResourceWarning)]


@pytest.mark.skipif(not NEEDS_CLEANUP_CLOSED, reason="this interpreter closes such sockets itself (3.12.8 and later)")
def test_a_tls_stream_left_mid_response_leaves_no_socket_behind(tls: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    assert _left_behind(lambda context: http_connector(ssl=context), tls) == []


@pytest.mark.skipif(not NEEDS_CLEANUP_CLOSED, reason="the leak is this interpreter's (before 3.12.8)")
def test_without_it_the_socket_is_left_for_the_garbage_collector(tls: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    """The test above would pass whatever the connector did if nothing leaked here."""
    left = _left_behind(lambda context: aiohttp.TCPConnector(ssl=context), tls)
    assert any("unclosed" in w for w in left), (sys.version_info, left)
