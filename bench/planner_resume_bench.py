"""How long a planner takes to resume as the log grows, with and without snapshots of its
aggregates (`muster.snapshots`), in the same run.

    python bench/planner_resume_bench.py [--clusters 1000] [--steps 100000,300000,1000000] [--full] [--write-docs] [--store DIR]

The defaults take about 2-3 minutes (what `make bench` runs). `--full` is the size issue #16
names, a log grown to 1, 3 and 10 million events (`--steps 1000000,3000000,10000000`): writing
10 million events takes 10-15 minutes here (~16k events/s in atomic batches, fsynced; measured at
300k events), the resumes at each size some more, so
`make bench-full` / `run_all.py --full` runs it, not `make bench`.

One log of jobs on `--clusters` clusters (the log of planner_rebuild_bench.py: 103 events a job,
each job on one cluster, which points to it), grown to each size of `--steps` in turn. At each
size: a planner resumes from the log alone (snapshots off); a planner with snapshots resumes
and writes the snapshots its aggregates are due (what a running planner does as it goes); a
third planner resumes from those snapshots and the events after them — the figure (the median of
three). Resume is `Planner.resume()`: every cluster, and each cluster's current job. A cluster has
about one event per job, fewer than the 100 that make a snapshot due as it goes; a resume writes
one of each cluster it had to fold (services/planner/state.py), so the planner after it reads no
event of a cluster that stayed quiet.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import goals
from bench.planner_rebuild_bench import Clusters, replace_section, write_log
from contracts import subjects
from muster.bus.connect import connect
from muster.bus.server import NatsServer
from muster.bus.streams import ensure_streams
from services.planner.app import Planner, PlannerConfig
from services.planner.entrypoint import nats_planner

GOAL_S = 5.0
REPEATS = 3
"""Resumes from snapshots timed at each size (the median is the figure)."""
FULL_STEPS = "1000000,3000000,10000000"
SECTION = "## Planner resume with snapshots"
FULL_SECTION = "## Planner resume at full size (--full)"
"""A section of its own: `make bench` (default sizes) leaves the last --full figures in place."""


async def resume(nc, every: int) -> tuple[float, Planner]:
    planner = nats_planner(nc, PlannerConfig(instance="bench", snapshot_every=every))
    start = time.perf_counter()
    await planner.resume()
    return time.perf_counter() - start, planner


async def main(clusters: int, steps: list[int], write_docs: bool, full: bool = False, store: str | None = None) -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        async with NatsServer(Path(store or tmp)) as server:
            nc = await connect(server.url, name="bench")
            await ensure_streams(nc.jetstream())
            cs = Clusters(clusters)
            written = (await nc.jetstream().stream_info(subjects.EVENTS_STREAM)).state.messages
            if written:  # a log kept by an earlier run (--store): measured at its size, nothing written
                print(f"{written:,} events already in {store}: measured at that size", file=sys.stderr, flush=True)
                steps = [written]
            for size in steps:
                t0 = time.perf_counter()
                written += await write_log(nc, size - written, cs) if size > written else 0
                write_s = time.perf_counter() - t0
                without, p = await resume(nc, 0)
                n_clusters = len(p.clusters)
                _, priming = await resume(nc, 100)
                assert priming.state.snapshotter is not None
                await priming.state.snapshotter.idle()
                taken = priming.state.snapshotter.written
                timed = [await resume(nc, 100) for _ in range(REPEATS)]
                with_s, p = sorted(timed, key=lambda t: t[0])[REPEATS // 2]  # the median: one slow round is the machine
                same = {k: c.version for k, c in p.clusters.items()} == {k: c.version for k, c in priming.clusters.items()}
                rows.append((written, n_clusters, write_s, without, with_s, taken, same))
                print(f"{written:,} events: resume {without:.2f} s from the log, {with_s:.2f} s from snapshots "
                      f"({taken:,} written; same state: {same})", file=sys.stderr, flush=True)
            await nc.close()
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    largest = rows[-1]
    goal = goals.Goal(f"planner resume with snapshots, {largest[1]:,} clusters, {largest[0]:,} events", round(largest[4], 2),
                      "<=", GOAL_S, " s")
    table = ["| events in the log | clusters | resume from the log alone | resume from snapshots + the events after them "
             "| snapshots written before | same state | goal |", "|---|---|---|---|---|---|---|"]
    for events, n, _, without, with_s, taken, same in rows:
        table.append(f"| {events:,} | {n:,} | {without:.2f} s | {with_s:.2f} s | {taken:,} | {'yes' if same else '**no**'} | "
                     f"{goal.verdict() if (events, with_s) == (largest[0], largest[4]) else ''} |")
    table.append(f"| peak RSS of this process | | | | | | {rss_mb:,.0f} MiB |")
    text = "\n".join(table)
    print(text)
    print(goals.line([goal]))
    if write_docs:
        heading = FULL_SECTION if full else SECTION
        section = (f"{heading}\n\n`python bench/planner_resume_bench.py --clusters {clusters} --steps "
                   f"{','.join(str(s) for s in steps)}` on {os.cpu_count()} cores, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, "
                   f"load average at the end {' / '.join(f'{x:.1f}' for x in os.getloadavg())}; nats-server and this "
                   f"process share the machine. Snapshots every 100 events of an aggregate, of a job when it "
                   f"ends, and of a cluster a resume had to fold; resume from snapshots: the median of {REPEATS}.\n\n{text}\n")
        replace_section(Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md", heading, section)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--steps", default="100000,300000,1000000", help="log sizes, ascending, comma-separated")
    parser.add_argument("--full", action="store_true", help=f"--steps {FULL_STEPS} (15-30 minutes)")
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--store", help="keep the log in this directory; a later run with the same directory measures "
                        "it again without writing (write the log under any load, measure when the machine is quiet)")
    args = parser.parse_args()
    if args.full:
        args.steps = FULL_STEPS
    asyncio.run(main(args.clusters, [int(s) for s in args.steps.split(",")], args.write_docs, args.full, args.store))
