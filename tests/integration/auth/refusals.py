"""Whether the server refused a raw client's JetStream API request, as the attack tests ask it.
On a `WatchedClient` a request the server dropped ends at the server's word (watched.py), on
any other client at its timeout."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Mapping

from nats.aio.client import Client
from nats.errors import TimeoutError as NatsTimeout
from nats.js.errors import APIError

from .watched import watching


async def refused(call: Awaitable[object]) -> bool:
    """A permission violation drops the request (it times out, or ends at the server's word); an
    API error is a refusal too."""
    try:
        with watching():
            await call
    except (NatsTimeout, APIError):
        return True
    return False


async def raw_refused(nc: Client, subject: str, body: Mapping[str, object]) -> bool:
    """The same, for a request sent as raw JSON on `subject` (a form nats-py does not send). A
    direct get's answer of a status only (its 408 for a request it refuses) read nothing."""
    try:
        with watching():
            reply = await nc.request(subject, json.dumps(body).encode(), timeout=2)
    except NatsTimeout:
        return True
    if not reply.data:
        return True
    try:
        answer = json.loads(reply.data)
    except ValueError:  # (a message read, not an API answer: a body's compressed part)
        return False
    return isinstance(answer, dict) and "error" in answer


async def unanswered(nc: Client, subject: str, body: bytes = b"") -> bool:
    """Whether a request on `subject` went unanswered (dropped): no answer at all, not even an error."""
    try:
        with watching():
            await nc.request(subject, body, timeout=2)
    except NatsTimeout:
        return True
    return False


async def let_through(attacks: Mapping[str, Awaitable[bool]]) -> list[str]:
    """The attacks the server did not refuse, each named. They run at once: a refusal the client
    is not told of waits out its timeout (2 s), and one after the other those added up."""
    outcomes = await asyncio.gather(*attacks.values())
    return [attack for attack, was_refused in zip(attacks, outcomes, strict=True) if not was_refused]
