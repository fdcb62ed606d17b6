"""What the auth service's first start after the upgrade to decision 0057 costs on a big log:
`move_old_bodies` (muster/bus/bodymove.py) copying the bodies stored the old way. Not a test:
run it, read the lines; they go into docs/benchmarks.md ("Moving bodies stored before 0057").

    .venv/bin/python bench/bodymove_bench.py [--events 100000,1000000] [--share 0.001] [--tenants 20]

A nats-server of its own (no authorization: the auth service's connection may read everything
anyway), a log of `--events` events over `--tenants` tenants (~350-byte payloads, as a job's
and a cluster's events are), of which a `--share` were offloaded the way a version before 0057
did (a stub naming no `parts`, its body of ~100 KB of JSON, a layout's, on
`muster.body.<tenant>.<hex>`), the jobs spread over the tenants at random; the same with a tenth
of that share (fewer tenants hold an old body); and with no old body at all (a deployment that
began with session 25 or later). Each timed: the first move (copies every old body), then the
next start's (from the mark: nothing new). The fill is not timed.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nats.aio.client import Client  # noqa: E402

from contracts import subjects  # noqa: E402
from muster.bus.bodies import BODIES_STREAM, H_BODY  # noqa: E402
from muster.bus.bodymove import move_old_bodies  # noqa: E402
from muster.bus.connect import connect  # noqa: E402
from muster.bus.server import NatsServer  # noqa: E402
from muster.bus.streams import ensure_streams  # noqa: E402

WINDOW = 512


class FastFill(NatsServer):
    """The bench's server without an fsync a write: the fill is not what is measured."""

    def config_text(self) -> str:
        return super().config_text().replace("  sync_interval: always\n", "")


def _layout(i: int) -> bytes:
    nodes = [{"name": f"node-{i}-{n}", "id": hashlib.sha1(f"{i}.{n}".encode()).hexdigest(), "role": "worker",
              "zone": f"z{n % 3}", "flavor": "m5.large"} for n in range(700)]
    return json.dumps({"type": "ClusterLayoutChanged", "v": 1, "nodes": nodes}).encode()


async def fill(nc: Client, events: int, share: float, tenants: int) -> int:
    """The log; returns how many events were offloaded the old way."""
    js = nc.jetstream()
    every = int(1 / share) if share else 0
    offloaded = 0
    pending: list[Any] = []
    for i in range(events):
        tenant = f"t{zlib.crc32(str(i // 10).encode()) % tenants}"  # (a job's ten events in one tenant, jobs spread)
        subject = f"{subjects.EVT}.{tenant}.job.j{i // 10}"
        headers = {"Muster-Type": "TaskCompleted", "Muster-Time": "2026-12-01T00:00:00+00:00"}
        if every and i % every == every - 1:
            data = _layout(i)
            digest = hashlib.sha256(data).hexdigest()
            await js.publish(f"{subjects.BODY}.{tenant}.{digest}", zlib.compress(data), headers={"Muster-Part": "0/1"})
            payload = json.dumps({"type": "ClusterLayoutChanged", "v": 1, "body": {
                "ref": f"sha256:{digest}", "size": len(data), "encoding": "zlib", "stream": BODIES_STREAM}}).encode()
            headers[H_BODY] = f"sha256:{digest}"
            offloaded += 1
        else:
            payload = json.dumps({"type": "TaskCompleted", "v": 1, "job_id": f"j{i // 10}", "task_id": f"task-{i}",
                                  "node": f"node-{i}", "output": {"address": "10.0.0.1", "note": "x" * 120}}).encode()
        pending.append(js.publish(subject, payload, headers=headers))
        if len(pending) >= WINDOW:
            await asyncio.gather(*pending)
            pending.clear()
    await asyncio.gather(*pending)
    return offloaded


async def one(base: Path, events: int, share: float, tenants: int) -> dict[str, Any]:
    server = FastFill(base / "nats")
    await server.start()
    try:
        nc = await connect(server.url, name="bench")
        try:
            await ensure_streams(nc.jetstream())
            offloaded = await fill(nc, events, share, tenants)
            start = time.perf_counter()
            moved = await move_old_bodies(nc)
            first = time.perf_counter() - start
            start = time.perf_counter()
            again = await move_old_bodies(nc)
            second = time.perf_counter() - start
            return {"events": events, "share": share, "offloaded": offloaded, "moved": moved, "first_s": round(first, 2),
                    "moved_again": again, "next_start_s": round(second, 3)}
        finally:
            await nc.close()
    finally:
        await server.stop()


async def main(args: argparse.Namespace) -> None:
    for events in args.events:
        for share in dict.fromkeys((args.share, args.share / 10, 0.0)):
            with tempfile.TemporaryDirectory(prefix="bodymove-bench-") as tmp:
                print(json.dumps(await one(Path(tmp), events, share, args.tenants)), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", default="100000,1000000", help="sizes of the log, comma-separated")
    parser.add_argument("--share", type=float, default=0.001, help="share of the events offloaded the old way")
    parser.add_argument("--tenants", type=int, default=20, help="tenants the events are spread over")
    options = parser.parse_args()
    options.events = [int(n) for n in str(options.events).split(",") if n.strip()]
    os.environ.setdefault("MUSTER_LOG_LEVEL", "warning")
    asyncio.run(main(options))
