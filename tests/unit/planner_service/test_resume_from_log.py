"""A planner rebuilt from the log carries on where the last one stopped: open jobs, queued
attempts (published again, de-duplicated by the queue), timeouts counted from the logged times,
and a layout request that was never made."""

from __future__ import annotations

from collections import Counter

import pytest
from planner_harness import Harness, OwnedWhere

from contracts.commands import Accepted, CreateCluster, DeleteCluster, Rejected
from contracts.events import JobSucceeded
from muster.ports.eventlog import ConcurrencyError
from services.planner.app import PlannerConfig
from services.planner.recovery import LeaseLapsed


async def test_a_restarted_planner_finishes_the_job_without_dispatching_twice(h: Harness) -> None:
    h.behaviour = lambda m: "succeed" if m.action.value in ("create", "confirm") else "hold"
    reply = await h.send(CreateCluster(name="resumed", template="hadoop-small", nodes=3))
    assert isinstance(reply, Accepted)
    await h.settle()
    queued_before = len(h.queue.messages)
    second = await h.restart()
    assert reply.job_id in second.jobs and not second.jobs[reply.job_id].is_final
    assert len(h.queue.messages) == queued_before  # re-published, de-duplicated by the queue
    h.behaviour = lambda m: "succeed"
    await h.release()
    assert isinstance(h.final(reply.job_id), JobSucceeded)
    queued = Counter((r.event.task_id, r.event.attempt) for r in h.log.records if r.type == "TaskQueued")
    assert queued and max(queued.values()) == 1 and all(a == 1 for _, a in queued)
    assert second.clusters[reply.cluster_id].status == "active"


async def test_timeouts_are_rebuilt_from_the_logged_times() -> None:
    h = Harness(config=PlannerConfig(instance="p1", task_timeout_s=900.0))
    h.behaviour = lambda m: "silent"
    reply = await h.send(CreateCluster(name="slow", template="hadoop-small", nodes=2))
    await h.settle()
    await h.clock.advance(500)
    await h.restart(PlannerConfig(instance="p2", task_timeout_s=900.0))
    assert len(h.planner.timers.armed("timeout")) == 2  # both creates, re-armed
    await h.clock.advance(399)  # 899 s after they were queued
    assert "TaskAttemptFailed" not in h.history(reply.job_id)
    await h.clock.advance(2)
    assert len(h.failures(reply.job_id)) == 2  # (with segments, their followers end unrun too: no failure)


async def test_a_republish_pending_when_the_planner_died_is_made_by_the_next(h: Harness) -> None:
    h.queue.fail(lambda m: m.action.value == "create", TimeoutError("lost"), times=2)
    reply = await h.send(CreateCluster(name="lost", template="hadoop-small", nodes=2))
    await h.settle()
    assert h.queue.messages == []  # both creates are queued in the log only
    await h.restart()
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobSucceeded)


async def test_a_layout_request_lost_in_a_crash_is_made_at_resume(h: Harness) -> None:
    h.log.inject(lambda subject, items: ".layout." in subject, TimeoutError("crashed before the append"))
    reply = await h.send(CreateCluster(name="unasked", template="hadoop-small", nodes=2, request_id="r1"))
    assert isinstance(reply, Rejected) and reply.retry, reply  # the log did not answer: "send it again"
    job_id = next(r.event.job_id for r in h.log.records if r.type == "JobRequested")
    assert "LayoutRequested" not in h.log.types()
    await h.restart()
    await h.settle()
    assert isinstance(h.final(job_id), JobSucceeded)
    # The retried request maps to the same job: answered as a duplicate.
    again = await h.send(CreateCluster(name="unasked", template="hadoop-small", nodes=2, request_id="r1"))
    assert isinstance(again, Accepted) and again.duplicate and again.job_id == job_id


async def test_a_restarted_planner_adopts_the_open_jobs_and_only_those() -> None:
    """Issue #18.8: the job's owner named the dead planner after a restart. The planner that
    resumes an open job records that it owns it now; a finished job keeps its owner; a planner
    that restarts under the same name adopts nothing twice."""
    h = Harness(config=PlannerConfig(instance="p1"))
    h.behaviour = lambda m: "succeed"
    done = await h.send(CreateCluster(name="done", template="hadoop-small", nodes=2))
    await h.release()
    assert isinstance(done, Accepted) and isinstance(h.final(done.job_id), JobSucceeded)
    h.behaviour = lambda m: "hold"
    open_ = await h.send(CreateCluster(name="open", template="hadoop-small", nodes=2))
    assert isinstance(open_, Accepted)
    await h.settle()

    second = await h.restart(PlannerConfig(instance="p2"))
    adopted = [r.event for r in h.log.records if r.type == "JobAdopted"]
    assert [(e.job_id, e.planner, e.previous) for e in adopted] == [(open_.job_id, "p2", "p1")]
    view = second.job_view("default", open_.job_id)
    assert view is not None and view["owner"] == "p2"
    finished = await second.find_job("default", done.job_id)
    assert finished is not None and finished.planner == "p1"

    await h.restart(PlannerConfig(instance="p2"))
    assert len([r for r in h.log.records if r.type == "JobAdopted"]) == 1


async def test_an_adoption_refused_because_the_job_moved_on_is_made_again_on_the_logs_view() -> None:
    """The fault suite's nemesis: a planner gaining a shard read a job, and the planner whose
    lease had just run out, still busy with it, wrote to the job before the adoption landed. The
    adoption was refused, and the new owner drove the job without it on record (the fencing
    check saw its writes as another planner's). It is made again on the log's view."""
    h = Harness(config=PlannerConfig(instance="p1"))
    h.behaviour = lambda m: "hold"
    open_ = await h.send(CreateCluster(name="open", template="hadoop-small", nodes=2))
    assert isinstance(open_, Accepted)
    await h.settle()
    h.log.inject(lambda subject, items: any(i.event.type == "JobAdopted" for i in items),
                 ConcurrencyError("another writer came first"))
    second = await h.restart(PlannerConfig(instance="p2"))
    adopted = [r.event for r in h.log.records if r.type == "JobAdopted"]
    assert [(e.job_id, e.planner) for e in adopted] == [(open_.job_id, "p2")]
    view = second.job_view("default", open_.job_id)
    assert view is not None and view["owner"] == "p2"
    h.behaviour = lambda m: "succeed"
    await h.release()
    assert isinstance(h.final(open_.job_id), JobSucceeded)


async def test_a_take_up_that_outlasts_its_lease_stops_and_the_next_loads_every_current_job() -> None:
    """`resume(only)` runs for the shards a planner has just gained. If their lease is no
    longer valid when an open job is to be carried on with (renewals failing while the bus is
    unwell: the nemesis saw a take-up of 8 s against a 3 s lease, and the planner adopted a job
    another had adopted meanwhile), it stops with `LeaseLapsed` and acts for nothing more: the
    shards are handed back (muster/bus/shards.py, tests/integration/bus/test_shards.py) and
    the next take-up loads every cluster's current job, the deleted cluster's and the open
    one (nothing else would: an open job would stall, and a deleted cluster's delete would have
    no planner answering for it, as the soak found); test_leases.py checks the lease's expiry is
    armed at a take-up too."""
    late = False
    h = Harness(ownership=OwnedWhere(lambda tenant, cluster_id: not late))
    gone = await h.cluster_of(nodes=2, name="gone")
    deleted = await h.ok(DeleteCluster(cluster_id=gone))
    await h.settle()
    h.behaviour = lambda m: "hold"
    running = await h.send(CreateCluster(name="running", template="hadoop-small", nodes=2))
    assert isinstance(running, Accepted)
    await h.settle()
    h.planner.timers.cancel_all()
    h.planner = h._planner()
    written = len(h.log.records)
    late = True
    with pytest.raises(LeaseLapsed):
        await h.planner.resume(lambda cluster_id: True)
    assert len(h.log.records) == written  # nothing recorded for the job
    late = False
    h.planner = h._planner()
    await h.planner.resume(lambda cluster_id: True)
    assert h.planner.job_view("default", deleted.job_id) is not None
    assert running.job_id in h.planner.jobs and not h.planner.jobs[running.job_id].is_final
    h.behaviour = lambda m: "succeed"
    await h.release()
    assert isinstance(h.final(running.job_id), JobSucceeded)
