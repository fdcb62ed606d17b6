"""Loopback ports for tests that need one where nothing listens (a collector, a cloud, an sshd or
a NATS that is down): held for the test, so no server of another test takes it meanwhile.

`free_port()` (muster/bus/server.py) is for a server started a moment later: it releases the port
it chose. A test that only needs a refusal used it too, and another worker's server could bind
that port between the choice and the test's connect, which then reached a stranger's server
(another test's nats-server, sshd or tracker) instead of being refused. A socket bound and never
listening refuses every connection (the kernel answers its SYN with a reset, ECONNREFUSED) and
keeps the port from any other bind, SO_REUSEADDR or not, until it is closed.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def refused_port() -> Iterator[int]:
    """A 127.0.0.1 port that refuses connections for as long as the block runs."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield int(held.getsockname()[1])
