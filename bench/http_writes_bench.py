"""What an HTTP write costs next to the bus request it becomes (docs/decisions/0017): the same
request (job control of an unknown job, which the planner answers at once) sent three ways, one
at a time. Not a test: run it, read the table; `--write-docs` puts it into docs/benchmarks.md
("## HTTP writes").

    .venv/bin/python bench/http_writes_bench.py [--samples 200] [--cold 40] [--write-docs]

A nats-server of its own (`sync_interval: always`, temp store) with the auth callout (an
in-process auth service), a planner, and the tracker listening on loopback, all in this process
with the load generator:

- bus: `MusterClient.pause_job` on an open connection with the requester's token (what the CLI
  sends);
- HTTP, warm: `POST /v1/jobs/<id>/pause` with a token whose connection the tracker holds already;
- HTTP, cold: the same with a token the tracker has not seen: it opens a connection through the
  auth callout first (decision 17);
- raw: `GET /healthz` (aiohttp alone, no bus) and a core NATS request/reply to a trivial responder.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiohttp
import structlog
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import docs  # noqa: E402
from contracts import subjects  # noqa: E402
from muster.bus.connect import connect, read_credentials_file  # noqa: E402
from muster.bus.eventstore import EventStore  # noqa: E402
from muster.bus.server import NatsServer  # noqa: E402
from muster.bus.streams import ensure_streams  # noqa: E402
from muster.client import MusterClient  # noqa: E402
from services.auth.bootstrap import Bootstrap, BootstrapPrincipal  # noqa: E402
from services.auth.keys import AuthKeys, server_auth_config  # noqa: E402
from services.auth.service import AuthService  # noqa: E402
from services.planner.app import PlannerConfig  # noqa: E402
from services.planner.entrypoint import start_planner  # noqa: E402
from services.tracker.http import make_app  # noqa: E402

SECTION = "## HTTP writes"


def ms(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return 1000 * s[min(len(s) - 1, int(q * len(s)))]


async def timed(n: int, once: Any) -> list[float]:
    out = []
    for i in range(n):
        start = time.perf_counter()
        await once(i)
        out.append(time.perf_counter() - start)
    return out


async def run(args: argparse.Namespace) -> str:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    async with AsyncExitStack() as stack:
        base = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        keys = AuthKeys.load_or_create(base / "keys")
        server = await NatsServer(base / "nats", name="bench", auth=server_auth_config(keys.issuer_public, keys.bus_secret)).start()
        stack.push_async_callback(server.stop)
        spec = Bootstrap(tenants=("default",), principals=(BootstrapPrincipal("root", "super_admin", base / "root.cred"),
                                                            BootstrapPrincipal("sys", "service", base / "sys.cred", service="system")))
        auth = await AuthService(server.url, keys, bootstrap=spec).start()
        stack.push_async_callback(auth.stop)
        root_token = read_credentials_file(base / "root.cred")
        # The planner's lease thread connects on its own, with $MUSTER_TOKEN.
        os.environ["MUSTER_TOKEN"] = read_credentials_file(base / "sys.cred")
        sys_nc = await connect(server.url, name="sys")
        stack.push_async_callback(sys_nc.close)
        await ensure_streams(sys_nc.jetstream())

        async def ask(verb: str, **body: Any) -> dict[str, Any]:
            reply = await sys_nc.request(subjects.auth_request("sys", verb), json.dumps(body).encode(), timeout=10)
            return dict(json.loads(reply.data)["data"])

        tracker_token = (await ask("user-create", principal="tracker", role="service", service="tracker"))["token"]
        cold_tokens = [(await ask("token-create", principal="root"))["token"] for _ in range(args.cold)]
        planner_stack = AsyncExitStack()
        stack.push_async_callback(planner_stack.aclose)
        await start_planner(sys_nc, planner_stack, PlannerConfig(instance="planner-bench"))
        tracker_nc = await connect(server.url, name="tracker", token=tracker_token)
        stack.push_async_callback(tracker_nc.close)
        runner = web.AppRunner(make_app(EventStore(tracker_nc), console=False), access_log=None)
        await runner.setup()
        stack.push_async_callback(runner.cleanup)
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = "http://{}:{}".format(*runner.addresses[0][:2])
        root_nc = await connect(server.url, name="root", token=root_token)
        stack.push_async_callback(root_nc.close)
        async def respond(msg: Any) -> None:
            await msg.respond(b"{}")

        echo = await sys_nc.subscribe("bench.echo", cb=respond)
        stack.push_async_callback(echo.unsubscribe)
        client = MusterClient(root_nc, tenant="default", attempts=1)
        session = await stack.enter_async_context(aiohttp.ClientSession())

        async def http(token: str) -> None:
            async with session.post(f"{url}/v1/jobs/{uuid.uuid4()}/pause", headers={"Authorization": f"Bearer {token}"}) as resp:
                assert resp.status == 404, (resp.status, await resp.text())

        async def healthz(_: int) -> None:
            async with session.get(f"{url}/healthz") as resp:
                await resp.read()

        await http(root_token)  # the warm token's connection, opened once
        figures = {
            "bus": await timed(args.samples, lambda _: client.pause_job(str(uuid.uuid4()))),
            "warm": await timed(args.samples, lambda _: http(root_token)),
            "cold": await timed(args.cold, lambda i: http(cold_tokens[i])),
            "healthz": await timed(args.samples, healthz),
            "nats": await timed(args.samples, lambda _: sys_nc.request("bench.echo", b"", timeout=5)),
        }
    rows = [("bus request (`MusterClient.pause_job`, the CLI's way)", "bus"),
            ("HTTP write, the tracker holds the token's connection", "warm"),
            ("HTTP write, a token the tracker has not seen (connect through the callout first)", "cold"),
            ("raw: `GET /healthz` (aiohttp, no bus)", "healthz"), ("raw: core NATS request/reply, trivial responder", "nats")]
    lines = [SECTION, "",
             f"One request at a time, {args.samples} samples ({args.cold} cold), this machine, {time.strftime('%Y-%m-%d')}: "
             "job control of an unknown job, which the planner refuses at once (404), sent as the CLI sends it and "
             "through the tracker (docs/decisions/0017). Everything runs in one process and event loop.", "",
             "| path | p50 | p95 | mean |", "|---|---|---|---|"]
    lines += [f"| {label} | {ms(figures[k], .5):.2f} ms | {ms(figures[k], .95):.2f} ms | {1000 * statistics.mean(figures[k]):.2f} ms |"
              for label, k in rows]
    lines += ["", f"Medians: a token's first write {ms(figures['cold'], .5):.2f} ms (its connection through the auth callout "
              f"first), a later one {ms(figures['warm'], .5):.2f} ms (the connection is kept `idle_s`, 60 s), the bus request "
              f"alone {ms(figures['bus'], .5):.2f} ms.", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--cold", type=int, default=40)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    section = asyncio.run(run(args))
    print(section)
    if args.write_docs:
        docs.write_section(SECTION, section)
        print(f"written to {docs.DOCS}", file=sys.stderr)


if __name__ == "__main__":
    main()
