"""How fast a planner rebuilds its state from the log, next to how fast this machine can merely
read the same messages from JetStream (the limit), in the same run.

    python bench/planner_rebuild_bench.py [--events 1000000] [--repeat 2] [--write-docs]

Writes a log of jobs the way the planner does (JobRequested, JobPlanned, then TaskQueued and
TaskCompleted per task, JobSucceeded; each job on one of the clusters, which records it as
its current job; every message with the headers `EventStore.append` writes), then measures,
each `--repeat` times in turn (best kept, as the machine is shared):
  raw, nats-py:  nats-py's ordered consumer with a callback that only counts (the limit the
                 goal is stated against: full fold >= 0.7 of it);
  raw, wire:     muster's own reader (`muster.bus.wire`) counting the cluster and then the job
                 events, as the fold reads them: what is left when nothing is decoded;
  full fold:     every event decoded and every Job and Cluster aggregate folded;
  resume:        `Planner.resume()`: every cluster and each cluster's current job (finished
                 jobs are loaded when a request names them).
Memory: the process's resident size grown by the fold while its state is kept, per event, and
its peak.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import resource
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import uuid4

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nats.js.api import DeliverPolicy

from bench import goals
from contracts import subjects
from contracts.catalog import Action
from contracts.events import (
    ClusterRequested,
    ClusterStatusChanged,
    JobPlanned,
    JobRequested,
    JobSucceeded,
    PlannedTaskRecord,
    TaskCompleted,
    TaskQueued,
)
from muster.bus.connect import connect
from muster.bus.eventstore import Append, EventStore
from muster.bus.ordered import OrderedReader
from muster.bus.repository import fold
from muster.bus.server import NatsServer
from muster.bus.streams import ensure_streams
from services.planner.app import Planner, PlannerConfig
from services.planner.domain.cluster import Cluster
from services.planner.domain.job import Job
from services.planner.entrypoint import nats_planner

TASKS_PER_JOB = 50  # 2 + 2*50 + 1 = 103 events per job
TENANT = "bench"
FOLD_GOAL = 0.7
BATCHES_IN_FLIGHT = 4
BATCH = 900


class Clusters:
    """The clusters a log's jobs go to, and how far each one's history is (so that a log can
    be written in several steps)."""

    def __init__(self, n: int) -> None:
        self.ids = [str(uuid4()) for _ in range(n)]
        self.versions = dict.fromkeys(self.ids, 0)
        self.jobs = 0


def default_clusters(events: int) -> int:
    return max(10, events // (100 * (2 * TASKS_PER_JOB + 3)))


def log_jobs(events: int, clusters: Clusters | None = None) -> Iterator[list[tuple[str, Append]]]:
    """The log, one job (and its cluster's pointer to it) at a time, as (subject, Append)."""
    now = datetime.now(UTC)
    cs = clusters or Clusters(default_clusters(events))
    tasks = [PlannedTaskRecord(id=f"n{i}.install.s", node=f"n{i}", action=Action.INSTALL, service="s") for i in range(TASKS_PER_JOB)]
    links = [([tasks[i].id], [tasks[i + 1].id]) for i in range(TASKS_PER_JOB - 1)]
    written = 0
    while written < events:
        job, cluster = str(uuid4()), cs.ids[cs.jobs % len(cs.ids)]
        cs.jobs += 1
        jsub, csub = subjects.job_events(TENANT, job), subjects.cluster_events(TENANT, cluster)
        cs.versions[cluster] += 1
        pointer = (ClusterRequested(tenant=TENANT, cluster_id=cluster, name="c", template="t", provider="p", job_id=job)
                   if cs.versions[cluster] == 1 else ClusterStatusChanged(cluster_id=cluster, status="active", job_id=job))
        items: list[tuple[str, Any, str, int]] = [
            (csub, pointer, cluster, cs.versions[cluster]),
            (jsub, JobRequested(tenant=TENANT, job_id=job, cluster_id=cluster, operation="configure", request={}), job, 1),
            (jsub, JobPlanned(job_id=job, tasks=tasks, links=links, stages=[[t.id] for t in tasks]), job, 2),
        ]
        version = 3
        for t in tasks:
            items.append((jsub, TaskQueued(job_id=job, task_id=t.id, attempt=1, node=t.node, action=Action.INSTALL, service="s"), job, version))
            items.append((jsub, TaskCompleted(job_id=job, task_id=t.id, attempt=1), job, version + 1))
            version += 2
        items.append((jsub, JobSucceeded(job_id=job), job, version))
        yield [(s, Append(e, msg_id=f"{a}:{v}", aggregate_id=a, version=v, time=now)) for s, e, a, v in items]
        written += len(items)


async def write_log(nc, events: int, clusters: Clusters | None = None) -> int:
    """Whole jobs in atomic batches of up to BATCH messages (one commit and one disk sync for
    each: the server commits one batch at a time, ~10 ms each, so they are large), several in
    flight. What the log holds is the same as with one append per event."""
    pending: set[asyncio.Task[None]] = set()
    written = 0

    async def one(batch: list[tuple[str, Append]], batch_id: str) -> None:
        for i, (subject, item) in enumerate(batch, start=1):
            headers = item.headers() | {"Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": str(i)}
            data = item.event.model_dump_json().encode()
            if i < len(batch):
                await nc.publish(subject, data, headers=headers)
            else:
                reply = await nc.request(subject, data, timeout=120, headers=headers | {"Nats-Batch-Commit": "1"})
                if b'"error"' in reply.data:
                    raise RuntimeError(f"batch refused: {reply.data[:300]!r}")

    group: list[tuple[str, Append]] = []
    n = 0
    for job in log_jobs(events, clusters):
        group += job
        written += len(job)
        if len(group) + len(job) <= BATCH:
            continue
        if len(pending) >= BATCHES_IN_FLIGHT:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                t.result()
        n += 1
        task = asyncio.create_task(one(group, f"bench-{uuid4().hex[:12]}-{n}"))
        pending.add(task)
        task.add_done_callback(pending.discard)
        group = []
    if group:
        await one(group, f"bench-{uuid4().hex[:12]}-last")
    await asyncio.gather(*pending)
    return written


async def raw_natspy(nc, count: int) -> float:
    done = asyncio.get_running_loop().create_future()
    seen = 0

    async def cb(msg) -> None:
        nonlocal seen
        seen += 1
        if seen >= count and not done.done():
            done.set_result(None)

    start = time.perf_counter()
    sub = await nc.jetstream().subscribe(subjects.ALL_EVENTS, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL, cb=cb,
                                         pending_msgs_limit=-1, pending_bytes_limit=-1)
    await asyncio.wait_for(done, 3600)
    elapsed = time.perf_counter() - start
    await sub.unsubscribe()
    return elapsed


async def raw_wire(nc) -> float:
    start = time.perf_counter()
    for f in (subjects.ALL_CLUSTER_EVENTS, subjects.ALL_JOB_EVENTS):
        await OrderedReader(nc, subjects.EVENTS_STREAM, [f], lambda *frame: None).run(3600)
    return time.perf_counter() - start


async def full_fold(nc) -> tuple[float, dict[str, Job], dict[str, Cluster]]:
    store = EventStore(nc)
    jobs: dict[str, Job] = {}
    clusters: dict[str, Cluster] = {}

    def on_job(r) -> None:
        key = r.subject.rsplit(".", 1)[1]
        jobs[key] = fold(Job, jobs.get(key), r)

    def on_cluster(r) -> None:
        key = r.subject.rsplit(".", 1)[1]
        clusters[key] = fold(Cluster, clusters.get(key), r)

    start = time.perf_counter()
    await store.replay(subjects.ALL_CLUSTER_EVENTS, on_cluster, timeout=3600)
    await store.replay(subjects.ALL_JOB_EVENTS, on_job, timeout=3600)
    return time.perf_counter() - start, jobs, clusters


async def resume(nc) -> tuple[float, Planner]:
    planner = nats_planner(nc, PlannerConfig(instance="bench", snapshot_every=0))  # from the log alone
    start = time.perf_counter()
    await planner.resume()
    return time.perf_counter() - start, planner


def rss_bytes() -> int:
    gc.collect()
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def main(events: int, repeat: int, write_docs: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with NatsServer(Path(tmp)) as server:
            nc = await connect(server.url, name="bench")
            await ensure_streams(nc.jetstream())
            t0 = time.perf_counter()
            written = await write_log(nc, events)
            write_s = time.perf_counter() - t0
            natspy_s, wire_s, fold_s, resume_s = [], [], [], []
            state_bytes = 0
            for _ in range(repeat):  # in turn, so that each sees the same load of a shared machine
                natspy_s.append(await raw_natspy(nc, written))
                wire_s.append(await raw_wire(nc))
                before = rss_bytes()
                seconds, jobs, clusters = await full_fold(nc)
                fold_s.append(seconds)
                state_bytes = max(state_bytes, rss_bytes() - before)
                n_jobs, n_clusters = len(jobs), len(clusters)
                del jobs, clusters
                seconds, planner = await resume(nc)
                resume_s.append(seconds)
                del planner
            await nc.close()
    natspy, wire, fold_rate, resume_rate = (written / min(s) for s in (natspy_s, wire_s, fold_s, resume_s))
    ratio = fold_rate / natspy
    goal = goals.Goal("full fold / raw ordered read (nats-py)", round(ratio, 2), ">=", FOLD_GOAL, "x")
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    raw_text = f"{natspy:,.0f} events/s (nats-py ordered consumer, count only)"
    rows = [
        ("events in the log", f"{written:,} ({n_jobs:,} jobs on {n_clusters:,} clusters)", "", "", ""),
        (f"write (atomic batches of whole jobs, up to {BATCH} events, {BATCHES_IN_FLIGHT} in flight)",
         f"{written / write_s:,.0f} events/s", "", "", ""),
        ("raw read, nats-py: ordered consumer counting every event — the limit", f"{natspy:,.0f} events/s", "", "", ""),
        ("raw read, wire: muster's reader counting the cluster, then the job events", f"{wire:,.0f} events/s", raw_text,
         f"{wire / natspy:.2f}x", ""),
        ("full fold: every event decoded, every Job and Cluster folded", f"{fold_rate:,.0f} events/s ({written / fold_rate:.1f} s)",
         raw_text, f"{ratio:.2f}x", goal.verdict()),
        ("full fold next to the wire read of the same events", f"{fold_rate:,.0f} events/s", f"{wire:,.0f} events/s (raw read, wire)",
         f"{fold_rate / wire:.2f}x", ""),
        ("planner resume without snapshots (clusters + each one's current job)", f"{resume_rate:,.0f} events/s of log covered "
         f"({written / resume_rate:.2f} s)", raw_text, f"{resume_rate / natspy:.1f}x", ""),
        ("memory of the full fold's state (RSS growth while kept)", f"{state_bytes / written:,.0f} bytes/event "
         f"({state_bytes / 2**20:,.0f} MiB)", "", "", ""),
        ("peak RSS of this process", f"{rss_mb:,.0f} MiB", "", "", ""),
    ]
    header = "| figure | value | raw figure, same run | ratio | goal |\n|---|---|---|---|---|\n"
    table = header + "".join(f"| {' | '.join(r)} |\n" for r in rows)
    print(table)
    print(f"best of {repeat}: nats-py {', '.join(f'{s:.2f}' for s in natspy_s)} s; wire {', '.join(f'{s:.2f}' for s in wire_s)} s; "
          f"fold {', '.join(f'{s:.2f}' for s in fold_s)} s; resume {', '.join(f'{s:.2f}' for s in resume_s)} s")
    print(goals.line([goal]))
    if write_docs:
        section = "## Planner state rebuild\n\n" + (
            f"`python bench/planner_rebuild_bench.py --events {events}` on {os.cpu_count()} cores, "
            f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, load average at the end "
            f"{' / '.join(f'{x:.1f}' for x in os.getloadavg())}. nats-server and this process share the machine; "
            f"each read ran {repeat} times in turn and the best is shown.\n\n" + table
        )
        replace_section(Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md", "## Planner state rebuild", section)


def replace_section(path: Path, heading: str, section: str) -> None:
    """Replace the `heading` section up to the next `## ` heading (its `###` sections stay
    with it: write them into `section`)."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    if heading in text:
        before, rest = text.split(heading, 1)
        after = rest[rest.find("\n## "):] if "\n## " in rest else ""
        text = before + section.rstrip() + "\n" + after
    else:
        text = text.rstrip() + "\n\n" + section
    path.write_text(text)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    asyncio.run(main(args.events, args.repeat, args.write_docs))
