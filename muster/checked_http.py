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

LOOKUP_S = 3.0
"""How long a check at request time waits for a host to resolve (a slow resolver is a warning, not a refusal)."""


class Refused(Exception):
    """The rule refuses a host the connection was about to reach (`why`: the rule)."""

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
            raise Refused(host, why)
        return found

    async def close(self) -> None:
        await self.inner.close()


def session(resolver: CheckedResolver, timeout_s: float) -> aiohttp.ClientSession:
    """A client session whose every connection goes through `resolver` (none cached)."""
    connector = aiohttp.TCPConnector(resolver=resolver, use_dns_cache=False)
    return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s), connector=connector)


def refused_address(allowed: Allowed, host: str) -> str | None:
    """The rule that refuses `host` when it is an address (a connection to one skips the resolver)."""
    ip = literal(host)
    return refused(allowed, host, [ip]) if ip is not None else None


@dataclass(frozen=True)
class Lookup:
    """What a check at request time found: the rule that refuses the host, or why it could not
    be told now (`unresolved`: it may resolve later; every POST is checked again anyway)."""

    refused: str | None = None
    unresolved: str = ""
    timed_out: bool = False


async def look_up(resolver: CheckedResolver, host: str, port: int | None, within_s: float = LOOKUP_S) -> Lookup:
    why = refused_address(resolver.allowed, host)
    if why is not None or literal(host) is not None:
        return Lookup(why)
    try:
        await asyncio.wait_for(resolver.resolve(host, port or 0, socket.AF_UNSPEC), within_s)
    except Refused as err:
        return Lookup(err.why)
    except TimeoutError:
        return Lookup(unresolved=f"did not resolve within {within_s:g} s", timed_out=True)
    except OSError as err:
        return Lookup(unresolved=f"does not resolve now ({err.strerror or str(err) or type(err).__name__})")
    return Lookup()
