"""Delivering a notification: an HTTP POST signed with the subscription's secret (with aiohttp),
or a message on the tenant's bus subject (docs/governance.md).

The secret is a `secret://<name>` reference, resolved here from the notifier's secrets file
(the tenant's own under `@tenants`, else the shared `@secrets`: domain/secrets.py) and never
logged, recorded or answered: only its name is. So may the URL be (a Slack webhook's URL is its
credential): an error then names the reference, never the URL (at most its host, as a refused
connection says it).

Where a webhook may go (muster/destinations.py): an address the URL names, and every address a
name resolves to, is checked at the moment of connecting, by the resolver the connection uses
(muster/checked_http.py: no second lookup that DNS could answer otherwise); redirects are not
followed. An address the rule refuses is the last attempt; a name that does not resolve to a
public address is a failed attempt like any other, whether it resolves inside or not at all (the
tenant is not told which: the log says it, for the operator).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import aiohttp
import structlog
from aiohttp.abc import AbstractResolver
from nats.aio.client import Client

from contracts.governance import Subscription
from muster import tracing
from muster.checked_http import LOOKUP_S, CheckedResolver, Refused, look_up, refused_address, session
from muster.destinations import NOTIFIER, Allowed, DestinationRefused, explain, printable, target
from muster.ports.clock import Clock

from ..domain.notices import slack
from ..domain.secrets import NotifierSecrets
from ..domain.signing import DELIVERY, SIGNATURE, sign

log = structlog.get_logger("muster.notifier")

TIMEOUT_S = 5.0
CHECK_RESOLVE_S = LOOKUP_S
"""How long `notify add` waits for a webhook's host to resolve (a slow resolver is a warning, not a refusal)."""


class Deliveries:
    def __init__(self, nc: Client | None, secrets: Mapping[str, Any] | NotifierSecrets, clock: Clock,
                 timeout_s: float = TIMEOUT_S, allowed: Allowed | None = None,
                 resolver: AbstractResolver | None = None) -> None:
        self.nc, self.clock, self.timeout_s = nc, clock, timeout_s
        self.secrets = secrets if isinstance(secrets, NotifierSecrets) else NotifierSecrets(shared=dict(secrets))
        self.allowed = allowed or Allowed()
        self._inner = resolver
        self._resolvers: dict[str, CheckedResolver] = {}
        self._http: dict[str, aiohttp.ClientSession] = {}
        self._retired: list[tuple[aiohttp.ClientSession | None, CheckedResolver]] = []

    def reconfigure(self, secrets: NotifierSecrets, allowed: Allowed) -> None:
        """The operator's settings read again (SIGHUP: services/notifier/settings.py). A new
        allowlist gives each tenant a new checked resolver, and so a new session, from the next
        delivery on; the old ones are closed with the notifier, not now: a delivery in flight
        still uses its session."""
        self.secrets = secrets
        if allowed != self.allowed:
            self.allowed = allowed
            self._retired += [(self._http.get(t), r) for t, r in self._resolvers.items()]
            self._resolvers, self._http = {}, {}

    def resolver(self, tenant: str) -> CheckedResolver:
        """The tenant's checked resolver: what the operator allows every tenant, and this one
        (`Allowed.for_tenant`); its connections are its own (a session each), none shared."""
        if tenant not in self._resolvers:
            self._resolvers[tenant] = CheckedResolver(self.allowed.for_tenant(tenant), self._inner)
        return self._resolvers[tenant]

    async def __call__(self, tenant: str, sub: Subscription, body: dict[str, Any], nid: str) -> tuple[bool, int | None, str]:
        if sub.subject is not None:
            assert self.nc is not None
            # the attempt's span (docs/tracing.md): a receiver may join the job's trace
            await self.nc.publish(sub.subject, json.dumps(body).encode(), headers=tracing.headers({DELIVERY: nid}))
            return True, None, ""
        hook = sub.webhook
        assert hook is not None
        secret, missing = self.secrets.value(tenant, hook.secret)
        url, missing_url = self._url(tenant, hook.url)
        if missing or missing_url:
            return False, None, missing or missing_url
        shown = hook.url if hook.url.startswith("secret://") else printable(hook.url)
        hidden = self._hidden(hook.url)
        where = target(url)
        if isinstance(where, str):
            return False, None, f"{shown}: {where}"
        host, port = where
        resolver = self.resolver(tenant)
        if why := refused_address(resolver.allowed, host, port):  # an address is not resolved: checked here
            raise DestinationRefused(explain(why, host, hidden, NOTIFIER, port))
        data = json.dumps(slack(body) if hook.format == "slack" else body).encode()
        headers = tracing.headers({"Content-Type": "application/json", DELIVERY: nid,
                                   SIGNATURE: sign(secret.encode(), data, int(self.clock.now().timestamp()))})
        if tenant not in self._http:
            self._http[tenant] = session(resolver, self.timeout_s)
        try:
            async with self._http[tenant].post(url, data=data, headers=headers, allow_redirects=False) as resp:
                if resp.status < 300:
                    return True, resp.status, ""
                if resp.status < 400:
                    return False, resp.status, (f"HTTP {resp.status} from {shown}: the notifier does not follow redirects "
                                                "(subscribe the URL it redirects to)")
                return False, resp.status, f"HTTP {resp.status} from {shown}"
        except Refused as err:  # a name (an address skips the resolver): retried like any failure, said alike
            log.info("webhook host not reachable", tenant=tenant, subscription=sub.name, host=hidden or err.host, cause=err.cause)
            return False, None, explain(err.why, err.host, hidden, NOTIFIER, port)
        except TimeoutError:  # (its text is empty: it said `TimeoutError`, which told a tenant little)
            return False, None, f"{shown}: no answer within {self.timeout_s:g} s"
        except aiohttp.ClientError as err:
            text = (str(err) or type(err).__name__).replace(url, shown)  # an invalid URL's error quotes it whole
            return False, None, f"{shown}: {text}"

    async def check(self, tenant: str, sub: Subscription) -> tuple[list[str], list[str]]:
        """(problems, warnings) of a subscription about to be stored (`notify add`): the secrets it
        names that this notifier lacks, an address the rule refuses; a name that does not resolve
        to a public address now is a warning (it may yet), whether it resolves inside or not at
        all. Says nothing a delivery would not say."""
        hook = sub.webhook
        if hook is None:
            return [], []
        label = f"subscription {sub.name!r}"
        problems = [f"{label}: webhook.secret: {why}" for why in [self.secrets.value(tenant, hook.secret)[1]] if why]
        url, missing = self._url(tenant, hook.url)
        if missing:
            return [*problems, f"{label}: webhook.url: {missing}"], []
        hidden = self._hidden(hook.url)
        where = target(url)
        if isinstance(where, str):
            said = f"{hook.url} does not hold an http(s) URL with a host" if hidden else f"{printable(url)}: {where}"
            return [*problems, f"{label}: webhook.url: {said}"], []
        host, port = where
        found = await look_up(self.resolver(tenant), host, port, CHECK_RESOLVE_S)
        if found.refused is not None:
            problems.append(f"{label}: webhook.url: {explain(found.refused, host, hidden, NOTIFIER, port)}")
        elif found.unreachable:
            log.info("webhook host not reachable", tenant=tenant, subscription=sub.name, host=hidden or host, cause=found.cause)
            return problems, [f"{label}: {explain(None, host, hidden, NOTIFIER, port)}; every delivery fails until it does"]
        elif found.timed_out:
            return problems, [f"{label}: {hidden or host} {found.cause}: a delivery fails if it does not when it is sent"]
        return problems, []

    def _url(self, tenant: str, url: str) -> tuple[str, str]:
        return self.secrets.value(tenant, url) if url.startswith("secret://") else (url, "")

    @staticmethod
    def _hidden(url: str) -> str | None:
        """How an error names the host of a URL given by reference (not at all: the reference)."""
        return f"the URL of {url}" if url.startswith("secret://") else None

    async def close(self) -> None:
        for http, resolver in [*((self._http.get(t), r) for t, r in self._resolvers.items()), *self._retired]:
            if http is not None:
                await http.close()
            await resolver.close()  # (a connector closes only a resolver it made)
        self._http, self._resolvers, self._retired = {}, {}, []
