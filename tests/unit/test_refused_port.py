"""`tests.ports.refused_port`: a port that refuses connections and that no server of another test
can take while a test counts on its refusal (`free_port()` released it at once: a server of
another worker could bind it before the test's connect)."""

from __future__ import annotations

import asyncio
import errno
import socket

import pytest

from tests.ports import refused_port


async def test_a_connect_to_it_is_refused() -> None:
    with refused_port() as port:
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.1", port)


async def test_no_server_can_bind_it_while_it_is_held_and_one_can_after() -> None:
    with refused_port() as port:
        # asyncio's servers (aiohttp's too) and Go's (nats-server) set SO_REUSEADDR: still refused.
        with pytest.raises(OSError) as taken:
            await asyncio.start_server(lambda r, w: None, "127.0.0.1", port)
        assert taken.value.errno == errno.EADDRINUSE
        with socket.socket() as plain, pytest.raises(OSError) as also:
            plain.bind(("0.0.0.0", port))
        assert also.value.errno == errno.EADDRINUSE
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", port)
    server.close()
    await server.wait_closed()
