"""Snapshots (`muster.snapshots`): a snapshot and the events after it give exactly the state a
fold of every event gives, for random histories cut anywhere; a snapshot of other code or
format is ignored, never misread."""

from __future__ import annotations

import json
from typing import Any

import pytest
from histories import cluster_histories, job_histories, new_job, state
from hypothesis import given, settings
from hypothesis import strategies as st

from muster import snapshots
from muster.bus.repository import SEQ_ATTR, fold, rebuild
from services.planner.domain.cluster import Cluster
from services.planner.domain.job import Job
from services.planner.domain.model import PlannedTask
from services.planner.snapshots import CLUSTER, JOB


def _through_snapshot(kind: snapshots.Kind, cls: Any, history: list[Any], cut: int) -> Any:
    head, tail = history[:cut], history[cut:]
    at = rebuild(cls, head)
    data = snapshots.take(kind, at, "acme", head[-1].seq) if at is not None else None
    snap = snapshots.read(data) if data is not None else None
    assert (snap is None) == (at is None)
    return snapshots.resume(snap, history, lambda a, r: fold(cls, a, r)) if snap else rebuild(cls, tail)


@settings(max_examples=150, deadline=None)
@given(job_histories(), st.data())
def test_a_job_from_a_snapshot_and_its_tail_is_the_job_from_every_event(case: Any, data: st.DataObject) -> None:
    _, history = case
    cut = data.draw(st.integers(1, len(history)))
    resumed, full = _through_snapshot(JOB, Job, history, cut), rebuild(Job, history)
    assert full is not None
    assert state(resumed) == state(full)
    assert (resumed.version, resumed.modified_on, getattr(resumed, SEQ_ATTR)) == (full.version, full.modified_on, getattr(full, SEQ_ATTR))
    assert resumed.ready() == full.ready() and resumed.view() == full.view()  # derived plans rebuilt on use


@settings(max_examples=100, deadline=None)
@given(cluster_histories(), st.data())
def test_a_cluster_from_a_snapshot_and_its_tail_is_the_cluster_from_every_event(case: Any, data: st.DataObject) -> None:
    _, history = case
    cut = data.draw(st.integers(1, len(history)))
    resumed, full = _through_snapshot(CLUSTER, Cluster, history, cut), rebuild(Cluster, history)
    assert full is not None
    assert state(resumed) == state(full) and resumed.summary() == full.summary()


def _snapshot_json() -> dict[str, Any]:
    job = new_job(7)
    return dict(json.loads(snapshots.take(JOB, job, "acme", 2)))


def test_a_snapshot_of_other_code_or_another_format_is_ignored() -> None:
    record = _snapshot_json()
    assert snapshots.read(json.dumps(record).encode()) is not None
    for change in ({"fingerprint": "0" * 24}, {"format": snapshots.FORMAT + 1}, {"kind": "nothing"}):
        assert snapshots.read(json.dumps(record | change).encode()) is None


def test_a_snapshot_that_does_not_decode_is_ignored() -> None:
    record = _snapshot_json()
    assert snapshots.read(b"not json") is None
    broken = dict(record, state=dict(record["state"], nodes=[{"~": "model", "t": "contracts.layout:NodeSpec", "v": {"id": "bad id!"}}]))
    assert snapshots.read(json.dumps(broken).encode()) is None  # the contract refuses it
    foreign = dict(record, state=dict(record["state"], x={"~": "model", "t": "os:PathLike", "v": {}}))
    assert snapshots.read(json.dumps(foreign).encode()) is None  # only muster's own classes
    not_data = dict(record, state=dict(record["state"], x={"~": "data", "t": "contracts.layout:NodeSpec", "v": []}))
    assert snapshots.read(json.dumps(not_data).encode()) is None  # a "data" tag names a dataclass


def test_a_jobs_typed_tasks_come_back_typed() -> None:
    job = new_job(7)
    assert job.tasks  # planned
    snap = snapshots.read(snapshots.take(JOB, job, "acme", 3))
    assert snap is not None and snap.aggregate.tasks == job.tasks
    assert all(isinstance(t, PlannedTask) for t in snap.aggregate.tasks.values())


def test_an_attribute_that_is_not_state_cannot_be_snapshotted() -> None:
    job = new_job(8)
    job.helper = object()  # what a new cache would look like, unregistered
    with pytest.raises(snapshots.SnapshotError, match="helper"):
        snapshots.take(JOB, job, "acme", 2)
