"""A deployment for the tracker's write routes, with real tokens: a nats-server with the auth
callout, the auth service, a planner, a solver and a provisioner (quick simulated tasks), and
the tracker listening on a real port, all in one event loop on a thread of their own (so that
blocking clients such as schemathesis can call it). One per test package and worker.

People of tenant `default`: `writer` (write and execute on every cluster, read on the catalog),
`maker` (write on every cluster, nothing on the catalog), `reader` (read on the tenant), `onec`
(grants on one cluster, given by a test); `outsider` of tenant `other` (write on
every cluster there); `root` (super admin). Services run as `sys` (the system identity), the
tracker as its own service principal.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Awaitable, Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web

from contracts import subjects
from muster.bus.connect import connect, read_credentials_file
from muster.bus.eventstore import EventStore
from muster.bus.server import NatsServer
from muster.bus.streams import ensure_streams
from muster.catalog.files import load_catalog
from muster.catalog.store import apply_catalog
from services.auth.bootstrap import Bootstrap, BootstrapPrincipal
from services.auth.keys import AuthKeys, server_auth_config
from services.auth.service import AuthService
from services.governance.entrypoint import start_governance
from services.planner.app import PlannerConfig
from services.planner.entrypoint import start_planner
from services.provisioner.plugins import PluginRegistry
from services.provisioner.worker import WorkerConfig, Workers
from services.solver.entrypoint import start_solver
from services.tracker.http import TRACKER, make_app
from services.tracker.unreadable import tracker_runner
from services.tracker.write_routes import ACTING

DEMO = Path(__file__).parents[3] / "muster" / "demo" / "catalog"
T = TypeVar("T")
PEOPLE = {"writer": {"tenant": "default"}, "maker": {"tenant": "default"}, "reader": {"tenant": "default"}, "onec": {"tenant": "default"},
          "outsider": {"tenant": "other"}, "tracker": {"role": "service", "service": "tracker"}}
GRANTS = [("writer", "write", "cluster:*", "default"), ("writer", "execute", "cluster:*", "default"),
          ("writer", "read", "catalog:*", "default"), ("maker", "write", "cluster:*", "default"),
          ("reader", "read", "tenant", "default"), ("outsider", "write", "cluster:*", "other")]


@dataclass
class Served:
    url: str
    loop: asyncio.AbstractEventLoop
    tokens: dict[str, str] = field(repr=False)  # never in test output
    app: web.Application | None = None
    sys_nc: Any = None

    def run(self, work: Awaitable[T], timeout: float = 60) -> T:
        """Run a coroutine on the deployment's loop, from any thread."""
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(timeout)  # type: ignore[arg-type]

    async def ask_auth(self, nc: Any, verb: str, **body: Any) -> dict[str, Any]:
        if asyncio.get_running_loop() is not self.loop:
            # `nc` reads on the deployment's loop: its answer, set from that thread, did not wake
            # a test's own loop, which saw it only when the request's 10 s timer fired (session 36).
            return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self.ask_auth(nc, verb, **body), self.loop))
        reply = await nc.request(subjects.auth_request("root", verb), json.dumps(body).encode(), timeout=10)
        answer = json.loads(reply.data)
        assert answer["ok"], answer
        return dict(answer)

    async def _log(self, tenant: str) -> dict[str, int]:
        info = await self.sys_nc.jetstream().stream_info(subjects.EVENTS_STREAM, subjects_filter=f"{subjects.EVT}.{tenant}.>")
        return {s: n for s, n in (info.state.subjects or {}).items() if ".provisioner." not in s}

    def log(self, tenant: str = "default") -> dict[str, int]:
        """The tenant's events by subject (its provisioners' aside)."""
        return self.run(self._log(tenant))

    def acting(self) -> Any:
        assert self.app is not None
        return self.app[ACTING]

    def tracker(self) -> Any:
        assert self.app is not None
        return self.app[TRACKER]


async def job_end(session: aiohttp.ClientSession, served: Served, job_id: str) -> dict[str, Any]:
    """The job's end as its progress stream says it (the stream closes when the job ends)."""
    async with session.get(f"{served.url}/v1/jobs/{job_id}/stream", headers={"Authorization": f"Bearer {served.tokens['root']}"}) as resp:
        text = await asyncio.wait_for(resp.text(), 90)
    ends = [json.loads(line[6:]) for line in text.split("event: end\n")[-1].splitlines() if line.startswith("data: ")]
    assert ends, text[-500:]
    return dict(ends[-1])


class Api:
    """HTTP calls as one of the people (by name), answered as (status, JSON body, headers)."""

    def __init__(self, session: aiohttp.ClientSession, served: Served) -> None:
        self.session, self.served = session, served

    async def call(self, method: str, path: str, who: str, body: Any = None, **headers: str) -> tuple[int, dict[str, Any], Any]:
        sent: dict[str, str] = {"Authorization": f"Bearer {self.served.tokens[who]}", **headers}
        data = None
        if body is not None:
            data = body if isinstance(body, (bytes, str)) else json.dumps(body)
            sent.setdefault("Content-Type", "application/json")
        async with self.session.request(method, self.served.url + path, data=data, headers=sent) as resp:
            answer = await resp.json() if resp.content_type == "application/json" else {}
            return resp.status, answer, resp.headers

    async def finished(self, job_id: str) -> dict[str, Any]:
        return await job_end(self.session, self.served, job_id)


@pytest_asyncio.fixture
async def api(served: Served) -> AsyncIterator[Api]:
    async with aiohttp.ClientSession() as session:
        yield Api(session, served)


async def _start(base: Path, stack: AsyncExitStack, served: Served) -> None:
    keys = AuthKeys.load_or_create(base / "keys")
    server = await NatsServer(base / "nats", name="writes", auth=server_auth_config(keys.issuer_public, keys.bus_secret)).start()
    stack.push_async_callback(server.stop)
    spec = Bootstrap(tenants=("default", "other"), principals=(
        BootstrapPrincipal("root", "super_admin", base / "root.cred"),
        BootstrapPrincipal("sys", "service", base / "sys.cred", service="system")), by="test")
    auth = await AuthService(server.url, keys, bootstrap=spec).start()
    stack.push_async_callback(auth.stop)
    served.tokens["root"] = read_credentials_file(base / "root.cred")

    async def connection(name: str, token: str) -> Any:
        nc = await connect(server.url, name=name, token=token)
        stack.push_async_callback(nc.close)
        return nc

    root = await connection("root", served.tokens["root"])
    for pid, fields in PEOPLE.items():
        served.tokens[pid] = (await served.ask_auth(root, "user-create", principal=pid, **fields))["data"]["token"]
    for pid, permission, scope, tenant in GRANTS:
        await served.ask_auth(root, "grant", principal=pid, permission=permission, scope=scope, tenant=tenant)
    served.sys_nc = sys_nc = await connection("services", read_credentials_file(base / "sys.cred"))
    await ensure_streams(sys_nc.jetstream())
    catalog = load_catalog(DEMO)
    sim = catalog.providers["sim"]
    catalog.providers["sim"] = sim.model_copy(update={"provisioner": {**sim.provisioner, "latency_ms": "0-20"}})
    for tenant in ("default", "other"):
        await apply_catalog(EventStore(sys_nc), tenant, catalog, by="test")
    planner_stack = AsyncExitStack()
    stack.push_async_callback(planner_stack.aclose)
    await start_planner(sys_nc, planner_stack, PlannerConfig(instance="planner-writes"))
    await start_solver(sys_nc, stack, "solver-writes")
    await start_governance(sys_nc, stack, "governance-writes")  # (the governance writes go to it)
    registry = PluginRegistry.discover()
    stack.push_async_callback(registry.aclose)
    workers = Workers(sys_nc.jetstream(), EventStore(sys_nc), registry,
                      WorkerConfig(provisioner_id="prov-writes", tenants=("default", "other")))
    running = asyncio.create_task(workers.run())

    async def stop_workers() -> None:
        await workers.drain()
        await running

    stack.push_async_callback(stop_workers)
    served.app = make_app(EventStore(await connection("tracker", served.tokens["tracker"])))
    runner = tracker_runner(served.app)
    await runner.setup()
    stack.push_async_callback(runner.cleanup)
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    served.url = f"http://{host}:{port}"
    index = served.tracker().index
    assert index is not None
    await asyncio.wait_for(index.ready.wait(), 30)


@pytest.fixture(scope="package")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="writes-deployment", daemon=True)
    thread.start()
    served = Served("", loop, {})
    stack = AsyncExitStack()
    try:
        served.run(_start(tmp_path_factory.mktemp("writes"), stack, served), timeout=120)
        yield served
    finally:
        served.run(stack.aclose(), timeout=60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()
