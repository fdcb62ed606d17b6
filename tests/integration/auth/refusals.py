"""Whether the server refused a raw client's JetStream API request, as the attack tests ask it."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Mapping

from nats.aio.client import Client
from nats.errors import TimeoutError as NatsTimeout
from nats.js.errors import APIError


async def refused(call: Awaitable[object]) -> bool:
    """A permission violation drops the request (it times out); an API error is a refusal too."""
    try:
        await call
    except (NatsTimeout, APIError):
        return True
    return False


async def raw_refused(nc: Client, subject: str, body: Mapping[str, object]) -> bool:
    """The same, for a request sent as raw JSON on `subject` (a form nats-py does not send). A
    direct get's answer of a status only (its 408 for a request it refuses) read nothing."""
    try:
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
