"""Tracker benchmark: `GET /v1/jobs/{id}` requests per second and latency, next to a bare
aiohttp handler measured in the same run with the same load generator. Not a test: run it and
copy the table into docs/benchmarks.md ("## Tracker").

    .venv/bin/python bench/tracker_bench.py [--seconds 5] [--concurrency 8] [--nodes 3] [--repeat 3]

Everything runs as real processes on loopback: nats-server, the solver, the planner and the
tracker (`python -m muster ...`), a bare aiohttp server answering a body of the same size, and
a second Python process generating the load (aiohttp client, `--concurrency` connections kept
busy for `--seconds`). Measured for
  - a running job (no provisioner yet, so its tasks stay queued): every request asks the
    planner that owns the job over NATS, reads its layout from the log and adds the task
    locations from the index;
  - the same job once finished: the tracker answers from its cache of final answers, kept
    until any of the job's locations changes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from muster.bus.server import NatsServer, free_port  # noqa: E402

DEMO = ROOT / "muster" / "demo" / "catalog"
TENANT = "default"


# -- the load generator (a process of its own) -------------------------------------------------


async def generate_load(url: str, seconds: float, concurrency: int, warmup: float) -> dict[str, Any]:
    """Keep `concurrency` requests in flight for `seconds` (after `warmup`); every request
    must answer 200."""
    latencies: list[float] = []
    errors = 0
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as http:
        start = time.perf_counter()
        measure_from = start + warmup
        stop = measure_from + seconds

        async def worker() -> None:
            nonlocal errors
            while (now := time.perf_counter()) < stop:
                async with http.get(url) as resp:
                    await resp.read()
                    ok = resp.status == 200
                done = time.perf_counter()
                if now >= measure_from:
                    latencies.append(done - now)
                    errors += not ok

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    latencies.sort()

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000

    return {"requests": len(latencies), "errors": errors, "rps": len(latencies) / seconds,
            "p50_ms": pct(0.50), "p99_ms": pct(0.99), "mean_ms": statistics.fmean(latencies) * 1000}


async def run_load(url: str, seconds: float, concurrency: int) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--load", url, "--seconds", str(seconds), "--concurrency", str(concurrency),
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"load generator failed ({proc.returncode})")
    return json.loads(out)


# -- the bare handler (a process of its own) ----------------------------------------------------


def serve_bare(port: int, size: int) -> None:
    body = json.dumps({"pad": "x" * max(0, size - 12)}).encode()

    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="application/json")

    app = web.Application()
    app.router.add_get("/v1/jobs/{job_id}", handler)
    print("started", flush=True)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


# -- processes ---------------------------------------------------------------------------------


@asynccontextmanager
async def process(*args: str, ready: str = "started", env: dict[str, str] | None = None) -> AsyncIterator[None]:
    """A child process, ready once a line of its stderr/stdout says `ready`; stopped on exit."""
    proc = await asyncio.create_subprocess_exec(*args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                                                env={**os.environ, **(env or {})})
    assert proc.stdout is not None
    drain: asyncio.Task[None] | None = None
    try:
        async with asyncio.timeout(60):
            while True:
                line = await proc.stdout.readline()
                if not line:
                    raise RuntimeError(f"{args} exited before it was ready")
                if ready.encode() in line:
                    break
        drain = asyncio.create_task(_drain(proc.stdout))
        yield
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()
        if drain is not None:
            drain.cancel()


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.readline():
        pass


def muster(service: str, nats_url: str, *extra: str) -> tuple[str, ...]:
    return (sys.executable, "-m", "muster", service, "--nats-url", nats_url, *extra)


# -- the benchmark -----------------------------------------------------------------------------


BARE = "bare aiohttp handler, same body size"
STRICT = "tracker, running job, owner asked every request (--max-age 0)"
DEFAULT = "tracker, running job (default --max-age 0.05)"
FINAL = "tracker, finished job (answer kept until the job changes)"


async def bench(seconds: float, concurrency: int, nodes: int, repeat: int) -> None:
    from contracts.commands import Accepted, CreateCluster
    from muster.bus.eventstore import EventStore
    from muster.catalog.files import load_catalog
    from muster.catalog.store import apply_catalog
    from muster.client import MusterClient

    with tempfile.TemporaryDirectory(prefix="tracker-bench-") as tmp:
        async with NatsServer(Path(tmp) / "nats") as server:
            url = server.url
            tracker_port, bare_port = free_port(), free_port()
            tracker = f"http://127.0.0.1:{tracker_port}"
            env = {"MUSTER_LOG_LEVEL": "INFO"}
            # The planner starts on an empty log (EventStore.replay can hang on a log with
            # events but no cluster event), the catalog comes after.
            strict_port = free_port()
            strict = f"http://127.0.0.1:{strict_port}"
            async with process(*muster("planner", url), env=env), process(*muster("solver", url), env=env), \
                    process(*muster("tracker", url, "--port", str(tracker_port)), env=env), \
                    process(*muster("tracker", url, "--port", str(strict_port), "--max-age", "0"), env=env):
                async with await MusterClient.connect(url) as client:
                    await apply_catalog(EventStore(client.nc), TENANT, load_catalog(DEMO))
                    reply = await client.send(TENANT, CreateCluster(name="bench", template="hadoop-small", nodes=nodes))
                    assert isinstance(reply, Accepted), reply
                    job_url = f"{tracker}/v1/jobs/{reply.job_id}"
                    body = await _first_answer(client, reply.job_id, job_url)
                    size = len(json.dumps(body))
                    rows: list[tuple[str, dict[str, Any]]] = []
                    print(f"job {reply.job_id}: {body['tasks_total']} tasks, {body['state']}, answer from the "
                          f"{body['source']}, {size} bytes", flush=True)

                    bare_url = f"http://127.0.0.1:{bare_port}/v1/jobs/x"
                    running = {BARE: bare_url, STRICT: job_url.replace(tracker, strict), DEFAULT: job_url}
                    async with process(sys.executable, __file__, "--bare", str(bare_port), "--size", str(size)):
                        for _ in range(repeat):  # interleaved, so a burst of other load hits every row alike
                            for name, target in running.items():
                                rows.append((name, await run_load(target, seconds, concurrency)))
                        async with process(*muster("provisioner", url, "--capacity", "8"), env=env):
                            await client.wait(reply.job_id, tenant=TENANT, timeout=300)
                            await _first_answer(client, reply.job_id, job_url, final=True)
                            for _ in range(repeat):
                                for name, target in ((BARE, bare_url), (FINAL, job_url)):
                                    rows.append((name, await run_load(target, seconds, concurrency)))
    report(rows, seconds, concurrency, repeat)


async def _first_answer(client: Any, job_id: str, url: str, final: bool = False) -> dict[str, Any]:
    """The tracker's first good answer; a new job may need the index or the owner a moment,
    so this follows the job's own events and asks again after each one."""
    async with aiohttp.ClientSession() as http:
        async with asyncio.timeout(60):
            async for _ in client.events(job_id, TENANT):
                async with http.get(url) as resp:
                    if resp.status == 200:
                        body = await resp.json()
                        if body["tasks_total"] and (body["state"] != "running") == final:
                            return body
    raise RuntimeError("the tracker never answered for the job")


def report(rows: list[tuple[str, dict[str, Any]]], seconds: float, concurrency: int, repeat: int) -> None:
    """Median requests/s per server over the repeats; p99 is the worst repeat's."""
    by_name: dict[str, list[dict[str, Any]]] = {}
    for name, r in rows:
        by_name.setdefault(name, []).append(r)
    bare = statistics.median(r["rps"] for r in by_name[BARE])
    print()
    print(f"{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} cores, {concurrency} connections, "
          f"{seconds:g} s per measurement, {repeat} interleaved repeats (median requests/s, worst p99), loopback")
    print("| server | requests/s | vs bare | p50 ms | p99 ms | errors | requests/s of each repeat |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for name in (BARE, STRICT, DEFAULT, FINAL):
        rs = by_name.get(name, [])
        if not rs:
            continue
        rps = statistics.median(r["rps"] for r in rs)
        p50 = statistics.median(r["p50_ms"] for r in rs)
        p99 = max(r["p99_ms"] for r in rs)
        each = ", ".join(f"{r['rps']:.0f}" for r in rs)
        print(f"| {name} | {rps:.0f} | {rps / bare:.2f} | {p50:.2f} | {p99:.2f} | {sum(r['errors'] for r in rs)} | {each} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--load", help=argparse.SUPPRESS)
    parser.add_argument("--bare", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, default=1000, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.load:
        print(json.dumps(asyncio.run(generate_load(args.load, args.seconds, args.concurrency, warmup=1.0))))
    elif args.bare:
        serve_bare(args.bare, args.size)
    else:
        asyncio.run(bench(args.seconds, args.concurrency, args.nodes, args.repeat))


if __name__ == "__main__":
    main()
