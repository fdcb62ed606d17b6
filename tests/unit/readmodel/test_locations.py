"""The location index's supersede rule: an older update never overwrites a newer one, in
whatever order updates arrive, however often."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.approvals import JobApprovalRequested, JobApproved
from contracts.catalog import Action
from contracts.events import (
    ClusterLayoutChanged,
    ClusterRequested,
    ClusterStatusChanged,
    JobAdopted,
    JobFailed,
    JobPlanned,
    JobRequested,
    JobSucceeded,
    PlannedTaskRecord,
    TaskClaimed,
    TaskFailed,
    TaskQueued,
    TaskSucceeded,
)
from contracts.layout import NodeSpec
from muster.readmodel.locations import (
    SIZED,
    Record,
    Update,
    cluster_key,
    job_key,
    merge,
    merge_all,
    sized,
    task_key,
    task_location,
    updates_from,
)

T, J, C = "acme", "11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222"
TASK = "n1000.install.hdfs-namenode"
TIME = "2026-01-01T00:00:00+00:00"


def _task_subject(task: str = TASK) -> str:
    return f"muster.evt.{T}.task.{J}.{task.replace('.', '~')}"


def _job_subject() -> str:
    return f"muster.evt.{T}.job.{J}"


def queued(seq: int, attempt: int = 1) -> list[Update]:
    e = TaskQueued(job_id=J, task_id=TASK, attempt=attempt, node="n1000", action=Action.INSTALL, service="hdfs-namenode")
    return updates_from(seq, _job_subject(), TIME, e)


def claimed(seq: int, attempt: int = 1, worker: str = "w1") -> list[Update]:
    e = TaskClaimed(job_id=J, task_id=TASK, attempt=attempt, provisioner="prov-a", worker=worker)
    return updates_from(seq, _task_subject(), TIME, e)


def succeeded(seq: int, attempt: int = 1, worker: str = "w1") -> list[Update]:
    e = TaskSucceeded(job_id=J, task_id=TASK, attempt=attempt, provisioner="prov-a", worker=worker)
    return updates_from(seq, _task_subject(), TIME, e)


def failed(seq: int, attempt: int = 1, worker: str = "w1") -> list[Update]:
    e = TaskFailed(job_id=J, task_id=TASK, attempt=attempt, provisioner="prov-a", worker=worker, error="boom")
    return updates_from(seq, _task_subject(), TIME, e)


def fold(updates: list[Update]) -> Record | None:
    return merge_all(None, updates)


def test_a_newer_update_overwrites_an_older_one() -> None:
    record = fold(queued(10) + claimed(12))
    assert record is not None
    assert record.get("state") == "claimed" and record.get("worker") == "w1" and record.get("node") == "n1000"
    assert record.seq == 12


def test_an_older_update_never_overwrites_a_newer_one() -> None:
    newer = fold(claimed(12))
    assert merge(newer, queued(10)[0]) is not None  # it brings the node, which the record lacks...
    after = merge_all(newer, queued(10))
    assert after is not None
    assert after.get("state") == "claimed" and after.get("provisioner") == "prov-a"  # ...but not its older state
    assert after.get("node") == "n1000"


def test_a_repeated_update_changes_nothing() -> None:
    record = fold(queued(10) + claimed(12))
    assert merge(record, claimed(12)[0]) is None
    assert merge(record, queued(10)[0]) is None


def test_out_of_order_arrival_gives_the_same_record_as_log_order() -> None:
    updates = queued(10) + claimed(12) + succeeded(15)
    expected = fold(updates)
    for order in itertools.permutations(updates):
        assert fold(list(order)) == expected
    assert expected is not None and expected.get("state") == "succeeded"


def test_an_attempt_that_is_no_longer_current_changes_nothing_even_when_its_event_is_newer() -> None:
    # attempt 1 failed, attempt 2 was queued; then attempt 1's worker claims again (seq 20)
    record = fold(queued(10) + claimed(11) + failed(12) + queued(13, attempt=2))
    assert record is not None
    late = merge_all(record, claimed(20, attempt=1, worker="w-late"))
    assert late == record
    assert late.get("attempt") == 2 and late.get("state") == "queued" and late.get("worker") is None
    now = merge_all(record, claimed(21, attempt=2, worker="w2"))
    assert now is not None and now.get("worker") == "w2" and now.get("state") == "claimed"


def test_a_retry_moves_the_task_even_if_the_old_attempts_outcome_arrives_last() -> None:
    updates = queued(10) + claimed(11) + failed(12) + queued(13, attempt=2) + claimed(14, attempt=2, worker="w2")
    for order in (updates, list(reversed(updates))):
        r = fold(order)
        assert r is not None and (r.get("attempt"), r.get("state"), r.get("worker")) == (2, "claimed", "w2")


def test_job_records_follow_the_job_to_its_end_in_any_order() -> None:
    requested = JobRequested(tenant=T, job_id=J, cluster_id=C, operation="create", request={}, planner="planner-1")
    ups = updates_from(5, _job_subject(), TIME, requested) + updates_from(50, _job_subject(), TIME, JobSucceeded(job_id=J))
    for order in (ups, list(reversed(ups))):
        records = {u.key: merge_all(None, [x for x in order if x.key == u.key]) for u in order}
        job = records[job_key(T, J)]
        assert job is not None and job.get("state") == "succeeded" and job.get("owner") == "planner-1"
        assert job.get("requested_seq") == 5 and job.get("finished_at") == TIME
        assert records[cluster_key(T, C)] is not None and records[cluster_key(T, C)].get("job_id") == J  # type: ignore[union-attr]


def test_a_cluster_knows_its_current_job() -> None:
    other = "33333333-3333-4333-8333-333333333333"
    subject = f"muster.evt.{T}.cluster.{C}"
    ups = (
        updates_from(1, subject, TIME, ClusterRequested(tenant=T, cluster_id=C, name="c", template="t", provider="p", job_id=J))
        + updates_from(9, subject, TIME, ClusterStatusChanged(cluster_id=C, status="active", job_id=J))
        + updates_from(20, f"muster.evt.{T}.job.{other}", TIME,
                       JobRequested(tenant=T, job_id=other, cluster_id=C, operation="delete", request={}))
    )
    ups = [u for u in ups if u.key == cluster_key(T, C)]
    for order in itertools.permutations(ups):
        r = fold(list(order))
        assert r is not None and r.get("job_id") == other and r.get("status") == "active" and r.get("name") == "c"


def test_a_job_waiting_for_approval_is_listed_so_until_it_is_decided() -> None:
    from services.tracker.app import job_summary

    requested = JobRequested(tenant=T, job_id=J, cluster_id=C, operation="delete", request={})
    wait = JobApprovalRequested(job_id=J, rules=["deletes"], expires_at=datetime(2026, 1, 2, tzinfo=UTC), cluster_version=3, digest="d")
    ups = updates_from(5, _job_subject(), TIME, requested) + updates_from(7, _job_subject(), TIME, wait)
    waiting = merge_all(None, ups[:1] + ups[2:])
    assert waiting is not None and job_summary(waiting)["state"] == "waiting_for_approval"
    approved = merge_all(waiting, updates_from(9, _job_subject(), TIME, JobApproved(job_id=J, by="apo")))
    assert approved is not None and job_summary(approved)["state"] == "running"


def test_events_that_locate_nothing_make_no_updates() -> None:
    assert updates_from(3, _job_subject(), TIME, JobFailed(job_id=J, reason="x"))[0].key == job_key(T, J)
    assert updates_from(3, "not.a.log.subject", TIME, JobSucceeded(job_id=J)) == []


def test_task_keys_are_valid_kv_keys_and_distinct() -> None:
    import re

    keys = {task_key(T, J, t) for t in ("n1.install.a", "n1.install~a", "n1/install/a", "n1=2e", "n1.x y")}
    assert len(keys) == 5
    assert all(re.fullmatch(r"[-/_=.a-zA-Z0-9]+", k) for k in keys)


def test_records_survive_their_json_form() -> None:
    record = fold(queued(10) + claimed(12))
    assert record is not None
    assert Record.from_json(record.to_json()) == record
    loc = task_location(record)
    assert loc == {"task_id": TASK, "node": "n1000", "attempt": 1, "state": "claimed", "provisioner": "prov-a",
                   "worker": "w1", "since": TIME, "seq": 12}


# -- the rule as a property: any order, any repeats, same record --------------------------------

_STEPS = st.lists(
    st.tuples(st.sampled_from(["queued", "claimed", "succeeded", "failed"]), st.integers(1, 3), st.sampled_from(["w1", "w2"])),
    min_size=1, max_size=8,
)


def _updates(steps: list[tuple[str, int, str]]) -> list[Update]:
    makers = {"queued": lambda s, a, w: queued(s, a), "claimed": claimed, "succeeded": succeeded, "failed": failed}
    return [u for seq, (kind, attempt, worker) in enumerate(steps, 1) for u in makers[kind](seq, attempt, worker)]


@settings(max_examples=200, deadline=None)
@given(steps=_STEPS, data=st.data())
def test_merging_is_order_independent_and_idempotent(steps: list[tuple[str, int, str]], data: st.DataObject) -> None:
    updates = _updates(steps)
    shuffled = data.draw(st.permutations(updates))
    repeated = shuffled + data.draw(st.lists(st.sampled_from(updates), max_size=5))
    assert fold(list(shuffled)) == fold(updates) == fold(repeated)


@settings(max_examples=200, deadline=None)
@given(steps=_STEPS)
def test_every_field_holds_the_value_of_its_newest_update(steps: list[tuple[str, int, str]]) -> None:
    updates = _updates(steps)
    record = fold(list(reversed(updates)))
    assert record is not None
    for name, stamp in record.fields.items():
        writers = [u for u in updates if name in u.fields]
        newest = max(writers, key=lambda u: u.version)
        assert (stamp.value, stamp.version) == (newest.fields[name], newest.version)


def test_times_in_updates_are_the_events_times() -> None:
    t = datetime(2026, 5, 1, tzinfo=UTC).isoformat()
    (u,) = updates_from(7, _task_subject(), t, TaskClaimed(job_id=J, task_id=TASK, attempt=1, provisioner="p", worker="w"))
    assert u.fields["since"] == t and u.seq == 7 and u.rank == 1


def test_the_job_owner_follows_an_adoption_but_never_an_older_record() -> None:
    """Issue #18.8: after a planner restart the job's owner is the planner that adopted it."""
    requested = updates_from(1, _job_subject(), TIME, JobRequested(tenant=T, job_id=J, cluster_id=C, operation="create",
                                                                  request={}, planner="planner-a"))
    adopted = updates_from(7, _job_subject(), TIME, JobAdopted(job_id=J, planner="planner-b", previous="planner-a"))
    for order in (requested + adopted, adopted + requested):
        record = merge_all(None, order)
        assert record is not None and record.get("owner") == "planner-b"


def test_a_big_plan_or_layout_read_for_its_sizes_makes_the_same_updates_as_the_whole_event() -> None:
    tasks = [PlannedTaskRecord(id=f"n{i}.{a}", node=f"n{i}", action=Action(a), service="s" if a == "install" else None)
             for i in range(50) for a in ("create", "install")]
    nodes = [NodeSpec(id=f"n{i}", hardwaretype="h", imagetype="i", services=["s"]) for i in range(50)]
    events: list[Any] = [JobPlanned(job_id="j1", tasks=tasks, links=[([t.id], [tasks[-1].id]) for t in tasks[:-1]],
                         stages=[[t.id] for t in tasks], nodes=nodes, previous_config={"deep": {"x": [1, {"y": 2}]}}),
              ClusterLayoutChanged(cluster_id="c1", job_id="j1", nodes=nodes)]
    subjects_of = {"JobPlanned": "muster.evt.t.job.j1", "ClusterLayoutChanged": "muster.evt.t.cluster.c1"}
    assert SIZED == {e.type for e in events}
    for e in events:
        light = sized(e.model_dump_json().encode())
        assert updates_from(7, subjects_of[e.type], "2026-01-01T00:00:00+00:00", light) == \
            updates_from(7, subjects_of[e.type], "2026-01-01T00:00:00+00:00", e)
        assert all(x is None for x in getattr(light, "tasks", light.nodes))  # the objects themselves left out
