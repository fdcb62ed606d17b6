"""POSTs to a URL a tenant chose, where the destination rule is checked at the connection itself.

The notifier's webhooks and the pools' callbacks both go through here (decision 38). An address
the URL names, and every address a name resolves to, is checked by the resolver the connection
uses, so there is no second lookup that DNS could answer otherwise (no check-then-connect gap);
the session has no DNS cache, so every new connection is resolved, and checked, anew. Callers
pass `allow_redirects=False`: a redirect would be a hop the rule did not see.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from .destinations import Allowed, literal, refused
from .tls.context import http_connector

LOOKUP_S = 3.0
"""How long a check at request time waits for a host to resolve (a slow resolver is a warning, not a refusal)."""


class Refused(Exception):
    """A name the connection was about to reach that resolves to an address the rule refuses
    (`why`: the rule), or does not resolve (`why` None). Both read the same to a tenant
    (`destinations.explain`); `cause` is for the operator's log."""

    def __init__(self, host: str, why: str | None, cause: str) -> None:
        super().__init__(f"{host}: {cause}")
        self.host, self.why, self.cause = host, why, cause


class CheckedResolver(AbstractResolver):
    """The connection's resolver: the addresses a name resolves to, unless the rule refuses one
    of them on the port to connect to; the connection is made to exactly these."""

    def __init__(self, allowed: Allowed, inner: AbstractResolver | None = None) -> None:
        self.allowed = allowed
        self.inner = inner or DefaultResolver()

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        try:
            found = await self.inner.resolve(host, port, family)
        except OSError as err:  # not aiohttp's own DNS error: a tenant could tell it from a refusal
            raise Refused(host, None, f"does not resolve ({err.strerror or str(err) or type(err).__name__})") from None
        why = refused(self.allowed, host, [ip for r in found if (ip := literal(r["host"])) is not None], port)
        if why is not None:
            raise Refused(host, why, f"resolves to a {why} address")
        return found

    async def close(self) -> None:
        await self.inner.close()


def session(resolver: CheckedResolver, timeout_s: float) -> aiohttp.ClientSession:
    """A client session whose every connection goes through `resolver` (none cached)."""
    connector = http_connector(resolver=resolver, use_dns_cache=False)  # a webhook may be HTTPS
    return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s), connector=connector)


def refused_address(allowed: Allowed, host: str, port: int) -> str | None:
    """The rule that refuses `host` when it is an address (a connection to one skips the resolver)."""
    ip = literal(host)
    return refused(allowed, host, [ip], port) if ip is not None else None


@dataclass(frozen=True)
class Lookup:
    """What a check at request time found (every POST is checked again anyway)."""

    refused: str | None = None
    """The rule that refuses the address the URL names: said to the tenant, who wrote it."""
    unreachable: bool = False
    """A name that does not resolve now to an address the sender may reach: whether it does not
    resolve or resolves to a refused address is not told apart (`destinations.explain`)."""
    timed_out: bool = False
    """No answer within the wait: a slow resolver, nothing about the name."""
    cause: str = ""
    """Which it was, for the operator's log only."""


async def look_up(resolver: CheckedResolver, host: str, port: int, within_s: float = LOOKUP_S) -> Lookup:
    why = refused_address(resolver.allowed, host, port)
    if why is not None or literal(host) is not None:
        return Lookup(why)
    try:
        await asyncio.wait_for(resolver.resolve(host, port, socket.AF_UNSPEC), within_s)
    except Refused as err:
        return Lookup(unreachable=True, cause=err.cause)
    except TimeoutError:
        return Lookup(timed_out=True, cause=f"did not resolve within {within_s:g} s")
    return Lookup()
