"""A planner resumed from snapshots (`muster.snapshots`) has exactly the state of one that folded
the whole log, reads only what follows the snapshots, and still finishes an open job."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from planner_harness import Harness, Solver

from contracts.commands import Accepted, ConfigureCluster
from contracts.events import JobSucceeded
from muster.ports.eventlog import Recorded
from muster.ports.memory import MemoryEventLog
from muster.routing import router
from muster.snapshots import MemorySnapshots
from services.planner.app import Planner, PlannerConfig
from services.planner.routing import ROUTES


class CountingLog(MemoryEventLog):
    """The in-memory log, counting the events every read hands out (a replay reads too)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.handed = 0

    async def read(self, subject_filter: str, start_seq: int = 1, up_to_seq: int | None = None) -> list[Recorded]:
        found = await super().read(subject_filter, start_seq, up_to_seq)
        self.handed += len(found)
        return found

    async def read_many(self, subject_filters: Sequence[str], up_to_seq: int | None = None) -> list[Recorded]:
        found = await super().read_many(subject_filters, up_to_seq)
        self.handed += len(found)
        return found


class SnapHarness(Harness):
    def __init__(self, every: int = 100) -> None:
        self.snapshots: MemorySnapshots | None = MemorySnapshots()
        super().__init__(config=PlannerConfig(instance="planner-test", snapshot_every=every), log=CountingLog())

    def _planner(self) -> Planner:
        planner = Planner(self.log, self.queue, config=self.config, catalogs=self.catalogs, solver=Solver(),
                          clock=self.clock, hooks=self.hooks, snapshots=self.snapshots)
        self.routes = [(r.filter, router(planner, r)) for r in ROUTES]
        return planner


def _states(planner: Planner) -> dict[str, Any]:
    """Every aggregate's attributes, but the caches derived from them."""
    return {k: {a: v for a, v in vars(agg).items() if a not in ("_plans", "_pending_events")}
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


async def test_an_open_job_resumed_with_snapshots_finishes_without_dispatching_twice() -> None:
    h = SnapHarness(every=3)
    cluster = await h.cluster_of(nodes=2, name="a")
    h.behaviour = lambda m: "hold"
    reply = await h.send(ConfigureCluster(cluster_id=cluster, config={"y": 2}))
    assert isinstance(reply, Accepted)
    await h.settle()
    assert h.planner.state.snapshotter is not None
    await h.planner.state.snapshotter.idle()
    second = await h.restart()
    assert not second.jobs[reply.job_id].is_final
    h.behaviour = lambda m: "succeed"
    await h.release()
    assert isinstance(h.final(reply.job_id), JobSucceeded)
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
