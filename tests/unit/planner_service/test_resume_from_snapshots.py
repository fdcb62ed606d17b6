"""A planner resumed from snapshots (`muster.snapshots`) has exactly the state of one that folded
the whole log, reads only what follows the snapshots, and still finishes an open job."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from planner_harness import Harness, Solver

from contracts.commands import Accepted, ConfigureCluster
from contracts.events import JobSucceeded
from muster.ports.eventlog import Recorded
from muster.ports.memory import MemoryEventLog
from muster.routing import router
from muster.snapshots import MemorySnapshots, SnapshotTooLarge
from services.planner.app import Planner, PlannerConfig
from services.planner.bootstrap import bootstrap
from services.planner.routing import ROUTES


class CountingLog(MemoryEventLog):
    """The in-memory log, counting the events every read and replay hands out (and, of
    those, the cluster events)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.handed = 0
        self.cluster_events = 0

    def _count(self, found: list[Recorded]) -> list[Recorded]:
        self.handed += len(found)
        self.cluster_events += sum(1 for r in found if r.subject.split(".")[3] == "cluster")
        return found

    async def read(self, subject_filter: str, start_seq: int = 1, up_to_seq: int | None = None) -> list[Recorded]:
        return self._count(await super().read(subject_filter, start_seq, up_to_seq))

    async def read_many(self, subject_filters: Sequence[str], up_to_seq: int | None = None) -> list[Recorded]:
        return self._count(await super().read_many(subject_filters, up_to_seq))

    async def replay(self, subject_filter: str | Sequence[str], on_event: Callable[[Recorded], None], timeout: float = 600.0,
                     *, start_seq: int = 1, bodies: bool = True) -> int:
        found: list[Recorded] = []
        count = await super().replay(subject_filter, found.append, timeout, start_seq=start_seq, bodies=bodies)
        for r in self._count(found):
            on_event(r)
        return count


class SnapHarness(Harness):
    def __init__(self, every: int = 100) -> None:
        self.snapshots: MemorySnapshots | None = MemorySnapshots()
        super().__init__(config=PlannerConfig(instance="planner-test", snapshot_every=every), log=CountingLog())

    def _planner(self) -> Planner:
        planner = bootstrap(self.log, self.queue, self.config, catalogs=self.catalogs, solver=Solver(), clock=self.clock,
                            snapshots=self.snapshots, **self.ports)
        self.routes = [(r.filter, router(planner, r)) for r in ROUTES]
        return planner


def _states(planner: Planner) -> dict[str, Any]:
    """Every aggregate's attributes, but the caches derived from them."""
    return {k: {a: v for a, v in vars(agg).items() if a not in ("_plans", "_dispatch", "_pending_events")}
            for k, agg in {**planner.clusters, **planner.jobs}.items()}


async def _two_clusters(h: SnapHarness) -> list[str]:
    first = await h.cluster_of(nodes=3, name="a")
    second = await h.cluster_of(nodes=2, name="b")
    await h.ok(ConfigureCluster(cluster_id=first, config={"x": 1}))
    assert h.planner.state.snapshotter is not None
    await h.planner.state.snapshotter.idle()
    return [first, second]


async def test_a_planner_resumed_from_snapshots_is_the_planner_resumed_from_every_event() -> None:
    for every in (100, 3):  # whole jobs only; and snapshots in the middle of histories, with tails
        h = SnapHarness(every=every)
        await _two_clusters(h)
        assert h.snapshots is not None and h.snapshots.data  # written off the request path
        log = h.log
        assert isinstance(log, CountingLog)
        log.handed = 0
        from_snapshots = await h.restart()
        read_with = log.handed
        h.snapshots, log.handed = None, 0
        from_log = await h.restart()
        assert _states(from_snapshots) == _states(from_log)
        assert read_with < log.handed  # what the snapshots cover is not read again
        assert set(from_snapshots.jobs) == set(from_log.jobs)


async def test_a_quiet_cluster_is_not_read_again_once_a_resume_has_snapshotted_it() -> None:
    """Clusters with fewer events than `every` have no snapshot until a resume folds them and
    writes one; the resume after that reads none of their events (the subject holds as many
    events as the snapshot's version), so its cost does not grow with the log meanwhile."""
    h = SnapHarness(every=100)
    await _two_clusters(h)
    assert h.snapshots is not None and not any(kind == "cluster" for kind, _, _ in h.snapshots.data)
    log = h.log
    assert isinstance(log, CountingLog)
    first = await h.restart()
    assert first.state.snapshotter is not None
    await first.state.snapshotter.idle()
    assert sum(1 for kind, _, _ in h.snapshots.data if kind == "cluster") == 2
    log.cluster_events = 0
    second = await h.restart()
    assert log.cluster_events == 0
    await h.ok(ConfigureCluster(cluster_id=next(iter(second.clusters)), config={"z": 3}))  # one cluster moves on
    log.cluster_events = 0
    third = await h.restart()
    assert 0 < log.cluster_events
    h.snapshots = None
    assert _states(third) == _states(await h.restart())


async def test_an_open_job_resumed_with_snapshots_finishes_without_dispatching_twice() -> None:
    h = SnapHarness(every=3)
    cluster = await h.cluster_of(nodes=2, name="a")
    h.behaviour = lambda m: "hold"
    reply = await h.send(ConfigureCluster(cluster_id=cluster, config={"y": 2}))
    assert isinstance(reply, Accepted)
    await h.settle()
    assert h.planner.state.snapshotter is not None
    await h.planner.state.snapshotter.idle()
    # A running job resumes from its whole history, so no snapshot of it is written, however
    # many events it has (each would have encoded the whole job).
    assert h.snapshots is not None and not any(key[2] == reply.job_id for key in h.snapshots.data)
    second = await h.restart()
    assert not second.jobs[reply.job_id].is_final
    h.behaviour = lambda m: "succeed"
    await h.release()
    assert isinstance(h.final(reply.job_id), JobSucceeded)
    assert second.state.snapshotter is not None
    await second.state.snapshotter.idle()
    assert any(key[2] == reply.job_id for key in h.snapshots.data)  # once it ended
    queued = [(r.event.task_id, r.event.attempt) for r in h.log.records if r.type == "TaskQueued" and r.event.job_id == reply.job_id]
    assert len(queued) == len(set(queued))


async def test_a_snapshot_of_other_code_is_ignored_and_the_log_gives_the_same_planner() -> None:
    h = SnapHarness(every=3)
    await h.cluster_of(nodes=2, name="a")
    assert h.planner.state.snapshotter is not None and h.snapshots is not None
    await h.planner.state.snapshotter.idle()
    for revisions in h.snapshots.data.values():
        revisions[-1] = revisions[-1].replace(b'"fingerprint":"', b'"fingerprint":"x')
    await h.restart()
    h.snapshots = None
    assert _states(h.planner) == _states(await h.restart())


class SmallStore(MemorySnapshots):
    """A store that takes snapshots of clusters only: a job's is always too large for it."""

    def __init__(self) -> None:
        super().__init__()
        self.refused: list[str] = []

    async def put(self, kind: str, tenant: str, aggregate_id: str, data: bytes) -> None:
        if kind == "job":
            self.refused.append(aggregate_id)
            raise SnapshotTooLarge(f"job {aggregate_id}: {len(data):,} bytes")
        await super().put(kind, tenant, aggregate_id, data)


async def test_a_job_too_large_to_snapshot_is_not_tried_again_and_resumes_from_its_events() -> None:
    h = SnapHarness(every=2)
    h.snapshots = store = SmallStore()
    h.planner = h._planner()
    cluster = await h.cluster_of(nodes=2, name="a")
    await h.ok(ConfigureCluster(cluster_id=cluster, config={"x": 1}))
    assert h.planner.state.snapshotter is not None
    await h.planner.state.snapshotter.idle()
    jobs = set(h.planner.jobs)
    assert set(store.refused) == jobs and len(store.refused) == len(jobs)  # each tried once, though due again and again
    assert any(kind == "cluster" for kind, _, _ in store.data) and not any(kind == "job" for kind, _, _ in store.data)
    from_snapshots = await h.restart()
    h.snapshots = None
    assert _states(from_snapshots) == _states(await h.restart())


class UnreadableSnapshots(MemorySnapshots):
    """A snapshots bucket that cannot be read just now (its stream electing a leader)."""

    async def latest(self, kind: str) -> dict[str, Any]:
        raise TimeoutError("the snapshots bucket did not answer")

    async def get(self, kind: str, tenant: str, aggregate_id: str) -> Any:
        raise TimeoutError("the snapshots bucket did not answer")


async def test_a_resume_whose_snapshots_cannot_be_read_folds_the_log_instead() -> None:
    """Snapshots are a shortcut: unreadable (a 503 right after a partition healed), the rebuild
    goes on from the log and gives the same planner, where it used to fail (and a planner
    gaining shards then handed them back, over and over, while the bucket was away)."""
    h = SnapHarness(every=3)
    await _two_clusters(h)
    assert h.snapshots is not None
    h.snapshots = UnreadableSnapshots()
    from_the_log_alone = await h.restart()
    h.snapshots = None
    assert _states(from_the_log_alone) == _states(await h.restart())


async def test_a_job_with_more_tasks_than_a_snapshot_holds_is_not_encoded_to_find_out(monkeypatch: Any) -> None:
    from services.planner import snapshots as writer

    monkeypatch.setattr(writer, "MOST_TASKS", 5)
    taken: list[str] = []
    from muster import snapshots

    real_take = snapshots.take

    def take(kind: Any, *rest: Any) -> bytes:
        taken.append(kind.name)
        return real_take(kind, *rest)

    monkeypatch.setattr(snapshots, "take", take)
    h = SnapHarness(every=2)
    await h.cluster_of(nodes=2, name="a")
    assert h.planner.state.snapshotter is not None
    await h.planner.state.snapshotter.idle()
    assert "job" not in taken and "cluster" in taken
    assert h.snapshots is not None and not any(kind == "job" for kind, _, _ in h.snapshots.data)
