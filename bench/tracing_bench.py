"""What tracing costs a task's dispatch: the dispatch latency of `bench/dispatch_bench.py` (a task
published to TASKS -> its `TaskClaimed` seen in the log; and -> its outcome seen) with tracing
off and on, in the same run, in alternating blocks of samples so that both see the same load of
a shared machine. Not a test: run it, read the table (its figures belong in docs/benchmarks.md).

    .venv/bin/python bench/tracing_bench.py [--samples 400] [--block 20]

Off: no OTEL_* variable, the provisioner as shipped (no span, no header parsed), the task
message with no `traceparent`. On: the task message carries its attempt's `traceparent` (as a
traced planner sends it), the provisioner makes its claim, run and plugin spans and puts the
contexts in the claim's and the outcome's headers, and the spans go over OTLP/HTTP (the SDK's
batch processor, its defaults) to a receiver in a process of its own that reads and drops them.
One nats-server of its own, an idle provisioner of capacity 16 with the real plugin registry
(the `simulated` automator, no latency).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for `bench.*` when run as a script

import structlog

from bench.dispatch_bench import Provisioner, ms, observe, pct, tasks
from muster import tracing
from muster.bus.connect import connect
from muster.bus.server import NatsServer
from muster.bus.streams import ensure_streams

RECEIVER = """
import sys
from aiohttp import web
count = [0, 0]
async def export(request):
    count[0] += 1
    count[1] += len(await request.read())
    return web.Response(body=b"", content_type="application/x-protobuf")
async def stats(request):
    return web.json_response({"requests": count[0], "bytes": count[1]})
app = web.Application()
app.router.add_post("/v1/traces", export)
app.router.add_get("/stats", stats)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)
"""


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def run(samples: int, block: int) -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING), cache_logger_on_first_use=True)
    port = free_port()
    receiver = subprocess.Popen([sys.executable, "-c", RECEIVER, str(port)])
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{port}"
    os.environ["OTEL_EXPORTER_OTLP_PROTOCOL"] = "http/protobuf"
    tracing.configure("bench")
    provider = tracing.sdk.provider  # switched on and off below: off is exactly "no provider"
    tracing.sdk.provider = None
    job_trace = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
    try:
        with tempfile.TemporaryDirectory(prefix="muster-tracing-bench-") as tmp:
            async with NatsServer(Path(tmp) / "nats", name="tracing-bench") as server:
                nc = await connect(server.url, name="bench")
                await ensure_streams(nc.jetstream())
                tenant = "benchtrace"
                observer, sub = await observe(nc, tenant)
                js = nc.jetstream()
                loop = asyncio.get_running_loop()
                claim: dict[bool, list[float]] = {False: [], True: []}
                outcome: dict[bool, list[float]] = {False: [], True: []}
                async with Provisioner(server.url, tenant, capacity=16):
                    for i, (subject, task, headers) in enumerate(tasks(tenant, 2 * samples + 2 * block)):
                        on = (i // block) % 2 == 1
                        tracing.sdk.provider = provider if on else None
                        if on:
                            headers = {**headers, tracing.HEADER: tracing.attempt(job_trace, "j", f"t{i}", 1) or ""}
                        observer.claim_waiter = loop.create_future()
                        start = time.perf_counter()
                        await js.publish(subject, task, headers=headers)
                        claimed = await asyncio.wait_for(observer.claim_waiter, 10)
                        await observer.outcomes(i + 1, 10)
                        done = observer.last
                        if i >= 2 * block:  # the first block of each: warm-up
                            claim[on].append(claimed - start)
                            outcome[on].append(done - start)
                await sub.unsubscribe()
                await nc.close()
        tracing.sdk.provider = provider
        tracing.shutdown()  # the last spans go out
    finally:
        receiver.terminate()
        receiver.wait()
    print(f"{len(claim[False])} samples off, {len(claim[True])} on, in alternating blocks of {block}")
    print("| latency | off p50 | on p50 | on/off p50 | off p90 | on p90 |")
    print("|---|---|---|---|---|---|")
    for name, got in (("task published -> claim in the log", claim), ("task published -> outcome in the log", outcome)):
        off50, on50 = pct(got[False], .5), pct(got[True], .5)
        print(f"| {name} | {ms(off50)} | {ms(on50)} | {on50 / off50 - 1:+.1%} | {ms(pct(got[False], .9))} | "
              f"{ms(pct(got[True], .9))} |")
    overhead = pct(claim[True], .5) / pct(claim[False], .5) - 1
    print(f"dispatch latency with tracing on: {overhead:+.1%} at the median (goal: under +5%): "
          f"{'met' if overhead < 0.05 else 'NOT met'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=400, help="latency samples in each mode")
    parser.add_argument("--block", type=int, default=20, help="samples in a row in one mode")
    args = parser.parse_args()
    for name in [k for k in os.environ if k.startswith("OTEL_")]:
        del os.environ[name]
    asyncio.run(run(args.samples, args.block))


if __name__ == "__main__":
    main()
