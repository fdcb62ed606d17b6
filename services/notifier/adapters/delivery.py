"""Delivering a notification: an HTTP POST signed with the subscription's secret (with aiohttp),
or a message on the tenant's bus subject (docs/governance.md).

The secret is a `secret://<name>` reference, resolved here from the notifier's secrets file
(`@secrets`, the same format as the provisioners': docs/secrets.md) and never logged, recorded
or answered: only its name is. So may the URL be (a Slack webhook's URL is its credential):
an error then names the reference, never the URL (at most its host, as a refused connection
says it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
from nats.aio.client import Client

from contracts.governance import Subscription
from contracts.secrets import REFERENCE
from muster.ports.clock import Clock

from ..domain.notices import slack
from ..domain.signing import DELIVERY, SIGNATURE, sign

TIMEOUT_S = 5.0


def _safe(url: str) -> str:
    """The URL as an error may say it: no query (it may carry a token), no user or password."""
    parts = urlsplit(url.split("?", 1)[0])
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


class Deliveries:
    def __init__(self, nc: Client | None, secrets: Mapping[str, Any], clock: Clock, timeout_s: float = TIMEOUT_S) -> None:
        self.nc, self.secrets, self.clock, self.timeout_s = nc, secrets, clock, timeout_s
        self._http: aiohttp.ClientSession | None = None

    async def __call__(self, tenant: str, sub: Subscription, body: dict[str, Any], nid: str) -> tuple[bool, int | None, str]:
        if sub.subject is not None:
            assert self.nc is not None
            await self.nc.publish(sub.subject, json.dumps(body).encode(), headers={DELIVERY: nid})
            return True, None, ""
        hook = sub.webhook
        assert hook is not None
        secret, missing = self._named(hook.secret)
        url, missing_url = (self._named(hook.url) if hook.url.startswith("secret://") else (hook.url, ""))
        if missing or missing_url:
            return False, None, missing or missing_url
        shown = hook.url if hook.url.startswith("secret://") else _safe(hook.url)
        data = json.dumps(slack(body) if hook.format == "slack" else body).encode()
        headers = {"Content-Type": "application/json", DELIVERY: nid,
                   SIGNATURE: sign(secret.encode(), data, int(self.clock.now().timestamp()))}
        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s))
        try:
            async with self._http.post(url, data=data, headers=headers) as resp:
                return resp.status < 300, resp.status, "" if resp.status < 300 else f"HTTP {resp.status} from {shown}"
        except (TimeoutError, aiohttp.ClientError) as err:
            text = (str(err) or type(err).__name__).replace(url, shown)  # an invalid URL's error quotes it whole
            return False, None, f"{shown}: {text}"

    def _named(self, reference: str) -> tuple[str, str]:
        """(the value of a `secret://<name>`, '') or ('', why there is none)."""
        found = REFERENCE.fullmatch(reference)
        value = self.secrets.get(found.group(1)) if found else None
        if not isinstance(value, str) or not value:
            return "", f"secret {found.group(1) if found else '?'!r} is not in the notifier's secrets file (under '@secrets')"
        return value, ""

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
