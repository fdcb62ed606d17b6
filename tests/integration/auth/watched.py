"""A raw nats-py client whose attack requests end as soon as the server says it dropped them.

A publish its permissions refuse is dropped: a request waits out its whole timeout for an
answer that never comes (2 s per attack, which the attack tests summed), while the server has
told the client at once (`-ERR 'Permissions Violation for Publish to "<subject>"'`, which nats-py
gives to the connection's error callback, lowercased). A connection's publish rights are fixed
at its connect (its token's, by subject; no attacker has the server's rights to publish to the
reply subjects it was sent), so the violation says the request pending on that subject was
dropped: it ends with `Dropped` (a nats timeout, what it would have met). The timeout stays the
fallback: a violation the client cannot tell apart (two subjects of one lowercase form), a
refusal of another kind, a client that is not watched. test_watched.py checks that an allowed
request among refused ones is still answered."""

from __future__ import annotations

import asyncio
from collections import defaultdict, deque
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeout

VIOLATION = 'nats: permissions violation for publish to "'

_watching: ContextVar[bool] = ContextVar("watching", default=False)


class Dropped(NatsTimeout):
    """The server said it dropped the request: no answer comes, the timeout would have."""


@contextmanager
def watching() -> Iterator[None]:
    """Within it, a `WatchedClient`'s requests end at their violation (the attack's own, not the
    other requests of a test, which keep their timeouts)."""
    token = _watching.set(True)
    try:
        yield
    finally:
        _watching.reset(token)


class WatchedClient(Client):
    """A plain client (the same protocol, the same calls) that notes its requests' subjects."""

    def __init__(self) -> None:
        super().__init__()
        self._awaiting_drop: dict[str, deque[asyncio.Event]] = defaultdict(deque)
        self._published_as: dict[str, set[str]] = defaultdict(set)
        """Each subject published, by its lowercase form (the form nats-py gives a violation in)."""

    async def connect(self, *args: Any, **options: Any) -> None:
        told = options.get("error_cb")

        async def on_error(err: Exception) -> None:
            self._violated(str(err))
            if told is not None:
                await told(err)

        await super().connect(*args, **{**options, "error_cb": on_error})

    async def publish(self, subject: str, payload: bytes = b"", reply: str = "", headers: dict[str, str] | None = None) -> None:
        self._published_as[subject.lower()].add(subject)
        await super().publish(subject, payload, reply, headers)

    async def request(self, subject: str, payload: bytes = b"", timeout: float = 0.5, old_style: bool = False,
                      headers: dict[str, Any] | None = None) -> Msg:
        if not _watching.get():
            return await super().request(subject, payload, timeout, old_style, headers)
        dropped = asyncio.Event()
        self._awaiting_drop[subject].append(dropped)
        asked = asyncio.ensure_future(super().request(subject, payload, timeout, old_style, headers))
        told = asyncio.ensure_future(dropped.wait())
        try:
            await asyncio.wait((asked, told), return_when=asyncio.FIRST_COMPLETED)
        finally:
            told.cancel()
            if dropped in self._awaiting_drop[subject]:
                self._awaiting_drop[subject].remove(dropped)
            answered = asked.done()
            if not answered:
                asked.cancel()  # (nats-py then forgets its answer's future)
        if answered:
            return asked.result()
        raise Dropped

    def _violated(self, message: str) -> None:
        if not (message.startswith(VIOLATION) and message.endswith('"')):
            return  # (not a publish's: a subscription's, a reply subject's)
        cased = self._published_as[message[len(VIOLATION):-1]]
        if len(cased) == 1 and self._awaiting_drop[subject := next(iter(cased))]:
            self._awaiting_drop[subject].popleft().set()  # (the server answers a connection's publishes in their order)
