"""Bugs the fault suite found outside its own code, kept as regression tests once fixed (a bug
still open is marked xfail(strict=True) with its cause, so its fix shows up as an XPASS)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeout
from nats.js.errors import NoStreamResponseError

from contracts import subjects
from contracts.commands import Accepted, AddServices, CreateCluster
from contracts.events import JobPaused, JobRolledBack, JobSucceeded
from contracts.tasks import TaskMessage
from muster.bus.cluster import start_loopback_cluster
from muster.bus.connect import connect
from muster.bus.eventstore import Append, EventStore
from muster.bus.server import NatsServer
from muster.bus.streams import ensure_streams
from muster.catalog.store import apply_catalog

from .harness import FaultStack, create_streams, demo_catalog, with_broken_service

pytestmark = [pytest.mark.fault, pytest.mark.timeout(60)]
T = "default"


# Found by the fault suite: replay of a filter that matches nothing once waited for its timeout
# whenever the consumer had already moved past other subjects' events.
async def test_replay_of_a_filter_matching_nothing_returns_at_once(tmp_path: Path) -> None:
    async with NatsServer(tmp_path / "nats") as server:
        nc = await connect(server.url, name="replay-bug")
        try:
            await ensure_streams(nc.jetstream())
            store = EventStore(nc)
            for i in range(5):
                await store.append(f"muster.evt.t.job.j{i}", [Append(JobPaused(job_id=f"j{i}", by="x"), msg_id=f"m{i}")])
            for attempt in range(30):
                try:
                    assert await store.replay("muster.evt.*.cluster.*", lambda r: None, timeout=0.5) == 0
                except TimeoutError:
                    pytest.fail(f"replay of a filter matching nothing hung (attempt {attempt + 1} of 30)")
        finally:
            await nc.close()


# Found by the fault suite: retries were not steered away from the provisioner that ran the
# failed attempt (MISSION §4: "on a different provisioner where possible").
async def test_a_retried_attempt_names_the_provisioners_to_avoid(tmp_path: Path) -> None:
    async with await FaultStack.single(tmp_path) as fs:
        await fs.load_catalog(T, with_broken_service(demo_catalog(latency_ms="0")))
        created = await fs.client.send(T, CreateCluster(name="avoid", template="hadoop-small", nodes=2))
        assert isinstance(created, Accepted) and isinstance(await fs.client.wait(created.job_id, timeout=60), JobSucceeded)
        messages: list[TaskMessage] = []

        async def on_task(msg: Msg) -> None:
            messages.append(TaskMessage.model_validate_json(msg.data))

        sub = await fs.conn.subscribe(subjects.task_queue(T, "default"), cb=on_task)
        try:
            added = await fs.client.send(T, AddServices(cluster_id=created.cluster_id, services=["broken"]))
            assert isinstance(added, Accepted)
            assert isinstance(await fs.client.wait(added.job_id, timeout=60), JobRolledBack)
        finally:
            await sub.unsubscribe()
        retries = [m for m in messages if m.job_id == added.job_id and m.attempt > 1]
        assert retries, "the failing start was never retried"
        assert all(m.avoid == ["prov-1"] for m in retries), [(m.task_id, m.attempt, m.avoid) for m in retries]


# Found by the fault suite (scenarios 3 and 4): a task publish that failed after its TaskQueued
# was recorded (TASKS without a leader for a moment) was never made again; an append whose ack
# was lost left the planner's view ahead of the log. Both now repair themselves
# (the republish timer in services/planner/execution.py, the reload in PlannerState.save).


@pytest.mark.parametrize("stack", [{"http": False, "ack_wait_s": 1.0}], indirect=True)
@pytest.mark.parametrize("fails", ["task publish", "job append"])
async def test_a_write_that_fails_mid_handler_is_made_again(stack: Any, fails: str) -> None:
    """Found by the fault suite (scenarios 3 and 4): a planner write (an append of the job's
    events, a task publish) that failed mid-handler was never made again, and the job stalled."""
    store, queue = stack.planner.log, stack.planner.queue
    publish_many, append, append_fenced = queue.publish_many, store.append, store.append_fenced
    failed: list[str] = []

    async def flaky_publish_many(messages: Sequence[TaskMessage]) -> list[BaseException | None]:
        if fails == "task publish" and messages and not failed:
            failed.append(messages[0].task_id)  # the first of the wave is lost
            return [NoStreamResponseError(), *await publish_many(messages[1:])]  # as while TASKS elects a leader
        return await publish_many(messages)

    async def flaky_append(subject: str, items: Any, *args: Any, **kwargs: Any) -> Any:
        if fails == "job append" and ".job." in subject and any(i.event.type == "TaskCompleted" for i in items) and not failed:
            failed.append(subject)
            raise NatsTimeout  # as when the connection dies under the request
        return await append(subject, items, *args, **kwargs)

    async def flaky_append_fenced(entries: Any, *args: Any, **kwargs: Any) -> Any:
        # (a job's task records go with a marker in a batch across its two subjects, decision 33)
        if fails == "job append" and any(i.event.type == "TaskCompleted" for _, i in entries) and not failed:
            failed.append(entries[0][0])
            raise NatsTimeout
        return await append_fenced(entries, *args, **kwargs)

    queue.publish_many, store.append, store.append_fenced = flaky_publish_many, flaky_append, flaky_append_fenced
    reply = await stack.client.send(stack.tenant, CreateCluster(name="lost-write", template="hadoop-small", nodes=2))
    assert isinstance(reply, Accepted), reply
    # The job ends in a few seconds unless a write is lost for good.
    final = await asyncio.wait_for(stack.client.wait(reply.job_id), 12)
    assert failed and isinstance(final, JobSucceeded), final


# Found by the fault suite (scenario 4): a direct get answered by a lagging follower missed an
# acknowledged write; reads of replicated streams now end with the leader (EventStore.read).
async def test_a_read_right_after_a_write_sees_it_on_a_replicated_stream(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MUSTER_REPLICAS", "3")
    nodes, url = await start_loopback_cluster(tmp_path)
    try:
        admin = await connect(url, name="admin")
        try:
            await create_streams(admin, 3)
            leader = (await admin.jetstream().stream_info(subjects.EVENTS_STREAM)).cluster.leader  # type: ignore[union-attr]
        finally:
            await admin.close()
        # The writer on the stream's leader, the reader on a follower: NATS hands a request to a
        # subscriber on the reader's own server first, so the follower's replica answers.
        writer = await connect(next(n.url for n in nodes if n.name == leader), name="writer")
        reader = await connect(next(n.url for n in nodes if n.name != leader), name="reader")
        try:
            wrote, read = EventStore(writer), EventStore(reader)
            for i in range(700):  # about 1% of such reads were stale: the first came within a few hundred
                seq = (await wrote.append(f"muster.evt.t.job.j{i}", [Append(JobPaused(job_id=f"j{i}", by="x"), msg_id=f"m{i}")]))[0]
                # From a few writes back, not from the first: the stale answer, if any, is at
                # the end, and a read of everything made the test quadratic (700 reads).
                got = await read.read("muster.evt.t.job.>", start_seq=max(1, seq - 3))
                assert got and got[-1].seq == seq, f"read {i + 1}, right after its acknowledged write, missed it"
        finally:
            await writer.close()
            await reader.close()
    finally:
        for n in nodes:
            await n.stop()


@contextlib.asynccontextmanager
async def _four_provisioners_on_a_cluster(tmp_path: Path) -> AsyncIterator[list[EventStore]]:
    """A 3-node cluster with the log's streams replicated 3 times, and four provisioners'
    connections' event stores on it."""
    nodes, url = await start_loopback_cluster(tmp_path)
    try:
        conns = [await connect(url, name=f"provisioner-{p}") for p in range(4)]
        try:
            await create_streams(conns[0], 3)
            stores = [EventStore(c) for c in conns]
            for p, store in enumerate(stores):
                await _first_write_lands(store, f"muster.evt.t.warm.p{p}")
            yield stores
        finally:
            for c in conns:
                await c.close()
    finally:
        for n in nodes:
            await n.stop()


async def _first_write_lands(store: EventStore, subject: str, timeout: float = 30.0) -> None:
    """A young cluster's node may not know the new stream yet: a publish through it is answered
    503 (no stream takes the subject) for a moment, which a provisioner's claim meets as "give
    the task back" (test-long, session 23: two of the four connections' claims, 200 of 400).
    Each connection's first write is retried on that one answer, under a deadline, as
    `create_streams` does the streams."""
    from muster.bus.wire import Refused

    async def until_stored() -> None:
        for _ in range(int(timeout / 0.1)):
            try:
                await store.append(subject, [Append(JobPaused(job_id="warm", by="test"), msg_id=subject)])
                return
            except Refused as err:
                if err.status != "503":
                    raise
            await asyncio.sleep(0.1)

    await asyncio.wait_for(until_stored(), timeout)


def _claim(stores: list[EventStore], i: int, fence: str, msg_id: str) -> Any:
    """Task `n<i>`'s claim on `fence`, from provisioner `i % 4`, as it sends one (at once)."""
    from contracts.events import TaskClaimed

    event = TaskClaimed(job_id="j", task_id=f"n{i}.create", attempt=1, provisioner="p", worker=f"p/w{i}")
    return stores[i % 4].submit(f"muster.evt.t.task.j.n{i}~create.p", Append(event, msg_id=msg_id, only_if_empty=fence), now=True)


# Found by the fault suite (the stream-leader and TLS-rotation cluster scenarios, session 21):
# every claim of a job expects its cancel fence's subject empty (decision 46), and a replicated
# stream refuses an expectation on a subject while another one on it is being replicated (10164,
# whatever the subject holds): of a job's claims sent at once all but one were taken for "its job
# was cancelled" and never ran, the job waited for good. A busy fence is now tried again; only a
# closed one (10071) refuses the claim.
async def test_claims_sent_at_once_on_one_fence_all_land_on_a_replicated_stream(tmp_path: Path) -> None:
    from muster.ports.eventlog import ConcurrencyError

    async with _four_provisioners_on_a_cluster(tmp_path) as stores:
        fence, closed = "muster.evt.t.job.j.claims.0", "muster.evt.t.job.k.claims.0"
        # Five a provisioner: fewer than a group, each sent alone, all at once.
        landed = await asyncio.gather(*(_claim(stores, i, fence, f"{fence}.{i}") for i in range(20)), return_exceptions=True)
        assert all(isinstance(r, int) for r in landed), [r for r in landed if not isinstance(r, int)][:3]
        await stores[0].append(closed, [Append(JobPaused(job_id="k", by="x"), msg_id="closes-k")])
        refused = await asyncio.gather(*(_claim(stores, i, closed, f"{closed}.{i}") for i in range(20)), return_exceptions=True)
        assert all(isinstance(r, ConcurrencyError) for r in refused), refused[:3]


# Measured (bench/claims_cluster_bench.py, session 22): a wide create's claims on a replicated
# stream. One provisioner's claims waiting together went as an atomic batch, but one refused busy
# (another provisioner's claims on the fence in flight) was split into single claims sent side by
# side, which refused each other on the one fence: hundreds of claims each tried 8 times, many ran
# out of tries and their tasks came back. Now a writer's claims on one fence go as one batch at a
# time, and a busy batch goes again whole (docs/decisions/0050).
async def test_a_wide_fan_out_of_claims_on_one_fence_all_land_on_a_replicated_stream(tmp_path: Path) -> None:
    async with _four_provisioners_on_a_cluster(tmp_path) as stores:
        fence = "muster.evt.t.job.j.claims.0"
        for wave in range(3):  # (waves: the provisioners' batches meet on the fence in several ways)
            # As provisioners send them when a pull brings many tasks of one job at once.
            landed = await asyncio.gather(*(_claim(stores, wave * 400 + i, fence, f"j.{wave * 400 + i}") for i in range(400)),
                                          return_exceptions=True)
            failed = [r for r in landed if not isinstance(r, int)]
            assert not failed, f"wave {wave}: {len(failed)} of 400 did not land, e.g. {failed[:2]}"


# Found by the fault suite (scenario 6): a failed cleanup delete was neither retried nor counted,
# and its job stalled for good. Now it is retried; out of attempts, the job rolls back and the
# rollback deletes the machine.
@pytest.mark.parametrize("stack", [{"http": False}], indirect=True)
async def test_a_failed_cleanup_does_not_stall_the_job(stack: Any) -> None:
    catalog = demo_catalog(latency_ms="0", failure_rate_confirm="1", failure_rate_delete="1")
    await apply_catalog(stack.store, stack.tenant, catalog, by="test")
    reply = await stack.client.send(stack.tenant, CreateCluster(name="dirty", template="hadoop-small", nodes=2))
    assert isinstance(reply, Accepted), reply
    # Whatever the end (rolled back, or needs attention when the rollback's deletes fail too),
    # the job must end; with tasks that take no time it does within seconds.
    final = await asyncio.wait_for(stack.client.wait(reply.job_id), 15)
    assert final.type in ("JobRolledBack", "JobNeedsAttention"), final
