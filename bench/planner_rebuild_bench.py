"""How fast a planner rebuilds its state from the log, next to how fast this machine can merely
read the same messages from JetStream (the limit), in the same run.

    python bench/planner_rebuild_bench.py [--events 1000000] [--write-docs]

Writes a log of jobs the way the planner does (JobRequested, JobPlanned, then TaskQueued and
TaskCompleted per task, JobSucceeded; each job on one of the clusters, which records it as
its current job), then measures:
  raw:       an ordered consumer with a callback that only counts messages (the limit);
  full fold: decode every event and fold every Job and Cluster aggregate;
  resume:    `Planner.resume()`: every cluster and each cluster's current job (finished jobs
             are loaded when a request names them).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import uuid4

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nats.js.api import DeliverPolicy

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
from muster.bus.eventstore import EventStore
from muster.bus.repository import fold
from muster.bus.server import NatsServer
from muster.bus.streams import ensure_streams
from services.planner.app import PlannerConfig
from services.planner.domain.cluster import Cluster
from services.planner.domain.job import Job
from services.planner.entrypoint import nats_planner

TASKS_PER_JOB = 50  # 2 + 2*50 + 1 = 103 events per job
TENANT = "bench"


def _headers(aggregate: str, version: int, now: str) -> dict[str, str]:
    return {"Muster-Aggregate": aggregate, "Muster-Version": str(version), "Muster-Time": now}


async def write_log(nc, events: int) -> int:
    js = nc.jetstream()
    now = datetime.now(UTC).isoformat()
    written = 0
    clusters = [str(uuid4()) for _ in range(max(10, events // (100 * (2 * TASKS_PER_JOB + 3))))]
    versions = dict.fromkeys(clusters, 0)
    n = 0
    tasks = [PlannedTaskRecord(id=f"n{i}.install.s", node=f"n{i}", action=Action.INSTALL, service="s") for i in range(TASKS_PER_JOB)]
    links = [([tasks[i].id], [tasks[i + 1].id]) for i in range(TASKS_PER_JOB - 1)]
    while written < events:
        job, cluster = str(uuid4()), clusters[n % len(clusters)]
        n += 1
        jsub, csub = subjects.job_events(TENANT, job), subjects.cluster_events(TENANT, cluster)
        versions[cluster] += 1
        first = versions[cluster] == 1
        pointer = (ClusterRequested(tenant=TENANT, cluster_id=cluster, name="c", template="t", provider="p", job_id=job) if first
                   else ClusterStatusChanged(cluster_id=cluster, status="active", job_id=job))
        batch: list[tuple[str, Any, str, int]] = [
            (csub, pointer, cluster, versions[cluster]),
            (jsub, JobRequested(tenant=TENANT, job_id=job, cluster_id=cluster, operation="configure", request={}), job, 1),
            (jsub, JobPlanned(job_id=job, tasks=tasks, links=links, stages=[[t.id] for t in tasks]), job, 2),
        ]
        version = 3
        for t in tasks:
            batch.append((jsub, TaskQueued(job_id=job, task_id=t.id, attempt=1, node=t.node, action=Action.INSTALL, service="s"), job, version))
            batch.append((jsub, TaskCompleted(job_id=job, task_id=t.id, attempt=1), job, version + 1))
            version += 2
        batch.append((jsub, JobSucceeded(job_id=job), job, version))
        for subject, event, aggregate, v in batch:
            await js.publish_async(subject, event.model_dump_json().encode(), headers=_headers(aggregate, v, now))
        written += len(batch)
    await js.publish_async_completed()
    return written


async def raw_read(nc, count: int) -> float:
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


async def full_fold(nc) -> tuple[float, int]:
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
    await store.replay(subjects.ALL_CLUSTER_EVENTS, on_cluster)
    await store.replay(subjects.ALL_JOB_EVENTS, on_job)
    return time.perf_counter() - start, len(jobs)


async def rebuild(nc) -> tuple[float, int]:
    planner = nats_planner(nc, PlannerConfig(instance="bench"))
    start = time.perf_counter()
    await planner.resume()
    return time.perf_counter() - start, len(planner.clusters)


async def main(events: int, write_docs: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with NatsServer(Path(tmp)) as server:
            nc = await connect(server.url, name="bench")
            await ensure_streams(nc.jetstream())
            t0 = time.perf_counter()
            written = await write_log(nc, events)
            write_s = time.perf_counter() - t0
            raw_s = await raw_read(nc, written)
            fold_s, jobs = await full_fold(nc)
            rebuild_s, clusters = await rebuild(nc)
            await nc.close()
    raw_rate, fold_rate, rebuild_rate = written / raw_s, written / fold_s, written / rebuild_s
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rows = [
        ("events in the log", f"{written:,} ({jobs:,} jobs on {clusters:,} clusters)"),
        ("write (publish_async)", f"{written / write_s:,.0f} events/s"),
        ("raw read (ordered consumer, count only) — the limit", f"{raw_rate:,.0f} events/s ({raw_s:.1f} s)"),
        ("full fold (decode + fold every Job and Cluster)", f"{fold_rate:,.0f} events/s ({fold_s:.1f} s), {fold_rate / raw_rate:.2f} x raw"),
        ("planner resume (clusters + current jobs)", f"{rebuild_rate:,.0f} events/s of log covered ({rebuild_s:.2f} s), {rebuild_rate / raw_rate:.1f} x raw"),
        ("resume / raw (target >= 0.5)", f"{rebuild_rate / raw_rate:.2f}"),
        ("peak RSS of this process", f"{rss_mb:,.0f} MB"),
    ]
    for k, v in rows:
        print(f"{k:55s} {v}")
    print(json.dumps({"events": written, "raw_per_s": raw_rate, "full_fold_per_s": fold_rate, "resume_per_s": rebuild_rate}))
    if write_docs:
        section = "## Planner state rebuild\n\n" + (
            f"`python bench/planner_rebuild_bench.py --events {events}` on {os.cpu_count()} cores, "
            f"{datetime.now(UTC):%Y-%m-%d}. nats-server and this process share the machine.\n\n"
            "| figure | value |\n|---|---|\n" + "".join(f"| {k} | {v} |\n" for k, v in rows)
        )
        replace_section(Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md", "## Planner state rebuild", section)


def replace_section(path: Path, heading: str, section: str) -> None:
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
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    asyncio.run(main(args.events, args.write_docs))
