"""What authorization costs: dispatch latency and tracker requests/s with auth on, next to the
same with auth off, in the same run (goal: within 10%). Not a test: run it, read the table;
`--write-docs` puts it into docs/benchmarks.md ("## Auth").

    .venv/bin/python bench/auth_bench.py [--samples 300] [--seconds 5] [--rounds 2] [--write-docs]

Two nats-servers of its own (`sync_interval: always`, temp stores): one open, one authorizing
(auth callout answered by an in-process auth service). On each:

- dispatch latency: a task message published to TASKS -> its `TaskClaimed` seen in the log; one
  at a time, an idle provisioner of capacity 16 (with auth on: its own provisioner identity,
  whose permissions are the long allow list of docs/security.md); samples of the two servers
  are taken in turn, so both see the same load of a shared machine.
- tracker requests/s: `muster tracker` processes (with auth on: the tracker's identity, and
  every request carries a bearer token it checks) under `--concurrency` requests in flight from
  a load generator process, on `GET /v1/clusters/<id>`; rounds alternate off/on, medians shown.
- connection set-up: connect + first PING/PONG, open vs through the callout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import nats
import structlog

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from dispatch_bench import Observer, observe, tasks  # noqa: E402
from tracker_bench import process  # noqa: E402

from bench import goals  # noqa: E402
from contracts import subjects  # noqa: E402
from contracts.events import ClusterRequested, JobRequested  # noqa: E402
from muster.bus.connect import connect  # noqa: E402
from muster.bus.eventstore import Append, EventStore  # noqa: E402
from muster.bus.server import NatsServer, free_port  # noqa: E402
from muster.bus.streams import ensure_streams  # noqa: E402
from services.auth.domain.tokens import make_token  # noqa: E402
from services.auth.keys import AuthKeys, server_auth_config  # noqa: E402
from services.auth.service import AuthService  # noqa: E402
from services.provisioner.plugins import PluginRegistry  # noqa: E402
from services.provisioner.worker import WorkerConfig, Workers  # noqa: E402

DOCS = ROOT / "docs" / "benchmarks.md"
SECTION = "## Auth"
TENANT = "benchauth"
LOAD_TOKEN = "AUTH_BENCH_TOKEN"


def pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))]


class Side:
    """One server (open or authorizing) with what the measurements need on it."""

    def __init__(self, name: str, base: Path, auth: bool) -> None:
        self.name, self.base, self.auth = name, base, auth
        self.tokens: dict[str, str | None] = {"system": None, "provisioner": None, "tracker": None, "reader": None}

    async def start(self) -> Side:
        config = ""
        if self.auth:
            self.keys = AuthKeys.load_or_create(self.base / "keys")
            config = server_auth_config(self.keys.issuer_public, self.keys.bus_secret)
        self.server = await NatsServer(self.base / "nats", name=self.name, auth=config).start()
        if self.auth:
            system = make_token("bench-system", os.urandom(6), os.urandom(32), os.urandom(16))[0]
            os.environ["MUSTER_AUTH_SYSTEM_TOKEN"] = system
            self.service = await AuthService(self.server.url, self.keys).start()
            self.tokens["system"] = system
            nc = await connect(self.server.url, name="bench-admin", token=system)
            await self._ask(nc, "bench-system", "tenant-create", tenant=TENANT)
            for pid, body in {"bench-prov": {"role": "service", "service": "provisioner"},
                              "bench-tracker": {"role": "service", "service": "tracker"},
                              "bench-reader": {"tenant": TENANT}}.items():
                made = await self._ask(nc, "bench-system", "user-create", principal=pid, **body)
                self.tokens[{"bench-prov": "provisioner", "bench-tracker": "tracker", "bench-reader": "reader"}[pid]] = made["token"]
            await self._ask(nc, "bench-system", "grant", principal="bench-prov", permission="execute", tenant=TENANT, scope="queue:default")
            await self._ask(nc, "bench-system", "grant", principal="bench-reader", permission="read", tenant=TENANT)
            await nc.close()
        self.nc = await connect(self.server.url, name="bench", token=self.tokens["system"])
        await ensure_streams(self.nc.jetstream())
        self.cluster = str(uuid.uuid4())
        job = str(uuid.uuid4())
        store = EventStore(self.nc)
        await store.append(subjects.cluster_events(TENANT, self.cluster), [Append(ClusterRequested(
            tenant=TENANT, cluster_id=self.cluster, name="c", template="t", provider="p", job_id=job), msg_id=f"b-{job}")])
        await store.append(subjects.job_events(TENANT, job), [Append(JobRequested(
            tenant=TENANT, job_id=job, cluster_id=self.cluster, operation="create", request={}), msg_id=f"j-{job}")])
        return self

    @staticmethod
    async def _ask(nc: Any, me: str, verb: str, **body: Any) -> Any:
        reply = json.loads((await nc.request(subjects.auth_request(me, verb), json.dumps(body).encode(), timeout=10)).data)
        return reply.get("data")

    async def stop(self) -> None:
        await self.nc.close()
        if self.auth:
            await self.service.stop()
        await self.server.stop()


@asynccontextmanager
async def provisioner(side: Side) -> AsyncIterator[Workers]:
    pid = "bench-prov" if side.auth else "bench-prov-open"
    nc = await connect(side.server.url, name=pid, token=side.tokens["provisioner"])
    registry = PluginRegistry.discover()
    workers = Workers(nc.jetstream(), EventStore(nc), registry, WorkerConfig(provisioner_id=pid, tenants=(TENANT,), capacity=16))
    await workers.ensure_queues()
    runner = asyncio.create_task(workers.run())
    try:
        yield workers
    finally:
        await workers.drain()
        await runner
        await registry.aclose()
        await nc.close()


async def dispatch(sides: list[Side], samples: int) -> dict[str, list[float]]:
    """Task published -> TaskClaimed seen, one at a time, the two sides in turn."""
    loop = asyncio.get_running_loop()
    out: dict[str, list[float]] = {s.name: [] for s in sides}
    async with provisioner(sides[0]), provisioner(sides[1]):
        observers: list[tuple[Observer, Any]] = [await observe(s.nc, TENANT) for s in sides]
        batches = {s.name: tasks(TENANT, samples + 20) for s in sides}
        for i in range(samples + 20):
            for side, (observer, _) in zip(sides, observers, strict=True):
                subject, body, headers = batches[side.name][i]
                observer.claim_waiter = loop.create_future()
                start = time.perf_counter()
                await side.nc.jetstream().publish(subject, body, headers=headers)
                claimed = await asyncio.wait_for(observer.claim_waiter, 10)
                await observer.outcomes(i + 1, 10)
                if i >= 20:
                    out[side.name].append(claimed - start)
        for _, sub in observers:
            await sub.unsubscribe()
    return out


async def connects(side: Side, n: int) -> list[float]:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        nc = await nats.connect(side.server.url, token=side.tokens["reader"] or None,
                                inbox_prefix="_INBOX.bench-reader" if side.auth else "_INBOX")
        await nc.flush()
        times.append(time.perf_counter() - start)
        await nc.close()
    return times


# -- the tracker -------------------------------------------------------------------------------


async def generate_load(url: str, token: str, seconds: float, concurrency: int) -> dict[str, Any]:
    headers = {"X-Muster-Tenant": TENANT, **({"Authorization": f"Bearer {token}"} if token else {})}
    latencies: list[float] = []
    errors = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency), headers=headers) as http:
        start = time.perf_counter()
        measure_from, stop = start + 1.0, start + 1.0 + seconds

        async def worker() -> None:
            nonlocal errors
            while (now := time.perf_counter()) < stop:
                async with http.get(url) as resp:
                    await resp.read()
                    ok = resp.status == 200
                if now >= measure_from:
                    latencies.append(time.perf_counter() - now)
                    errors += not ok

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return {"rps": len(latencies) / seconds, "p50_ms": pct(latencies, 0.5) * 1000, "errors": errors}


async def tracker_round(side: Side, seconds: float, concurrency: int) -> dict[str, Any]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("MUSTER_TOKEN", "MUSTER_CREDENTIALS")}
    if side.tokens["tracker"]:
        env["MUSTER_TOKEN"] = side.tokens["tracker"]
    args = (sys.executable, "-m", "muster", "tracker", "--nats-url", side.server.url, "--port", str(port))
    async with process(*args, env={**env, "MUSTER_LOG_LEVEL": "INFO"}, ready="started"):
        url = f"http://127.0.0.1:{port}/v1/clusters/{side.cluster}"
        # The token goes by the environment, never on a command line (ps shows those).
        proc = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--load", url, "--seconds", str(seconds), "--concurrency", str(concurrency),
            stdout=asyncio.subprocess.PIPE, env={**os.environ, LOAD_TOKEN: side.tokens["reader"] or ""})
        out, _ = await proc.communicate()
    return json.loads(out)


# -- the run -----------------------------------------------------------------------------------


def ratio(on: float, off: float) -> str:
    return f"{on / off:.2f}x" if off else "-"


DISPATCH_GOAL = 1.10
"""Issue #19.9: with auth on, dispatch latency and tracker requests/s within 10% of auth off."""
TRACKER_GOAL = 0.90


async def run(args: argparse.Namespace) -> tuple[str, list[goals.Goal]]:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    with tempfile.TemporaryDirectory(prefix="muster-auth-bench-") as tmp:
        off = await Side("auth-off", Path(tmp) / "off", auth=False).start()
        on = await Side("auth-on", Path(tmp) / "on", auth=True).start()
        try:
            lat = await dispatch([off, on], args.samples)
            conn = {s.name: await connects(s, 50) for s in (off, on)}
            rounds: dict[str, list[dict[str, Any]]] = {"auth-off": [], "auth-on": []}
            for _ in range(args.rounds):
                for side in (off, on):
                    rounds[side.name].append(await tracker_round(side, args.seconds, args.concurrency))
        finally:
            await on.stop()
            await off.stop()
    rps = {k: statistics.median(r["rps"] for r in v) for k, v in rounds.items()}
    p50 = {k: statistics.median(r["p50_ms"] for r in v) for k, v in rounds.items()}
    errors = sum(r["errors"] for v in rounds.values() for r in v)
    d = {k: (pct(v, 0.5) * 1000, pct(v, 0.99) * 1000) for k, v in lat.items()}
    c = {k: pct(v, 0.5) * 1000 for k, v in conn.items()}
    lines = [
        SECTION, "",
        f"`bench/auth_bench.py` (samples {args.samples}, tracker {args.rounds} rounds of {args.seconds:g} s at "
        f"{args.concurrency} in flight; {time.strftime('%Y-%m-%d')}). Two servers of the same run, one open, one "
        "authorizing through the auth callout; samples taken in turn (docs/security.md).", "",
        "| figure | auth off | auth on | on / off |", "|---|---|---|---|",
        f"| dispatch latency p50 (task published -> TaskClaimed) | {d['auth-off'][0]:.2f} ms | {d['auth-on'][0]:.2f} ms | {ratio(d['auth-on'][0], d['auth-off'][0])} |",
        f"| dispatch latency p99 | {d['auth-off'][1]:.2f} ms | {d['auth-on'][1]:.2f} ms | {ratio(d['auth-on'][1], d['auth-off'][1])} |",
        f"| tracker `GET /v1/clusters/<id>` requests/s (median of rounds) | {rps['auth-off']:,.0f} | {rps['auth-on']:,.0f} | {ratio(rps['auth-on'], rps['auth-off'])} |",
        f"| tracker request p50 | {p50['auth-off']:.2f} ms | {p50['auth-on']:.2f} ms | {ratio(p50['auth-on'], p50['auth-off'])} |",
        f"| NATS connect + first round trip p50 | {c['auth-off']:.2f} ms | {c['auth-on']:.2f} ms | {ratio(c['auth-on'], c['auth-off'])} |",
        "",
        f"Errors: {errors} (every request must answer 200). A connection pays the callout once (a request to the "
        "auth service, a JWT signed with nkeys); after that the server checks each publish against the "
        "connection's allow list (cached per subject), and the tracker checks a token with one SHA-256 and a "
        "dictionary lookup.",
        "",
    ]
    stated = [
        goals.Goal("dispatch latency p50, auth on / off", round(d["auth-on"][0] / d["auth-off"][0], 2), "<=", DISPATCH_GOAL, "x"),
        goals.Goal("tracker requests/s, auth on / off", round(rps["auth-on"] / rps["auth-off"], 2), ">=", TRACKER_GOAL, "x"),
    ]
    lines += [f"Goals (#19.9): {g.figure} {g.value:.2f}x, {g.verdict()}" for g in stated] + [""]
    return "\n".join(lines), stated


def write_docs(section: str) -> None:
    text = DOCS.read_text(encoding="utf-8") if DOCS.exists() else "# Benchmarks\n"
    pattern = re.compile(rf"^{re.escape(SECTION)}\n.*?(?=^## |\Z)", re.S | re.M)
    text = pattern.sub(lambda _: section + "\n", text, count=1) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section
    DOCS.write_text(text, encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--load", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.load:
        print(json.dumps(asyncio.run(generate_load(args.load, os.environ.get(LOAD_TOKEN, ""), args.seconds, args.concurrency))))
        return
    section, stated = asyncio.run(run(args))
    print(section)
    print(goals.line(stated))
    if args.write_docs:
        write_docs(section)
        print(f"written to {DOCS}", file=sys.stderr)


if __name__ == "__main__":
    main()
