"""`muster replay` from a story snapshot and the events after it gives, byte for byte, what the
full fold from the first event gives (issue #16.2), for random stories and random points: a
log sequence or a time, snapshots taken at random points before or after it, a bucket that
keeps few of them. The reference below is the replay as it was before snapshots (kept here
verbatim, so that the code under test cannot drift with it)."""

from __future__ import annotations

import json
import random
import sys
import weakref
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contracts import events as ev
from contracts import subjects
from contracts.catalog import Action
from contracts.events import ClusterRequested, TaskClaimed, TaskFailed, TaskSucceeded
from contracts.layout import NodeSpec
from contracts.records import Recorded
from muster.bus.bodies import Offloaded
from muster.bus.repository import pending_appends
from muster.ports.memory import MemoryEventLog
from muster.readmodel.clusters import cluster_view, job_ids, prefix
from muster.readmodel.status import status_from_log
from muster.snapshots import MemorySnapshots
from services.planner.domain.cluster import Cluster
from services.tracker.story import EVERY_TASKS, MOST_TASKS, StoryWriter, replay_cluster, story_at

sys.path.append(str(Path(__file__).parents[1] / "bus"))
from histories import JOB_STEPS, job_step, new_job

T = "acme"
START = datetime(2026, 1, 1, tzinfo=UTC)


async def reference(store: Any, tenant: str, cluster_id: str, seq: int | None, at: datetime | None) -> dict[str, Any] | None:
    """`replay_cluster` before snapshots (services/tracker/story.py at 2af296e)."""
    own = prefix(await store.read(subjects.cluster_events(tenant, cluster_id), up_to_seq=seq), seq, at)
    if not own:
        return None
    included = own[-1].seq
    jobs = []
    for job in job_ids(own):
        history = prefix(await store.read_many(subjects.job_history_filters(tenant, job), up_to_seq=seq), seq, at)
        status = status_from_log(history)
        if status is not None:
            included = max(included, history[-1].seq)
            jobs.append({"id": job, "operation": status["operation"], "state": status["state"], "error": status["error"],
                         "counts": status["counts"], "tasks_total": status["tasks_total"]})
    view = cluster_view(own)
    assert view is not None
    return {"as_of": {"seq": seq if seq is not None else included, "at": at.isoformat() if at else None,
                      "cluster_event_seq": own[-1].seq, "cluster_event_time": own[-1].time.isoformat()},
            "cluster": view, "jobs": jobs}


# -- random stories ------------------------------------------------------------------------------


def job_story(rnd: random.Random, n: int) -> tuple[str, list[tuple[str, Any]]]:
    """A job's events and its provisioners' claims and outcomes (some after the job ended)."""
    job = new_job(n, rnd.choice(["eager", "staged"]), rnd.randint(1, 3))
    for _ in range(rnd.randint(0, 40)):
        job_step(job, rnd.choice(JOB_STEPS), rnd.choice)
    job_id = str(job.id)
    out: list[tuple[str, Any]] = [(subjects.job_events(T, job_id), a.event) for a in pending_appends(job)]
    for i, (_, e) in enumerate(list(out)):
        if e.type in ("TaskQueued", "CleanupQueued") and rnd.random() < 0.7:
            subject = subjects.task_events(T, job_id, e.task_id, rnd.choice(["p1", "p2"]))
            claim = TaskClaimed(job_id=job_id, task_id=e.task_id, attempt=e.attempt, provisioner="p1", worker="w")
            end = rnd.choice([TaskSucceeded(job_id=job_id, task_id=e.task_id, attempt=e.attempt, provisioner="p1", worker="w"),
                              TaskFailed(job_id=job_id, task_id=e.task_id, attempt=e.attempt, provisioner="p1", worker="w",
                                         error="x"), None])
            at = rnd.randint(i + 1, len(out))
            out.insert(at, (subject, claim))
            if end is not None:
                out.insert(rnd.randint(at + 1, len(out)), (subject, end))
    return job_id, out


def cluster_story(rnd: random.Random, cluster_id: str, jobs: list[str]) -> list[tuple[str, Any]]:
    cluster = Cluster(ClusterRequested(tenant=T, cluster_id=cluster_id, name="web", template="t", provider="sim",
                                       config={"a": 1}, job_id=jobs[0]))
    for _ in range(rnd.randint(0, 25)):
        job, node = rnd.choice(jobs), rnd.choice(["n1", "n2", "n3"])
        move = rnd.randrange(6)
        if move == 0:
            cluster.change_layout(job, [NodeSpec(id=i, hardwaretype="h", imagetype="i", services=["a"])
                                        for i in rnd.choice([["n1"], ["n1", "n2"], ["n2", "n3"]])])
        elif move == 1:
            cluster.change_config(job, {"k": rnd.randint(1, 3)})
        elif move == 2:
            cluster.record_results(node, f"{node}.install.a", {}, rnd.choice([{}, {"access": "10.0.0.1"}]), rnd.choice(["", "h1"]))
        elif move == 3:
            cluster.observe(job, f"{node}.status.a", node, "a", rnd.choice(["running", "stopped"]))
        elif move == 4:
            cluster.desire(job, rnd.choice([set(), {(n, "a") for n in cluster.nodes}, {(node, "a")}]))
        else:
            cluster.set_status(rnd.choice(["active", "failed", "deleted"]), job, rnd.choice(["", "why"]))
    return [(subjects.cluster_events(T, cluster_id), a.event) for a in pending_appends(cluster)]


def interleave(rnd: random.Random, streams: list[list[tuple[str, Any]]]) -> list[Recorded]:
    """The streams merged in a random order (each keeps its own), with times that mostly
    follow the log but not always (writers' clocks differ)."""
    left = [list(s) for s in streams if s]
    out: list[Recorded] = []
    while left:
        stream = rnd.choice(left)
        subject, event = stream.pop(0)
        seq = len(out) + 1
        out.append(Recorded(seq, subject, START + timedelta(seconds=seq + rnd.choice([0, 0, 0, -2, 3])), event))
        left = [s for s in left if s]
    return out


def story_log(rnd: random.Random) -> tuple[MemoryEventLog, str]:
    n = rnd.randint(10**5, 10**6)
    made = [job_story(rnd, n + i) for i in range(rnd.randint(1, 4))]
    jobs = [job_id for job_id, _ in made]
    cluster_id, other = (f"22222222-2222-4222-8222-{rnd.randint(0, 10**11):012d}" for _ in range(2))
    streams = [cluster_story(rnd, cluster_id, jobs + ["j-unknown"]), cluster_story(rnd, other, jobs[:1])]
    log = MemoryEventLog()
    log.records = interleave(rnd, streams + [events for _, events in made])
    return log, cluster_id


# -- the property --------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rnd=st.randoms(use_true_random=False), history=st.integers(1, 8), by_time=st.booleans())
async def test_replay_from_the_nearest_snapshot_is_the_full_fold_byte_for_byte(
    rnd: random.Random, history: int, by_time: bool
) -> None:
    log, cluster_id = story_log(rnd)
    last = len(log.records)
    stories = MemorySnapshots(history=history)
    writer = StoryWriter(log, stories)
    for point in sorted(rnd.sample(range(1, last + 1), min(last, rnd.randint(0, 6)))):
        await writer.write(T, cluster_id, point)
    for _ in range(4):
        seq: int | None = rnd.randint(0, last + 2)
        at = None
        if by_time:
            seq, at = None, START + timedelta(seconds=rnd.randint(-1, last + 4), milliseconds=rnd.choice([0, 500]))
        expected = await reference(log, T, cluster_id, seq, at)
        assert json.dumps(await replay_cluster(log, T, cluster_id, seq, at, stories)) == json.dumps(expected)
        assert json.dumps(await replay_cluster(log, T, cluster_id, seq, at)) == json.dumps(expected)


class Counting(MemoryEventLog):
    def __init__(self) -> None:
        super().__init__()
        self.events = 0

    async def read(self, subject_filter: str, start_seq: int = 1, up_to_seq: int | None = None) -> list[Recorded]:
        found = await super().read(subject_filter, start_seq, up_to_seq)
        self.events += len(found)
        return found

    async def read_many(self, subject_filters: Any, up_to_seq: int | None = None) -> list[Recorded]:
        found = await super().read_many(subject_filters, up_to_seq)
        self.events += len(found)
        return found

    async def replay(self, subject_filter: Any, on_event: Any, timeout: float = 600.0, *, start_seq: int = 1, bodies: bool = True) -> int:
        count = await super().replay(subject_filter, on_event, timeout, start_seq=start_seq, bodies=bodies)
        self.events += count
        return count


async def test_a_replay_after_a_snapshot_reads_only_what_follows_it_and_the_jobs_that_changed() -> None:
    rnd = random.Random(7)
    source, cluster_id = story_log(rnd)
    log = Counting()
    log.records = source.records
    stories = MemorySnapshots()
    last = len(log.records)
    await StoryWriter(log, stories).write(T, cluster_id, last)
    log.events = 0
    got = await replay_cluster(log, T, cluster_id, last, None, stories)
    assert log.events == 0  # nothing follows the snapshot: no event read at all
    assert got == await reference(log, T, cluster_id, last, None)
    log.events = 0
    await replay_cluster(log, T, cluster_id, last, None)
    assert log.events > 0


async def test_a_snapshot_of_other_code_or_none_at_all_means_the_full_fold() -> None:
    log, cluster_id = story_log(random.Random(3))
    stories = MemorySnapshots()
    writer = StoryWriter(log, stories)
    await writer.write(T, cluster_id, len(log.records))
    key = ("story", T, cluster_id)
    stories.data[key] = [stories.data[key][0].replace(b'"fingerprint":"', b'"fingerprint":"x')]
    assert await stories.nearest("story", T, cluster_id, None) is None
    story = await story_at(log, T, cluster_id, None, None, stories)
    assert story is not None and story.seq == 0  # folded from the first event


class Fresh(MemoryEventLog):
    """Replays a new copy of each event (as a read from the wire decodes new objects) and
    counts how many of its copies are alive at most at once. Plans and layouts are stored
    apart as big ones are on the bus: `bodies=False` hands over their stubs."""

    def __init__(self) -> None:
        super().__init__()
        self.alive = self.most = 0

    def _gone(self) -> None:
        self.alive -= 1

    def _copy(self, r: Recorded, bodies: bool) -> Recorded:
        big = r.type in ("JobPlanned", "ClusterLayoutChanged")
        copy = replace(r, event=Offloaded(r.type, "sha256:x", 1) if big and not bodies else r.event)
        self.alive += 1
        self.most = max(self.most, self.alive)
        weakref.finalize(copy, self._gone)
        return copy

    async def replay(self, subject_filter: Any, on_event: Any, timeout: float = 600.0, *, start_seq: int = 1, bodies: bool = True) -> int:
        return await super().replay(subject_filter, lambda r: on_event(self._copy(r, bodies)), timeout, start_seq=start_seq)


def big_create(nodes: int) -> tuple[Fresh, str]:
    """A cluster and its create of `nodes` nodes (a create and an install each), every task
    claimed and done: four events a task, as in the log of a real create."""
    log = Fresh()
    cluster_id, job_id = "33333333-3333-4333-8333-000000000001", "44444444-4444-4444-8444-000000000001"
    job_subject = subjects.job_events(T, job_id)
    tasks = [ev.PlannedTaskRecord(id=f"n{i}.{a}", node=f"n{i}", action=Action(a), service="a" if a == "install" else None)
             for i in range(nodes) for a in ("create", "install")]
    events: list[tuple[str, Any]] = [
        (subjects.cluster_events(T, cluster_id), ClusterRequested(tenant=T, cluster_id=cluster_id, name="big", template="t",
                                                                  provider="sim", job_id=job_id)),
        (job_subject, ev.JobRequested(tenant=T, job_id=job_id, cluster_id=cluster_id, operation="create", request={})),
        (job_subject, ev.JobPlanned(job_id=job_id, tasks=tasks, links=[], stages=[[t.id for t in tasks]]))]
    for t in tasks:
        runs = subjects.task_events(T, job_id, t.id, "p1")
        events += [(job_subject, ev.TaskQueued(job_id=job_id, task_id=t.id, attempt=1, node=t.node, action=t.action, service=t.service)),
                   (runs, TaskClaimed(job_id=job_id, task_id=t.id, attempt=1, provisioner="p1", worker="w")),
                   (runs, TaskSucceeded(job_id=job_id, task_id=t.id, attempt=1, provisioner="p1", worker="w")),
                   (job_subject, ev.TaskCompleted(job_id=job_id, task_id=t.id, attempt=1))]
    layout = [NodeSpec(id=f"n{i}", hardwaretype="h", imagetype="i", services=["a"]) for i in range(nodes)]
    events += [(subjects.cluster_events(T, cluster_id), ev.ClusterLayoutChanged(cluster_id=cluster_id, job_id=job_id, nodes=layout)),
               (job_subject, ev.JobSucceeded(job_id=job_id)),
               (subjects.cluster_events(T, cluster_id), ev.ClusterStatusChanged(cluster_id=cluster_id, status="active", job_id=job_id))]
    log.records = [Recorded(seq, subject, START + timedelta(seconds=seq), e) for seq, (subject, e) in enumerate(events, 1)]
    return log, cluster_id


async def test_a_story_written_after_a_big_create_holds_a_few_of_its_events_at_once_not_all() -> None:
    log, cluster_id = big_create(300)
    last = len(log.records)
    stories = MemorySnapshots()
    writer = StoryWriter(log, stories)
    await writer.write(T, cluster_id, 1)  # the cluster made, its job not started: the whole job follows the snapshot
    for base in (stories, None):  # from that snapshot (the tail read, then the job folded again), and from the first event
        log.most = 0
        story = await story_at(log, T, cluster_id, last, None, base)
        assert story is not None and story.jobs
        assert [m["line"]["counts"] for m in story.jobs.values()] == [{"succeeded": 600}] and len(story.nodes) == 300
        assert 0 < log.most <= 3, f"{log.most} of the job's {last} events were held at once"
    assert log.alive == 0  # and none is kept in the story


async def test_a_cluster_whose_job_is_too_big_for_a_story_snapshot_is_not_read_to_find_out() -> None:
    log, cluster_id = story_log(random.Random(5))
    stories = MemorySnapshots()
    writer = StoryWriter(log, stories)
    writer.due(T, cluster_id, len(log.records), tasks=MOST_TASKS + 1)
    assert writer._writing is None and (T, cluster_id) in writer._skip
    writer.due(T, cluster_id, len(log.records))  # it only grows: skipped from then on
    assert writer._writing is None and not stories.data
    writer.due(T, "another", len(log.records), tasks=MOST_TASKS)
    assert writer._writing is not None
    await writer._writing


async def test_a_story_snapshot_waits_for_enough_tasks_since_the_last_one_not_each_job() -> None:
    """Decision 0043: a snapshot reads again every event of the jobs since the last one (four a
    task), so it is written once those jobs ran `EVERY_TASKS` tasks, not after each of them."""
    log, cluster_id = story_log(random.Random(5))
    last = len(log.records)
    stories = MemorySnapshots()
    writer = StoryWriter(log, stories)
    writer.made(T, cluster_id)
    small = -(-EVERY_TASKS // 3)  # three of them reach it
    writer.due(T, cluster_id, last - 2, tasks=small)
    writer.due(T, cluster_id, last - 1, tasks=small)
    assert writer._writing is None and not stories.data  # two jobs' tasks: not yet worth a read of their events
    writer.due(T, cluster_id, last, tasks=small)
    assert writer._writing is not None
    await writer.idle()
    snap = await stories.nearest("story", T, cluster_id, None)
    assert snap is not None and snap.seq == last and writer.written == 1
    writer.due(T, cluster_id, last, tasks=small)  # counted again from the snapshot
    assert not writer._writing or writer._writing.done()
    assert writer.written == 1


async def test_a_cluster_not_seen_made_gets_a_story_snapshot_at_its_first_change() -> None:
    """A tracker started after the cluster was made does not know what its story holds past
    its last snapshot: that first change writes one, whatever the job's size."""
    log, cluster_id = story_log(random.Random(6))
    stories = MemorySnapshots()
    writer = StoryWriter(log, stories)
    writer.due(T, cluster_id, len(log.records), tasks=1)
    await writer.idle()
    assert writer.written == 1
