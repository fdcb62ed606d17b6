"""Telling a requester that its hosts were granted, or that its request ended: a message on a
bus subject, or an HTTP POST retried with backoff (Adobe's "post back").

Delivery is at least once: the pool records `CallbackDelivered` after it; a pool service that
dies before recording sends again when it starts (the callbacks still due are rebuilt from the
log). Receivers use `request_id` and `type` to drop repeats.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import aiohttp
import structlog
from nats.aio.client import Client

from contracts.pools import Callback

log = structlog.get_logger("muster.pool")


@dataclass
class CallbackSender:
    nc: Client
    attempts: int = 5
    backoff_s: float = 0.5
    timeout_s: float = 5.0

    async def send(self, target: Callback, body: dict[str, Any]) -> tuple[int, str]:
        """Deliver; returns (attempts made, '' or the last error)."""
        data = json.dumps(body).encode()
        if target.subject:
            await self.nc.publish(target.subject, data)
            return 1, ""
        assert target.url is not None
        error = ""
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            for attempt in range(1, self.attempts + 1):
                try:
                    async with http.post(target.url, data=data, headers={"Content-Type": "application/json"}) as resp:
                        if resp.status < 300:
                            return attempt, ""
                        error = f"HTTP {resp.status}"
                except (TimeoutError, aiohttp.ClientError) as err:
                    error = str(err) or type(err).__name__
                log.info("callback failed; will retry", url=_safe(target.url), attempt=attempt, error=error)
                if attempt < self.attempts:
                    await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1))  # backoff between retries of one send
        return self.attempts, error


def _safe(url: str) -> str:
    """A URL for logs: without its query string, which may carry a token."""
    return url.split("?", 1)[0]


def target_text(target: Callback) -> str:
    return target.subject or _safe(target.url or "")
