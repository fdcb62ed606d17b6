"""Requests sent as the person who asked (docs/decisions/0017-http-writes.md).

An HTTP write (and a console form) becomes the bus request the CLI sends, on a NATS connection
the tracker opens with the requester's own token. The auth callout authenticates that token as
it does any client's, and nats-server lets the connection publish only that principal's request
subjects (`muster.ops.<tenant>.<principal>.*`): the planner reads the principal from the subject
and writes it as `by`. The tracker never names a principal itself, so a bug in it cannot act for
someone else; its own identity may send no operation at all.

Connections are kept for `idle_s` after their last use (one timer each, reset on use; nothing
polls), at most `max_open` of them (the least recently used is closed first). They never
reconnect: one the server closes (its token revoked, the auth service kicks it; expired, the
server cuts it at the token's `exp`) is forgotten, and the next request opens a new one, which
the callout refuses if the token no longer holds. Keys are digests of the tokens.

On a server that does not authorize connections (auth off) there is nobody to act as: requests
go on the tracker's own connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import nats.errors
import structlog
from nats.aio.client import Client

from muster.bus.connect import auth_required, connect, principal_of_token

log = structlog.get_logger("muster.tracker")

IDLE_S = 60.0
MAX_OPEN = 256
CONNECT_TIMEOUT_S = 3.0


class TokenRefused(Exception):
    """The bus refused the token (revoked or expired since the tracker's own check)."""


async def _quiet(*_: Any) -> None:
    return None


@dataclass
class _Held:
    nc: Client
    timer: asyncio.TimerHandle | None = None


@dataclass
class ActingBus:
    """Connections as the requesters, keyed by a digest of their tokens."""

    own: Client
    """The tracker's connection: where the servers are, and what auth-off requests use."""
    idle_s: float = IDLE_S
    max_open: int = MAX_OPEN
    opened: int = 0
    """Connections opened so far (for tests and metrics)."""
    _held: OrderedDict[str, _Held] = field(default_factory=OrderedDict)
    _opening: dict[str, asyncio.Future[Client]] = field(default_factory=dict)
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    """Set each time a held connection goes away (tests wait on it, then clear it)."""

    @property
    def acts(self) -> bool:
        """False on a server without authorization: requests go on the tracker's connection."""
        return auth_required(self.own)

    def open_count(self) -> int:
        return len(self._held)

    async def connection(self, token: str) -> Client:
        """A connection authenticated as `token`'s principal (opened, or the one held)."""
        if not self.acts:
            return self.own
        key = hashlib.sha256(token.encode()).hexdigest()
        held = self._held.get(key)
        if held is not None and held.nc.is_connected:
            self._touch(key, held)
            return held.nc
        pending = self._opening.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._open(key, token))
            self._opening[key] = pending
            pending.add_done_callback(lambda _: self._opening.pop(key, None))
        return await asyncio.shield(pending)

    async def _open(self, key: str, token: str) -> Client:
        principal = principal_of_token(token)
        servers = ",".join(u.geturl() for u in self.own.servers) or None
        holder: list[Client] = []

        async def closed() -> None:
            if holder and self._held.get(key) is not None and self._held[key].nc is holder[0]:
                self._forget(key)

        try:
            nc = await connect(servers, name=f"tracker-for-{principal}", token=token, allow_reconnect=False,
                               max_reconnect_attempts=0, connect_timeout=CONNECT_TIMEOUT_S, error_cb=_quiet,
                               disconnected_cb=_quiet, reconnected_cb=_quiet, closed_cb=closed)
        except (nats.errors.NoServersError, nats.errors.AuthorizationError, OSError) as err:
            if isinstance(err, nats.errors.AuthorizationError) or "authorization" in str(err).lower():
                raise TokenRefused(f"the bus refused {principal}'s token (revoked or expired)") from None
            raise
        holder.append(nc)
        self.opened += 1
        old = self._held.pop(key, None)
        if old is not None:
            await self._close(old)
        self._held[key] = _Held(nc)
        self._touch(key, self._held[key])
        while len(self._held) > self.max_open:
            oldest = next(iter(self._held))
            await self._close(self._held.pop(oldest))
        return nc

    def _touch(self, key: str, held: _Held) -> None:
        self._held.move_to_end(key)
        if held.timer is not None:
            held.timer.cancel()
        held.timer = asyncio.get_running_loop().call_later(self.idle_s, self._expire, key, held)

    def _expire(self, key: str, held: _Held) -> None:
        if self._held.get(key) is held:
            del self._held[key]
            _background(self._close(held))

    def _forget(self, key: str) -> None:
        held = self._held.pop(key, None)
        if held is not None and held.timer is not None:
            held.timer.cancel()
        self.closed.set()

    async def _close(self, held: _Held) -> None:
        if held.timer is not None:
            held.timer.cancel()
        with contextlib.suppress(Exception):
            await held.nc.close()
        self.closed.set()

    async def close(self) -> None:
        held, self._held = list(self._held.values()), OrderedDict()
        for h in held:
            await self._close(h)


_running: set[asyncio.Future[None]] = set()


def _background(work: Any) -> None:
    task = asyncio.ensure_future(work)
    _running.add(task)
    task.add_done_callback(_running.discard)
