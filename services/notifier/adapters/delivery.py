"""Delivering a notification: an HTTP POST signed with the subscription's secret (with aiohttp),
or a message on the tenant's bus subject (docs/governance.md).

The secret is a `secret://<name>` reference, resolved here from the notifier's secrets file
(the tenant's own under `@tenants`, else the shared `@secrets`: domain/secrets.py) and never
logged, recorded or answered: only its name is. So may the URL be (a Slack webhook's URL is its
credential): an error then names the reference, never the URL (at most its host, as a refused
connection says it).

Where a webhook may go (domain/destinations.py): an address the URL names, and every address a
name resolves to, is checked at the moment of connecting, by the resolver the connection uses
(no second lookup that DNS could answer otherwise); redirects are not followed.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver
from nats.aio.client import Client

from contracts.governance import Subscription
from muster.ports.clock import Clock

from ..domain.destinations import Allowed, DestinationRefused, explain, literal, refused
from ..domain.notices import slack
from ..domain.secrets import NotifierSecrets
from ..domain.signing import DELIVERY, SIGNATURE, sign

TIMEOUT_S = 5.0
CHECK_RESOLVE_S = 3.0
"""How long `notify add` waits for a webhook's host to resolve (a slow resolver is a warning, not a refusal)."""


def _safe(url: str) -> str:
    """The URL as an error may say it: no query (it may carry a token), no user or password."""
    parts = urlsplit(url.split("?", 1)[0])
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


class _Refused(Exception):
    def __init__(self, host: str, why: str) -> None:
        super().__init__(f"{host}: {why}")
        self.host, self.why = host, why


class CheckedResolver(AbstractResolver):
    """The connection's resolver: the addresses a name resolves to, unless the rule refuses one
    of them; the connection is made to exactly these."""

    def __init__(self, allowed: Allowed, inner: AbstractResolver | None = None) -> None:
        self.allowed = allowed
        self.inner = inner or DefaultResolver()

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        found = await self.inner.resolve(host, port, family)
        why = refused(self.allowed, host, [ip for r in found if (ip := literal(r["host"])) is not None])
        if why is not None:
            raise _Refused(host, why)
        return found

    async def close(self) -> None:
        await self.inner.close()


class Deliveries:
    def __init__(self, nc: Client | None, secrets: Mapping[str, Any] | NotifierSecrets, clock: Clock,
                 timeout_s: float = TIMEOUT_S, allowed: Allowed | None = None,
                 resolver: AbstractResolver | None = None) -> None:
        self.nc, self.clock, self.timeout_s = nc, clock, timeout_s
        self.secrets = secrets if isinstance(secrets, NotifierSecrets) else NotifierSecrets(shared=dict(secrets))
        self.allowed = allowed or Allowed()
        self.resolver = CheckedResolver(self.allowed, resolver)
        self._http: aiohttp.ClientSession | None = None

    async def __call__(self, tenant: str, sub: Subscription, body: dict[str, Any], nid: str) -> tuple[bool, int | None, str]:
        if sub.subject is not None:
            assert self.nc is not None
            await self.nc.publish(sub.subject, json.dumps(body).encode(), headers={DELIVERY: nid})
            return True, None, ""
        hook = sub.webhook
        assert hook is not None
        secret, missing = self.secrets.value(tenant, hook.secret)
        url, missing_url = self._url(tenant, hook.url)
        if missing or missing_url:
            return False, None, missing or missing_url
        shown = hook.url if hook.url.startswith("secret://") else _safe(hook.url)
        host = urlsplit(url).hostname or ""
        ip = literal(host)
        if ip is not None and (why := refused(self.allowed, host, [ip])):  # an address is not resolved: checked here
            raise DestinationRefused(explain(why, host, self._hidden(hook.url)))
        data = json.dumps(slack(body) if hook.format == "slack" else body).encode()
        headers = {"Content-Type": "application/json", DELIVERY: nid,
                   SIGNATURE: sign(secret.encode(), data, int(self.clock.now().timestamp()))}
        if self._http is None:
            # No DNS cache: every new connection is resolved, so checked, anew.
            connector = aiohttp.TCPConnector(resolver=self.resolver, use_dns_cache=False)
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s), connector=connector)
        try:
            async with self._http.post(url, data=data, headers=headers, allow_redirects=False) as resp:
                if resp.status < 300:
                    return True, resp.status, ""
                if resp.status < 400:
                    return False, resp.status, (f"HTTP {resp.status} from {shown}: the notifier does not follow redirects "
                                                "(subscribe the URL it redirects to)")
                return False, resp.status, f"HTTP {resp.status} from {shown}"
        except _Refused as err:
            raise DestinationRefused(explain(err.why, err.host, self._hidden(hook.url))) from None
        except (TimeoutError, aiohttp.ClientError) as err:
            text = (str(err) or type(err).__name__).replace(url, shown)  # an invalid URL's error quotes it whole
            return False, None, f"{shown}: {text}"

    async def check(self, tenant: str, sub: Subscription) -> tuple[list[str], list[str]]:
        """(problems, warnings) of a subscription about to be stored (`notify add`): the secrets it
        names that this notifier lacks, a destination the rule refuses; a host that does not
        resolve now is a warning (it may yet). Says nothing a delivery would not say."""
        hook = sub.webhook
        if hook is None:
            return [], []
        label = f"subscription {sub.name!r}"
        problems = [f"{label}: webhook.secret: {why}" for why in [self.secrets.value(tenant, hook.secret)[1]] if why]
        url, missing = self._url(tenant, hook.url)
        if missing:
            return [*problems, f"{label}: webhook.url: {missing}"], []
        hidden = self._hidden(hook.url)
        try:
            parts = urlsplit(url)
            host, port = parts.hostname or "", parts.port
        except ValueError:
            host, port = "", None
        if hidden is not None and (not host or parts.scheme not in ("http", "https")):
            return [*problems, f"{label}: webhook.url: {hook.url} does not hold an http(s) URL with a host"], []
        ip = literal(host)
        if ip is not None:
            why = refused(self.allowed, host, [ip])
            return [*problems, *([f"{label}: webhook.url: {explain(why, host, hidden)}"] if why else [])], []
        try:
            await asyncio.wait_for(self.resolver.resolve(host, port or 0, socket.AF_UNSPEC), CHECK_RESOLVE_S)
        except _Refused as err:
            problems.append(f"{label}: webhook.url: {explain(err.why, err.host, hidden)}")
        except TimeoutError:
            return problems, [f"{label}: {hidden or host} did not resolve within {CHECK_RESOLVE_S:g} s: a delivery fails if it "
                              "does not when it is sent"]
        except OSError as err:
            why = err.strerror or str(err) or type(err).__name__
            return problems, [f"{label}: {hidden or host} does not resolve now ({why}): every delivery fails until it does"]
        return problems, []

    def _url(self, tenant: str, url: str) -> tuple[str, str]:
        return self.secrets.value(tenant, url) if url.startswith("secret://") else (url, "")

    @staticmethod
    def _hidden(url: str) -> str | None:
        """How an error names the host of a URL given by reference (not at all: the reference)."""
        return f"the URL of {url}" if url.startswith("secret://") else None

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
        await self.resolver.close()  # (a connector closes only a resolver it made)
