"""What nats-server's CPU costs per message: single appends with some in flight against atomic
batches of a few sizes, on a stream like the log (one replica, file storage, `sync_interval:
always`, a `Nats-Msg-Id` on each message). Not a test: run it, read the table (docs/benchmarks.md,
"Scale: what is left at 100 nodes"; decisions 12 and 36 use it).

    .venv/bin/python bench/atomic_batch_bench.py [--messages 3000] [--size 600]

The server's CPU is read from /proc before and after each way of sending the same number of
messages; the wall time per message is printed beside it (batches: 4 in flight).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for `bench.*` when run as a script

from nats.aio.client import Client

from bench.attribution import cpu_seconds
from muster.bus.connect import connect
from muster.bus.server import NatsServer

BATCHES_IN_FLIGHT = 4


async def singles(nc: Client, n: int, body: bytes, in_flight: int) -> None:
    js, gate = nc.jetstream(), asyncio.Semaphore(in_flight)

    async def one(i: int) -> None:
        async with gate:
            await js.publish(f"r.{i % 64}", body, headers={"Nats-Msg-Id": f"s{in_flight}-{i}"})

    await asyncio.gather(*(one(i) for i in range(n)))


async def batches(nc: Client, n: int, body: bytes, size: int) -> None:
    gate = asyncio.Semaphore(BATCHES_IN_FLIGHT)

    async def one(b: int) -> None:
        async with gate:
            batch = f"b{size}-{b}"
            for j in range(1, size + 1):
                headers = {"Nats-Batch-Id": batch, "Nats-Batch-Sequence": str(j), "Nats-Msg-Id": f"{batch}-{j}"}
                if j < size:
                    await nc.publish(f"r.{j % 64}", body, headers=headers)
                    continue
                answer = await nc.request(f"r.{j % 64}", body, headers={**headers, "Nats-Batch-Commit": "1"}, timeout=10)
                if b'"error"' in answer.data:
                    raise RuntimeError(answer.data.decode())

    await asyncio.gather(*(one(b) for b in range(n // size)))


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="atomic-batch-bench-") as base:
        server = await NatsServer(Path(base)).start()
        assert server.process is not None
        nc = await connect(server.url, name="atomic-batch-bench")
        try:
            config = {"name": "R", "subjects": ["r.>"], "storage": "file", "allow_atomic": True}
            await nc.request("$JS.API.STREAM.CREATE.R", json.dumps(config).encode(), timeout=10)
            body = b"x" * args.size
            ways: list[tuple[str, Callable[[], Awaitable[None]]]] = [
                *((f"single appends, {k} in flight", lambda k=k: singles(nc, args.messages, body, k)) for k in (1, 8, 64)),
                *((f"atomic batches of {k}", lambda k=k: batches(nc, args.messages, body, k)) for k in (2, 3, 8, 16, 64)),
            ]
            print("| messages sent as | server CPU µs a message | wall µs a message |\n|---|---|---|")
            for name, send in ways:
                cpu, start = cpu_seconds(server.process.pid), time.perf_counter()
                await send()
                cpu, wall = cpu_seconds(server.process.pid) - cpu, time.perf_counter() - start
                print(f"| {name} | {1e6 * cpu / args.messages:.0f} | {1e6 * wall / args.messages:.0f} |", flush=True)
        finally:
            await nc.close()
            await server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=3000, help="messages sent each way")
    parser.add_argument("--size", type=int, default=600, help="bytes of each message's body")
    asyncio.run(main(parser.parse_args()))
