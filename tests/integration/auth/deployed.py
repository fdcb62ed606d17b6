"""What the tests of a whole deployment's tenants share (`test_tenant_cli.py`, `test_grant_leaks.py`):
a command's outcome, the demo catalog with a quick simulated provider, and the auth service's
requests as the session's system identity."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nats.aio.client import Client

from contracts import subjects
from muster.bus.connect import connect, principal_of
from muster.bus.eventstore import EventStore
from muster.catalog.files import load_catalog
from muster.catalog.store import apply_catalog
from muster.runtime.supervisor import Deployment
from tests import cli_in_process

DEMO = Path(__file__).parents[3] / "muster" / "demo" / "catalog"


@dataclass
class Ran:
    code: int
    out: str
    err: str


async def run_as(deployment: Deployment, token: str, *args: str) -> Ran:
    """A `muster` command with `token` alone (no variable of the test's environment), on the
    deployment's bus and tracker; the token never in its output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSTER_") and k != "NATS_URL"}
    env.update(MUSTER_TOKEN=token, NATS_URL=deployment.nats_url or "", COLUMNS="200", MUSTER_TRACKER_URL=deployment.tracker_url)
    ran = Ran(*await cli_in_process.run(args, env, 120))
    assert token not in ran.out + ran.err
    return ran


async def quick_demo_catalog(nc: Client, tenants: tuple[str, ...]) -> None:
    """The demo catalog in each tenant, its simulated machines made in 0-10 ms."""
    catalog = load_catalog(DEMO)
    sim = catalog.providers["sim"]
    catalog.providers["sim"] = sim.model_copy(update={"provisioner": {**sim.provisioner, "latency_ms": "0-10"}})
    for tenant in tenants:
        await apply_catalog(EventStore(nc), tenant, catalog, by="test")


def auth_requests(nc: Client) -> Callable[..., Awaitable[dict[str, Any]]]:
    """`ask(verb, **body)`: the auth service's answer's data, asserted ok."""
    async def ask(verb: str, **body: Any) -> dict[str, Any]:
        reply = await nc.request(subjects.auth_request(principal_of(nc), verb), json.dumps(body).encode(), timeout=10)
        answer = json.loads(reply.data)
        assert answer["ok"], answer
        return dict(answer.get("data") or {})

    return ask


@asynccontextmanager
async def deployed(base: Path, tenants: tuple[str, ...]) -> AsyncIterator[tuple[Deployment, Client]]:
    """Every process as `muster up` starts them, serving `tenants` (each with the quick demo
    catalog), and a connection as the session's system identity; stopped after."""
    deployment = Deployment(base / "deploy", tenants=",".join(tenants), extra_args={"provisioner": ["--work-dir", str(base / "work")]})
    await deployment.start()
    try:
        nc = await connect(deployment.nats_url, name="test")
        try:
            await quick_demo_catalog(nc, tenants)
            yield deployment, nc
        finally:
            await nc.close()
    finally:
        await deployment.stop()
