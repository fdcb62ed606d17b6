"""The invariant checker's end game without a soak: it asks the planners about every job at
once, and a finished job nobody answers for is compared with the log's read model instead
(the soak's final check used to ask one job at a time, 5 s per unanswered job: docs/faults.md);
a current job whose planner is still taking its shard back is asked again when it has."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

from nats.aio.client import Client

from contracts import subjects
from contracts.events import JobRequested, JobSucceeded
from muster.bus.connect import connect
from muster.bus.eventstore import Recorded
from muster.bus.repository import rebuild
from muster.bus.shards import BUCKET as LEASES
from services.planner.domain.cluster import Cluster
from services.planner.domain.job import Job

from .invariants import Report, _compare_job_views, _normal

START = datetime(2026, 1, 1, tzinfo=UTC)


def finished_job(n: int) -> tuple[Job, list[Recorded]]:
    job_id = f"00000000-0000-4000-8000-{n:012d}"
    events = [JobRequested(tenant="acme", job_id=job_id, cluster_id="c", operation="create", request={}),
              JobSucceeded(job_id=job_id)]
    history = [Recorded(i + 1, f"muster.evt.acme.job.{job_id}", START, e, job_id, i + 1) for i, e in enumerate(events)]
    job = rebuild(Job, history)
    assert job is not None and job.is_final
    return job, history


async def test_every_job_is_asked_at_once_and_the_unanswered_finished_ones_are_read_from_the_log(
    nc: Client, tenant: str
) -> None:
    made = [finished_job(n) for n in range(8)]
    jobs = {(tenant, str(job.id)): job for job, _ in made}
    by_subject = {subjects.job_events(tenant, str(job.id)): history for job, history in made}
    answered = {str(job.id) for job, _ in made[:4]}
    # The first four are their clusters' current jobs: their planner answers. It answers only once
    # every one of them has been asked, so a checker asking one job at a time would time out.
    clusters = {(tenant, f"c{n}"): _cluster(job_id) for n, job_id in enumerate(answered)}
    by_subject[subjects.job_events(tenant, str(made[7][0].id))] = made[7][1][:1]  # its log lost the end
    asked: set[str] = set()
    everyone: asyncio.Event = asyncio.Event()
    replies: list[asyncio.Future[None]] = []
    views = {str(job.id): _normal(job.view()) for job, _ in made}

    async def answer(msg: Any) -> None:
        job_id = msg.subject.rsplit(".", 1)[1]
        if job_id not in answered:
            return  # a finished job the planner no longer holds: no answer, by design
        asked.add(job_id)
        if asked == answered:
            everyone.set()
        await everyone.wait()
        await msg.respond(json.dumps(views[job_id]).encode())

    async def planner(msg: Any) -> None:  # nats-py runs one callback at a time per subscription
        replies.append(asyncio.ensure_future(answer(msg)))

    sub = await nc.subscribe(f"{subjects.QUERY}.{tenant}.*.job.*", cb=planner)
    report = Report()
    try:
        await _compare_job_views(report, nc, jobs, clusters, 1.0, by_subject)
    finally:
        await sub.unsubscribe()
        for reply in replies:
            reply.cancel()

    assert report.compared["planner job views"] == 4
    assert report.compared["finished jobs read from the log"] == 4
    assert report.problems == [f"job {made[7][0].id} ({tenant}): the read model's view differs from the aggregate's in "
                               f"['finished_at', 'state']"]


async def test_a_current_job_is_asked_again_once_its_planner_takes_its_shard_back(fresh_nats: str, tenant: str) -> None:
    """Its planner was killed just before the check: nobody answers until the restarted one
    takes the shard again (a write to the `leases` bucket), and then it does. (A server of its
    own: the leases bucket is the planners'.)"""
    nc = await connect(fresh_nats, name="invariant-queries")
    try:
        await _asked_again_when_the_shard_is_back(nc, tenant)
    finally:
        await nc.close()


async def _asked_again_when_the_shard_is_back(nc: Client, tenant: str) -> None:
    job, history = finished_job(99)
    job_id = str(job.id)
    kv = await nc.jetstream().create_key_value(bucket=LEASES)
    report = Report()
    asked = asyncio.Event()
    answering: list[Any] = []
    query = f"{subjects.QUERY}.{tenant}.*.job.{job_id}"

    async def dying(msg: Any) -> None:  # the killed planner's last breath: it hears, never answers
        asked.set()

    async def answer(msg: Any) -> None:
        await msg.respond(json.dumps(_normal(job.view())).encode())

    silent = await nc.subscribe(query, cb=dying)

    async def take_the_shard_back() -> None:
        await asyncio.wait_for(asked.wait(), 10)
        await silent.unsubscribe()
        answering.append(await nc.subscribe(query, cb=answer))
        await kv.put("shard.3", b'{"owner": "planner-2"}')

    back = asyncio.ensure_future(take_the_shard_back())
    try:
        await _compare_job_views(report, nc, {(tenant, job_id): job}, {(tenant, "c"): _cluster(job_id)}, 1.0,
                                 {subjects.job_events(tenant, job_id): history})
    finally:
        await back
        for sub in answering:
            await sub.unsubscribe()
    assert report.problems == [] and report.compared["planner job views"] == 1


def _cluster(job_id: str) -> Cluster:
    cluster = object.__new__(Cluster)
    cluster.job_id = job_id
    return cluster
