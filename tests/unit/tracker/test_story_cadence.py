"""The tracker's index hands a cluster's first event and each end of its jobs to the story
writer, so that a job's end reads the jobs' whole story again for a snapshot only once those
since the last one ran `EVERY_TASKS` tasks (decision 0043)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from contracts import subjects
from contracts.events import ClusterRequested, ClusterStatusChanged, JobSucceeded
from contracts.records import Recorded
from muster.ports.memory import MemoryEventLog
from muster.snapshots import MemorySnapshots
from services.tracker.metrics import TrackerMetrics
from services.tracker.routing import IndexFeeder
from services.tracker.story import EVERY_TASKS, StoryWriter

T, CLUSTER, JOB = "acme", "33333333-3333-4333-8333-000000000001", "44444444-4444-4444-8444-000000000001"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


class Index:
    """The index's mirror, as far as the feeder asks it: the job's cluster and size."""

    def __init__(self, tasks: int) -> None:
        self.mirror = {f"job.{T}.{JOB}": {"cluster_id": CLUSTER, "tasks_total": tasks}}


class Tracker:
    def __init__(self, tasks: int) -> None:
        self.index = Index(tasks)

    async def on_event(self, recorded: Recorded) -> tuple[int, int]:
        return 0, 0


def feeder(tasks: int) -> tuple[IndexFeeder, StoryWriter]:
    writer = StoryWriter(MemoryEventLog(), MemorySnapshots())
    tracker: Any = Tracker(tasks)
    return IndexFeeder(tracker, TrackerMetrics(), writer), writer


def made(seq: int) -> Recorded:
    return Recorded(seq, subjects.cluster_events(T, CLUSTER), NOW, ClusterRequested(
        tenant=T, cluster_id=CLUSTER, name="c", template="t", provider="sim", job_id=JOB))


def ended(seq: int) -> Recorded:
    return Recorded(seq, subjects.job_events(T, JOB), NOW, JobSucceeded(job_id=JOB))


def status(seq: int) -> Recorded:
    return Recorded(seq, subjects.cluster_events(T, CLUSTER), NOW, ClusterStatusChanged(cluster_id=CLUSTER, status="active", job_id=JOB))


async def test_the_first_job_of_a_cluster_seen_made_writes_no_story_snapshot_below_every_tasks() -> None:
    feed, writer = feeder(tasks=EVERY_TASKS - 1)
    await feed.on_location_event(made(1))
    await feed.on_location_event(status(8))
    await feed.on_location_event(ended(9))
    assert writer._writing is None and not writer._due


async def test_a_first_job_of_every_tasks_writes_one() -> None:
    feed, writer = feeder(tasks=EVERY_TASKS)
    await feed.on_location_event(made(1))
    await feed.on_location_event(ended(9))
    assert writer._writing is not None
    await writer.idle()


async def test_jobs_that_leave_the_cluster_s_status_as_it_was_count_too() -> None:
    """An expand's end changes no status (its start set it): its end is its final event."""
    feed, writer = feeder(tasks=EVERY_TASKS // 2 + 1)
    await feed.on_location_event(made(1))
    await feed.on_location_event(ended(9))
    assert writer._writing is None
    await feed.on_location_event(ended(19))  # (the same job in this mirror: a second job of its size)
    assert writer._writing is not None
    await writer.idle()
