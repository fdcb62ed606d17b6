"""Raw connections with services' own credentials, for the attack tests of what each service
may do on the bus (its streams, consumers, reads): one shape, shared."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from nats.aio.client import Client

from muster.bus.streams import ensure_streams

from .conftest import Authed
from .watched import WatchedClient

SCOPED = ("pool", "solver", "governance", "notifier")
"""The services whose reads of the log and of its bodies name their filters (decision 0057)."""


@dataclass
class World:
    system: Client
    services: dict[str, Client]
    violations: list[str]
    """Every asynchronous error the services' connections met, lowercased."""

    def clean(self) -> bool:
        return not any("permissions violation" in v for v in self.violations)


@asynccontextmanager
async def service_world(authed: Authed, kinds: Iterable[str]) -> AsyncIterator[World]:
    """A super admin's connection (the streams declared) and one of each service kind, as
    `<kind>-1`, with its own token."""
    kinds = tuple(kinds)
    tokens = await authed.people({f"{kind}-1": {"role": "service", "service": kind} for kind in kinds})
    system = await authed.raw(authed.system_token, "sys")
    await ensure_streams(system.jetstream())
    violations: list[str] = []

    async def on_error(err: Exception) -> None:
        violations.append(str(err).lower())

    services = {kind: await authed.raw(tokens[f"{kind}-1"], f"{kind}-1", WatchedClient, error_cb=on_error) for kind in kinds}
    try:
        yield World(system, services, violations)
    finally:
        for nc in services.values():
            await nc.close()
        await system.close()
