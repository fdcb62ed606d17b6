"""Telling a requester that its hosts were granted, or that its request ended: a message on a
bus subject, or an HTTP POST retried with backoff (Adobe's "post back").

Delivery is at least once: the pool records `CallbackDelivered` after it; a pool service that
dies before recording sends again when it starts (the callbacks still due are rebuilt from the
log). Receivers use `request_id` and `type` to drop repeats.

A URL is a tenant's choice and the POST leaves from inside the deployment, so it goes where the
notifier's webhooks may go (decision 38, `muster/destinations.py`): public addresses, unless the
operator allows more (`--webhook-allow`; an entry of one tenant's, `acme=HOST`, for that tenant's
callbacks only, as for its webhooks: `Allowed.for_tenant`). It is checked when the request comes (`check`) and at
every connection (`muster/checked_http.py`); redirects are not followed. A POST to an address
the rule refuses is not tried again (each try would be another probe); a name that does not
resolve to a public address is a failed attempt like any other, and its words do not say whether
it resolves inside the deployment or not at all (the log says it, for the operator).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import structlog
from aiohttp.abc import AbstractResolver
from nats.aio.client import Client

from contracts.pools import Callback
from muster.checked_http import CheckedResolver, Refused, look_up, refused_address, session
from muster.destinations import POOL, Allowed, explain, printable, target

log = structlog.get_logger("muster.pool")


@dataclass
class CallbackSender:
    nc: Client
    attempts: int = 5
    backoff_s: float = 0.5
    timeout_s: float = 5.0
    allowed: Allowed = field(default_factory=Allowed)
    """Where a URL may go besides public addresses (the operator's `--webhook-allow`)."""
    resolver: AbstractResolver | None = None
    """How names resolve (tests: a resolver of their own); every answer is checked."""

    _checked: dict[str, CheckedResolver] = field(default_factory=dict, init=False, repr=False)
    _retired: list[CheckedResolver] = field(default_factory=list, init=False, repr=False)

    def reconfigure(self, allowed: Allowed) -> None:
        """The operator's allow file read again (SIGHUP: muster/allowfile.py). Each tenant gets a
        new checked resolver from the next check or send on; the old ones are closed with the
        sender, not now: a send in flight still resolves with its own."""
        if allowed != self.allowed:
            self.allowed = allowed
            self._retired += self._checked.values()
            self._checked = {}

    def checked(self, tenant: str) -> CheckedResolver:
        """The tenant's checked resolver: the entries of every tenant and its own; another
        tenant's allowed receiver is refused to it as if nothing allowed it."""
        if tenant not in self._checked:  # (made on the loop: aiohttp's resolver needs one)
            self._checked[tenant] = CheckedResolver(self.allowed.for_tenant(tenant), self.resolver)
        return self._checked[tenant]

    async def check(self, callback: Callback, tenant: str) -> tuple[str, str]:
        """(why the rule refuses the callback's URL, '') or ('', a warning: its host does not
        resolve to a public address now, or not in time) or ('', ''), before a request that names
        it is recorded (no prefix: the asker says which field)."""
        if callback.url is None:
            return "", ""
        where = target(callback.url)
        if isinstance(where, str):
            return f"{printable(callback.url)}: {where}", ""
        host, port = where
        found = await look_up(self.checked(tenant), host, port)
        if found.refused is not None:
            return explain(found.refused, host, sender=POOL, port=port), ""
        if found.unreachable:
            log.info("callback host not reachable", host=host, cause=found.cause)
            return "", f"{explain(None, host, sender=POOL, port=port)}; every callback fails until it does"
        if found.timed_out:
            return "", f"{host} {found.cause}: a callback fails if it does not when it is sent"
        return "", ""

    async def send(self, callback: Callback, body: dict[str, Any], tenant: str) -> tuple[int, str]:
        """Deliver; returns (attempts made, '' or the last error)."""
        data = json.dumps(body).encode()
        if callback.subject:
            await self.nc.publish(callback.subject, data)
            return 1, ""
        assert callback.url is not None
        where = target(callback.url)
        if isinstance(where, str):
            return 1, f"{printable(callback.url)}: {where}"
        host, port = where
        checked = self.checked(tenant)
        if why := refused_address(checked.allowed, host, port):  # an address is not resolved: checked here
            return 1, f"refused: {explain(why, host, sender=POOL, port=port)}"
        error = ""
        async with session(checked, self.timeout_s) as http:
            for attempt in range(1, self.attempts + 1):
                try:
                    async with http.post(callback.url, data=data, headers={"Content-Type": "application/json"},
                                         allow_redirects=False) as resp:
                        if resp.status < 300:
                            return attempt, ""
                        error = f"HTTP {resp.status}" + (": the pool service does not follow redirects" if resp.status < 400 else "")
                except Refused as err:  # a name (an address skips the resolver): tried again, said alike either way
                    log.info("callback host not reachable", host=err.host, cause=err.cause)
                    error = explain(err.why, err.host, sender=POOL, port=port)
                except (TimeoutError, aiohttp.ClientError) as err:
                    error = (str(err) or type(err).__name__).replace(callback.url, printable(callback.url))
                log.info("callback failed; will retry", url=printable(callback.url), attempt=attempt, error=error)
                if attempt < self.attempts:
                    await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1))  # backoff between retries of one send
        return self.attempts, error

    async def close(self) -> None:
        for checked in [*self._retired, *self._checked.values()]:
            await checked.close()


def target_text(target: Callback) -> str:
    return target.subject or printable(target.url or "")
