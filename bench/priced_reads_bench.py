"""What a job's answer with a cost pays to mask it: each read its plan from the log again
(`priced.planned_nodes`, before session 34), or the tracker's `Plans` reads it once.

    .venv/bin/python bench/priced_reads_bench.py [--nodes 100 1000 10000] [--answers 20]

A real nats-server and the JetStream log; per size, one waiting create of the demo layout
planned (`JobPlanned` with its tasks) and `--answers` answers of its status as a reader without
`read` on its hardware type (`status_shown`), each way. Not in `run_all.py`; docs/benchmarks.md,
"A waiting job's answer: its plan read once (session 34)". Figures are the median answer.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from console_bench import TENANT, write_job  # noqa: E402
from nats import connect  # noqa: E402

from muster.bus.eventstore import EventStore  # noqa: E402
from muster.bus.server import NatsServer  # noqa: E402
from muster.bus.streams import ensure_streams  # noqa: E402
from services.tracker import priced  # noqa: E402


class Before:
    """The read the answer made before: the job's plan from the log, at each answer."""

    def __init__(self, store: EventStore) -> None:
        self.store = store

    async def of(self, tenant: str, job_id: str) -> Any:
        return await priced.planned_nodes(self.store, tenant, job_id)


async def answers(plans: Any, job_id: str, status: dict[str, Any], count: int) -> list[float]:
    took = []
    for _ in range(count):
        t = time.perf_counter()
        shown = await priced.status_shown(plans, TENANT, job_id, status, lambda h: True)
        took.append((time.perf_counter() - t) * 1000)
        assert shown["approval"]["cost"]["per_hour"] == 0
    return took


async def bench(sizes: list[int], count: int) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        async with NatsServer(Path(tmp) / "nats") as server:
            nc = await connect(server.url, name="priced-reads-bench")
            await ensure_streams(nc.jetstream())
            store = EventStore(nc)
            try:
                for size in sizes:
                    job_id, _ = await write_job(store, size)
                    cost = {"per_hour": 0.1 * size, "before_per_hour": 0.0, "by_hardware": {"medium": 0.1 * size},
                            "per_node": {f"n{i:03d}": 0.1 for i in range(size)}, "unknown": []}
                    status = {"id": job_id, "approval": {"rules": ["r"], "cost": cost}}
                    before = await answers(Before(store), job_id, status, count)
                    now = await answers(priced.Plans(store), job_id, status, count)
                    rows.append({"nodes": size, "before_ms": statistics.median(before), "now_first_ms": now[0],
                                 "now_ms": statistics.median(now[1:]) if count > 1 else now[0]})
            finally:
                await nc.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--answers", type=int, default=20)
    args = parser.parse_args()
    rows = asyncio.run(bench(args.nodes, args.answers))
    print("| nodes | each answer read the plan (before) | first answer (now) | later answers (now) |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['nodes']:,} | {r['before_ms']:.1f} ms | {r['now_first_ms']:.1f} ms | {r['now_ms']:.2f} ms |")


if __name__ == "__main__":
    main()
