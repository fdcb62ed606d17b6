"""What a segment's steps' read costs the planner (docs/decisions/0058, item 5): the log reads
it makes for one `muster.q.<tenant>.<provisioner>.steps` ask, and the ask's round trip. Not a
test: run it, read the figures (docs/benchmarks.md, "Scale: segments").

    .venv/bin/python bench/step_reads_bench.py [--steps 11] [--noise 20000] [--asks 200]

One nats-server of its own (`sync_interval: always`, a temp store). The log holds one job's
`--noise` other task events and a segment of `--steps` steps, each claimed and succeeded by
another provisioner. Measured, `--asks` times each, one at a time:

- `all`: `muster.stepoutcomes.step_outcomes` over every step (each has an outcome: the most
  reads an ask makes, a provisioner lost at its segment's last step);
- `first`: the same for a segment none of whose steps ran (one read: an `again` never taken);
- `ask`: `all` asked over the bus, answered by a responder that makes those reads (the wire,
  JSON both ways; the planner's checks are dictionary lookups, not counted).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from contracts import subjects  # noqa: E402
from contracts.events import TaskClaimed, TaskSucceeded  # noqa: E402
from contracts.steps import StepAttempt, StepOutcomes, StepOutcomesQuery  # noqa: E402
from muster.bus.connect import connect  # noqa: E402
from muster.bus.eventstore import Append, EventStore  # noqa: E402
from muster.bus.server import NatsServer  # noqa: E402
from muster.bus.streams import ensure_streams  # noqa: E402
from muster.stepoutcomes import step_outcomes  # noqa: E402

TENANT, JOB = "bench", "j1"


def _done(task_id: str) -> list[Append]:
    common = dict(job_id=JOB, task_id=task_id, attempt=1, provisioner="p2", worker="p2/w0")
    return [Append(TaskClaimed(**common), msg_id=f"{task_id}.claim"),  # type: ignore[arg-type]
            Append(TaskSucceeded(**common, result={"providerid": "vm-1"}), msg_id=f"{task_id}.outcome")]  # type: ignore[arg-type]


def _ms(samples: list[float]) -> str:
    ordered = sorted(samples)
    return (f"median {statistics.median(ordered) * 1e3:.2f} ms, p95 {ordered[int(len(ordered) * 0.95) - 1] * 1e3:.2f} ms, "
            f"min {ordered[0] * 1e3:.2f} ms")


async def main(steps: int, noise: int, asks: int) -> None:
    with tempfile.TemporaryDirectory(prefix="step-reads-") as tmp:
        server = await NatsServer(Path(tmp) / "nats").start()
        try:
            nc = await connect(server.url, name="bench")
            await ensure_streams(nc.jetstream())
            log = EventStore(nc)
            for i in range(0, noise, 2):  # (claims and outcomes of other tasks of the job)
                await log.append(subjects.task_events(TENANT, JOB, f"n{i}.install", "p3"), _done(f"n{i}.install"))
            segment = [f"n1.step{k}" for k in range(steps)]
            for task_id in segment:
                await log.append(subjects.task_events(TENANT, JOB, task_id, "p2"), _done(task_id))
            unrun = [(f"n2.step{k}", 1) for k in range(steps)]

            async def timed(what: list[tuple[str, int]], want: int) -> list[float]:
                took = []
                for _ in range(asks):
                    t0 = time.perf_counter()
                    found = await step_outcomes(log, TENANT, JOB, what)
                    took.append(time.perf_counter() - t0)
                    assert len(found) == want, found
                return took

            every = await timed([(t, 1) for t in segment], steps)
            first = await timed(unrun, 0)

            async def respond(msg: object) -> None:
                query = StepOutcomesQuery.model_validate_json(getattr(msg, "data"))  # noqa: B009
                found = await step_outcomes(log, TENANT, JOB, [(s.task_id, s.attempt) for s in query.steps])
                await getattr(msg, "respond")(StepOutcomes(outcomes=found).model_dump_json().encode())  # noqa: B009

            asker = await connect(server.url, name="asker")
            await nc.subscribe(subjects.step_outcomes(TENANT, "p1"), cb=respond)
            body = StepOutcomesQuery(job_id=JOB, steps=[StepAttempt(task_id=t, attempt=1) for t in segment]).model_dump_json().encode()
            round_trips = []
            for _ in range(asks):
                t0 = time.perf_counter()
                reply = await asker.request(subjects.step_outcomes(TENANT, "p1"), body, timeout=10)
                round_trips.append(time.perf_counter() - t0)
                assert len(StepOutcomes.model_validate_json(reply.data).outcomes) == steps
            print(f"log: {noise + 2 * steps} events; segment of {steps} steps; {asks} asks each")
            print(f"all   ({steps} reads): {_ms(every)}")
            print(f"first (1 read):   {_ms(first)}")
            print(f"ask   ({steps} reads, over the bus): {_ms(round_trips)}")
            await asker.close()
            await nc.close()
        finally:
            await server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=11)
    parser.add_argument("--noise", type=int, default=20000)
    parser.add_argument("--asks", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(main(args.steps, args.noise, args.asks))
