"""A cancel's close (docs/decisions/0046): the read of a job's claims up to its fence, which the
planner makes under its lock, before (every claim and outcome decoded, `EventLog.read`) and now
(their headers only, `EventLog.read_heads`, `services.planner.cancels._claimed`).

    python bench/cancel_close_bench.py [--claims 10000,60000]

One job far along on a real nats-server: `--claims` attempts, each claimed and finished (a claim
and an outcome on the task's subject), as many records of another job between them, then the
job's fence. Prints the median of three reads of each kind (not asserted: a size, not a test).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.planner_rebuild_bench import BATCH
from contracts import subjects
from contracts.events import ClaimsClosed, TaskClaimed, TaskSucceeded
from muster.bus.connect import connect
from muster.bus.eventstore import Append, EventStore
from muster.bus.server import NatsServer
from muster.bus.streams import ensure_streams
from services.planner import cancels

TENANT = "acme"
JOB, OTHER = "job-far-along", "job-beside"
REPEAT = 3


def records(job: str, n: int) -> list[tuple[str, Append]]:
    out = []
    for i in range(n):
        task = f"n{i}.create"
        subject = subjects.task_events(TENANT, job, task, "prov-1")
        key = f"{job}.{task}.1"
        out.append((subject, Append(TaskClaimed(job_id=job, task_id=task, attempt=1, provisioner="prov-1", worker="prov-1/w0"),
                                    msg_id=f"{key}.claim.1")))
        out.append((subject, Append(TaskSucceeded(job_id=job, task_id=task, attempt=1, provisioner="prov-1", worker="prov-1/w0",
                                                  result={"machine": f"m-{i}"}, stdout="created\n"), msg_id=f"{key}.outcome")))
    return out


async def write(nc: Any, entries: list[tuple[str, Append]]) -> None:
    """Atomic batches (one commit each: quick to write), as bench/planner_rebuild_bench.py does."""
    for start in range(0, len(entries), BATCH):
        batch = entries[start:start + BATCH]
        batch_id = f"close-{start}"
        for i, (subject, item) in enumerate(batch, start=1):
            headers = item.headers() | {"Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": str(i)}
            data = item.event.model_dump_json().encode()
            if i < len(batch):
                await nc.publish(subject, data, headers=headers)
            else:
                reply = await nc.request(subject, data, timeout=120, headers=headers | {"Nats-Batch-Commit": "1"})
                if b'"error"' in reply.data:
                    raise RuntimeError(f"batch refused: {reply.data[:300]!r}")


async def timed(what: Callable[[], Awaitable[set[tuple[str, int]]]]) -> tuple[float, set[tuple[str, int]]]:
    runs, out = [], set()
    for _ in range(REPEAT):
        start = time.perf_counter()
        out = await what()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs), out


async def one(claims: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with NatsServer(Path(tmp)) as server:
            nc = await connect(server.url, name="bench")
            await ensure_streams(nc.jetstream())
            mine, beside = records(JOB, claims), records(OTHER, claims)
            await write(nc, [e for pair in zip(mine, beside, strict=True) for e in pair])
            store = EventStore(nc)
            [fence] = await store.append(subjects.claims_closed(TENANT, JOB, 0), [Append(ClaimsClosed(job_id=JOB, round=0),
                                                                                          msg_id=f"{JOB}:claims-closed:0")])
            outcomes = subjects.job_task_outcomes(TENANT, JOB)

            async def decoded() -> set[tuple[str, int]]:
                return {(r.event.task_id, r.event.attempt) for r in await store.read(outcomes, up_to_seq=fence)
                        if r.type == "TaskClaimed"}

            execution: Any = SimpleNamespace(state=SimpleNamespace(log=store))
            job: Any = SimpleNamespace(id=JOB, tenant=TENANT)
            before, a = await timed(decoded)
            async def headers() -> set[tuple[str, int]]:
                return set(await cancels._claimed(execution, job, fence))

            after, b = await timed(headers)
            assert a == b and len(a) == claims, (len(a), len(b))
            print(f"{claims:>7,} claims ({2 * claims:,} records of the job, {4 * claims:,} in the log): "
                  f"decoded {before:6.2f} s, headers only {after:6.2f} s ({before / after:.1f}x)", flush=True)
            await nc.close()


async def main(sizes: list[int]) -> None:
    for n in sizes:
        await one(n)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--claims", default="10000,60000", help="claims of the job, comma-separated sizes")
    args = parser.parse_args()
    asyncio.run(main([int(x) for x in args.claims.split(",")]))
