"""The fold's fast path (the `@event` method called with the decoded contract event) leaves an
aggregate exactly as eventsourcing's own `mutate` of a domain event does, and refuses the same
histories."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from eventsourcing.domain import OriginatorIDError, OriginatorVersionError
from histories import cluster_histories, job_histories, new_job, record, state
from hypothesis import given, settings

from contracts.events import EVENT_TYPES
from muster.bus.eventstore import Recorded
from muster.bus.repository import SEQ_ATTR, STORED_ATTR, _applier, mark_stored, rebuild, to_domain_event
from services.planner.domain.cluster import Cluster
from services.planner.domain.job import Job


def library_rebuild(cls: Any, history: list[Recorded]) -> Any:
    """The reference: every event through eventsourcing's domain event and `mutate`."""
    aggregate = None
    for r in history:
        aggregate = to_domain_event(cls, r).mutate(aggregate)
        mark_stored(aggregate, r.seq)
    return aggregate


@settings(max_examples=150, deadline=None)
@given(job_histories())
def test_a_job_folds_to_the_same_state_as_eventsourcings_mutate(case: tuple[Job, list[Recorded]]) -> None:
    live, history = case
    fast, reference = rebuild(Job, history), library_rebuild(Job, history)
    assert fast is not None and reference is not None
    assert state(fast) == state(reference)
    assert (fast.version, fast.modified_on, fast.id) == (reference.version, reference.modified_on, reference.id)
    assert state(fast) | {SEQ_ATTR: 0, STORED_ATTR: 0} == state(live) | {SEQ_ATTR: 0, STORED_ATTR: 0}  # and as the commands left it
    assert fast.ready() == live.ready() and fast.view() == live.view()


@settings(max_examples=100, deadline=None)
@given(cluster_histories())
def test_a_cluster_folds_to_the_same_state_as_eventsourcings_mutate(case: tuple[Cluster, list[Recorded]]) -> None:
    live, history = case
    fast, reference = rebuild(Cluster, history), library_rebuild(Cluster, history)
    assert fast is not None
    assert state(fast) == state(reference) and fast.version == reference.version == live.version
    assert fast.summary() == live.summary()


def test_every_change_event_of_the_aggregates_takes_the_fast_path() -> None:
    for cls in (Job, Cluster):
        created = {"Job": "JobRequested", "Cluster": "ClusterRequested"}[cls.__name__]
        events = [name for name in EVENT_TYPES if hasattr(cls, name) and name != created]
        assert events and all(_applier(cls, name) is not None for name in events), cls
        assert _applier(cls, created) is None  # creation: the library's path


def _history() -> list[Recorded]:
    job = new_job(1)
    job.pause("x")
    job.resume("x")
    return record(job, 1, "s")


def test_an_event_out_of_sequence_is_refused_like_the_library_does() -> None:
    history = _history()
    skipped = history[:2] + history[3:]
    with pytest.raises(OriginatorVersionError):
        rebuild(Job, skipped)
    with pytest.raises(OriginatorVersionError):
        library_rebuild(Job, skipped)


def test_an_event_of_another_aggregate_is_refused_like_the_library_does() -> None:
    history = _history()
    other = _history()  # same request id: same job id; make it another one
    stray = replace(other[2], aggregate_id="00000000-0000-0000-0000-000000000001")
    for rebuilder in (rebuild, library_rebuild):
        with pytest.raises(OriginatorIDError):
            rebuilder(Job, history[:2] + [stray])
    missing = replace(history[2], aggregate_id=None)  # the library says TypeError (no UUID), the fast path says whose
    for rebuilder in (rebuild, library_rebuild):
        with pytest.raises((OriginatorIDError, TypeError)):
            rebuilder(Job, history[:2] + [missing])
