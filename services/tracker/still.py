"""A stream checks its reader again before each thing it sends (docs/security.md, "a stolen
token"): a token revoked or expired, its principal disabled, the grant taken back since.

Bus connections are cut by the auth service within half a second; an HTTP stream
(`/v1/events?follow=true`, a job's, a pool's, the console's) went on sending the tenant's new
events to a revoked token for as long as it stayed open.

The check is in memory (the token against the identities this tracker folds, then the grant),
so it is made for every event, not now and then."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from aiohttp import web

Still = Callable[[], Awaitable[str | None]]
"""Why the reader may no longer be sent anything (the stream ends with it), or None."""


async def _always() -> str | None:
    return None


ALWAYS: Still = _always
"""Auth off, or a reader nothing can take back."""


def ended(reason: str) -> bytes:
    """The stream's last message: an `error` event saying why it ends (the token, the grant)."""
    return f"event: error\ndata: {json.dumps({'message': f'the stream ends: {reason}'})}\n\n".encode()


async def end_if_lost(response: web.StreamResponse, still: Still) -> bool:
    """True (and the `error` event written) when the reader lost its right to the stream."""
    why = await still()
    if why is None:
        return False
    await response.write(ended(why))
    return True
