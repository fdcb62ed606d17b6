"""`muster replay` of a cluster near the end of a large log, from the first event and from the
nearest story snapshot (issue #16.2), next to the raw ordered-read rate of the same run.

    python bench/replay_bench.py [--events 300000] [--clusters 30] [--write-docs]

One log of whole jobs on `--clusters` clusters (planner_rebuild_bench.py's: 103 events a job,
the cluster's status pointing to each job when it starts), so each cluster's story is about
events / clusters events long. The cluster replayed is the one the last job went to; the point
is the log's last sequence. The snapshot is the one the tracker writes at the cluster's last
status change (here: its last job's start), so the replay from it reads the events after it
(that job's) and folds that job again. The defaults take about a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import goals
from bench.planner_rebuild_bench import TENANT, Clusters, replace_section, write_log
from contracts import subjects
from muster.bus.connect import connect
from muster.bus.eventstore import EventStore
from muster.bus.ordered import OrderedReader
from muster.bus.server import NatsServer
from muster.bus.snapshotstore import SnapshotStore
from muster.bus.streams import ensure_streams
from services.tracker.story import StoryWriter, cluster_history, replay_cluster

SECTION = "## Replay from story snapshots"
REPEAT = 3
GOAL = 10.0
"""A replay near the end from a snapshot at least 10x faster than from the first event."""


async def timed(what) -> tuple[float, object]:
    runs = []
    for _ in range(REPEAT):
        start = time.perf_counter()
        out = await what()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs), out


async def raw_rate(nc) -> tuple[int, float]:
    """Events/s of one ordered read of the whole log, each message only counted."""
    start = time.perf_counter()
    count = await OrderedReader(nc, subjects.EVENTS_STREAM, [subjects.ALL_EVENTS], lambda *frame: None).run(3600)
    return count, count / (time.perf_counter() - start)


async def main(events: int, clusters: int, write_docs: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with NatsServer(Path(tmp)) as server:
            nc = await connect(server.url, name="bench")
            await ensure_streams(nc.jetstream())
            cs = Clusters(clusters)
            t0 = time.perf_counter()
            written = await write_log(nc, events, cs)
            print(f"{written:,} events written in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
            store, stories = EventStore(nc), SnapshotStore(nc)
            cluster = cs.ids[(cs.jobs - 1) % len(cs.ids)]
            last = (await nc.jetstream().stream_info(subjects.EVENTS_STREAM)).state.last_seq
            story = await cluster_history(store, TENANT, cluster)
            status = [r.seq for r in story if r.type == "ClusterStatusChanged"]
            count, raw = await raw_rate(nc)

            full_s, full = await timed(lambda: replay_cluster(store, TENANT, cluster, last, None))
            write_start = time.perf_counter()
            await StoryWriter(store, stories).write(TENANT, cluster, status[-1])
            write_s = time.perf_counter() - write_start
            with_s, with_ = await timed(lambda: replay_cluster(store, TENANT, cluster, last, None, stories))
            same = json.dumps(full) == json.dumps(with_)
            await nc.close()
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    jobs = len(full["jobs"]) if isinstance(full, dict) else 0
    tail = last - status[-1]
    goal = goals.Goal(f"replay --seq near the end of {written:,} events, snapshot vs first event", round(full_s / with_s, 1),
                      ">=", GOAL, "x")
    table = [
        "| log | story replayed | replay from the first event | replay from the nearest snapshot | speed-up | same answer | "
        "raw ordered read | story at the raw rate | goal |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| {written:,} events, {clusters} clusters | {len(story):,} events, {jobs} jobs; snapshot {tail:,} log entries "
        f"before the point | {full_s * 1000:,.0f} ms | {with_s * 1000:,.0f} ms | {full_s / with_s:,.1f}x | "
        f"{'yes' if same else '**no**'} | {raw:,.0f} events/s ({count:,}) | {len(story) / raw * 1000:,.0f} ms | "
        f"{goal.verdict()} |",
        f"| snapshot written (once, from the first event) | | {write_s * 1000:,.0f} ms | | | | | | |",
        f"| peak RSS of this process | | | | | | | | {rss_mb:,.0f} MiB |",
    ]
    text = "\n".join(table)
    print(text)
    print(goals.line([goal]))
    if write_docs:
        section = (f"{SECTION}\n\n`python bench/replay_bench.py --events {events} --clusters {clusters}` on "
                   f"{os.cpu_count()} cores, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, load average at the end "
                   f"{' / '.join(f'{x:.1f}' for x in os.getloadavg())}; nats-server and this process share the "
                   f"machine. `muster replay --seq <last>` of the cluster the last job went to (median of {REPEAT}); "
                   f"'story at the raw rate' is the story's events at the raw ordered-read rate of the same run.\n\n"
                   f"{text}\n")
        replace_section(Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md", SECTION, section)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--clusters", type=int, default=30)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    asyncio.run(main(args.events, args.clusters, args.write_docs))
