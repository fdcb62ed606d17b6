"""Pure views: a job's status with task locations, and the readable timeline."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from contracts.catalog import Action
from contracts.events import JobRequested, JobSucceeded, TaskClaimed, TaskFailed, TaskQueued, TaskSucceeded
from muster.bus.eventstore import Recorded
from muster.readmodel.status import compose, task_records
from muster.readmodel.timeline import place, timeline

T, J = "acme", "11111111-1111-4111-8111-111111111111"
START = datetime(2026, 1, 1, tzinfo=UTC)


def rec(seq: int, ms: int, kind: str, event: Any, task: str = "") -> Recorded:
    subject = f"muster.evt.{T}.{kind}.{J}" + (f".{task.replace('.', '~')}" if task else "")
    return Recorded(seq=seq, subject=subject, time=START + timedelta(milliseconds=ms), event=event)


VIEW = {
    "id": J, "tenant": T, "cluster_id": "c", "operation": "create", "state": "running", "error": None, "owner": "p1",
    "requested_by": "ann", "mode": "eager", "started_at": "t0", "finished_at": None,
    "stage": {"current": 1, "total": 2},
    "tasks": [
        {"id": "n1.create", "node": "n1", "action": "create", "service": None, "state": "queued", "attempt": 2},
        {"id": "n2.create", "node": "n2", "action": "create", "service": None, "state": "succeeded", "attempt": 1},
        {"id": "n3.create", "node": "n3", "action": "create", "service": None, "state": "planned", "attempt": 0},
    ],
}

TASK_EVENTS = [
    rec(5, 10, "task", TaskClaimed(job_id=J, task_id="n1.create", attempt=1, provisioner="p", worker="w1"), "n1.create"),
    rec(6, 20, "task", TaskFailed(job_id=J, task_id="n1.create", attempt=1, provisioner="p", worker="w1", error="x"), "n1.create"),
    rec(8, 30, "task", TaskClaimed(job_id=J, task_id="n1.create", attempt=2, provisioner="p", worker="w2"), "n1.create"),
    rec(9, 40, "task", TaskClaimed(job_id=J, task_id="n2.create", attempt=1, provisioner="q", worker="q/w1"), "n2.create"),
    rec(10, 90, "task", TaskSucceeded(job_id=J, task_id="n2.create", attempt=1, provisioner="q", worker="q/w1"), "n2.create"),
]


def test_a_status_shows_where_each_current_attempt_runs_and_counts_claims() -> None:
    body = compose(VIEW, task_records(TASK_EVENTS), {"nodes": 3, "layout": []}, "owner")
    tasks = {t["id"]: t for t in body["tasks"]}
    assert tasks["n1.create"]["state"] == "claimed" and tasks["n1.create"]["worker"] == "w2"
    assert tasks["n2.create"]["provisioner"] == "q" and tasks["n2.create"]["state"] == "succeeded"
    assert tasks["n3.create"]["provisioner"] is None
    assert body["counts"] == {"claimed": 1, "planned": 1, "succeeded": 1} and body["tasks_total"] == 3
    assert body["source"] == "owner" and body["stage"] == {"current": 1, "total": 2} and body["layout"]["nodes"] == 3


def test_a_location_of_an_older_attempt_is_not_shown() -> None:
    stale = task_records(TASK_EVENTS[:2] + TASK_EVENTS[3:])  # attempt 2's claim not read yet
    body = compose(VIEW, stale, None, "owner")
    n1 = next(t for t in body["tasks"] if t["id"] == "n1.create")
    assert n1["provisioner"] is None and n1["state"] == "queued"


def test_the_timeline_says_who_did_what_and_how_long_it_took() -> None:
    history = [
        rec(1, 0, "job", JobRequested(tenant=T, job_id=J, cluster_id="c", operation="create",
                                      request={"template": "t", "nodes": 2}, requested_by="ann", planner="p1")),
        rec(2, 5, "job", TaskQueued(job_id=J, task_id="n1.create", attempt=1, node="n1", action=Action.CREATE)),
        rec(3, 25, "task", TaskClaimed(job_id=J, task_id="n1.create", attempt=1, provisioner="p", worker="p/w1"), "n1.create"),
        rec(4, 1525, "task", TaskSucceeded(job_id=J, task_id="n1.create", attempt=1, provisioner="p", worker="p/w1"), "n1.create"),
        rec(5, 2000, "job", JobSucceeded(job_id=J)),
    ]
    lines = timeline(history)
    assert [line.type for line in lines] == ["JobRequested", "TaskQueued", "TaskClaimed", "TaskSucceeded", "JobSucceeded"]
    assert "requested by ann" in lines[0].text and lines[0].who == "ann"
    assert lines[1].who == "p1"  # the planner that owns the job wrote it
    assert lines[2].text.endswith("after 20 ms in the queue") and lines[2].who == "p/w1"
    assert lines[3].took == 1.5 and lines[4].took == 2.0 and lines[4].offset == 2.0
    assert "(1.50 s)" in lines[3].render() and lines[4].to_json()["took_s"] == 2.0


def test_a_second_claim_of_an_attempt_says_the_first_never_reported() -> None:
    """A provisioner killed mid-job: its claim's message came back after the ack wait and another
    claimed the same attempt. The story said `claimed (attempt 1) after 30.00 s in the queue`, as
    if nobody had held it (an operator's walk, session 25)."""
    history = [
        rec(1, 0, "job", TaskQueued(job_id=J, task_id="n1.create", attempt=1, node="n1", action=Action.CREATE)),
        rec(2, 10, "task", TaskClaimed(job_id=J, task_id="n1.create", attempt=1, provisioner="p", worker="p/w1"), "n1.create"),
        rec(3, 30010, "task", TaskClaimed(job_id=J, task_id="n1.create", attempt=1, provisioner="q", worker="q/w1", delivery=2),
            "n1.create"),
        rec(4, 31010, "task", TaskSucceeded(job_id=J, task_id="n1.create", attempt=1, provisioner="q", worker="q/w1"), "n1.create"),
        rec(5, 31020, "job", TaskQueued(job_id=J, task_id="n2.create", attempt=1, node="n2", action=Action.CREATE)),
        rec(6, 31030, "task", TaskClaimed(job_id=J, task_id="n2.create", attempt=1, provisioner="q", worker="q/w1"), "n2.create"),
    ]
    lines = timeline(history)
    assert lines[1].text.endswith("after 10 ms in the queue")
    assert "claimed (attempt 1) again, 30.00 s after p/w1 claimed it: that claim never reported" in lines[2].text, lines[2].text
    assert "in the queue" not in lines[2].text and lines[3].took == 1.0
    assert lines[5].text.endswith("after 10 ms in the queue")  # another task's first claim, as before


def test_an_event_stamped_before_the_one_logged_ahead_of_it_shows_no_negative_offset() -> None:
    """A create's `JobRequested` is stamped a moment before its `ClusterRequested`, and appended
    after it: `muster history --cluster` printed `+ -0.001s` (and `+ -0.000s` under a ms)."""
    from contracts.events import ClusterRequested

    for early in (1, 0.3):
        history = [
            Recorded(seq=1, subject=f"muster.evt.{T}.cluster.c", time=START + timedelta(milliseconds=early),
                     event=ClusterRequested(tenant=T, cluster_id="c", name="web", template="t", provider="p", job_id=J)),
            rec(2, 0, "job", JobRequested(tenant=T, job_id=J, cluster_id="c", operation="create", request={}, requested_by="ann")),
            rec(3, 20, "job", JobSucceeded(job_id=J)),
        ]
        lines = timeline(history)
        assert [line.seq for line in lines] == [1, 2, 3]  # log order, as the log has it
        assert [line.offset for line in lines] == [early / 1000, 0.0, 0.02]  # from the earliest event
        assert not any("-" in line.render().split("#")[0].split("  ", 1)[1] for line in lines)
        assert min(line.to_json()["offset_s"] for line in lines) == 0.0


def test_governance_decisions_read_with_who_made_them() -> None:
    from contracts.approvals import PolicyMessage, RequestDenied
    from contracts.governance import GovernanceDeleted, GovernancePut, ScheduleAnswered, ScheduleFired

    tick = START + timedelta(hours=3)
    history = [
        rec(1, 0, "gov.rule", GovernancePut(kind="rule", name="deletes", entity={}, version=1, by="ada")),
        rec(2, 5, "denied", RequestDenied(job_id=J, operation="create", by="uma",
                                          denials=[PolicyMessage(policy="nodes", version=2, message="at most 10 nodes")])),
        rec(3, 9, "gov.schedule", ScheduleFired(name="n", tick=tick, request_id="sched-n-1", scheduler="g1", late_s=90, skipped=2)),
        rec(4, 12, "gov.schedule", ScheduleAnswered(name="n", tick=tick, rejected="cluster busy")),
        rec(5, 20, "gov.policy", GovernanceDeleted(kind="policy", name="nodes", by="ada")),
        rec(6, 30, "denied", RequestDenied(job_id=J, operation="delete", by="uma", approved_by="apo",  # decision 42
                                          denials=[PolicyMessage(policy="freeze", version=1, message="no deletes")])),
    ]
    lines = timeline(history)
    assert [(line.who, line.text) for line in lines] == [
        ("ada", "rule 'deletes' version 1 added"),
        ("uma", f"create (job {J}) denied by the tenant's policies: at most 10 nodes (nodes v2)"),
        ("g1", "schedule 'n' took its tick 2026-01-01 03:00:00 UTC, 90 s late, 2 missed tick(s) not run (request sched-n-1)"),
        ("", "schedule 'n', tick 2026-01-01 03:00:00 UTC: refused: cluster busy"),
        ("ada", "policy 'nodes' deleted"),
        ("uma", f"delete (job {J}) denied by the tenant's policies when apo approved it: no deletes (freeze v1)"),
    ]


def test_a_worker_named_after_its_provisioner_is_not_named_twice() -> None:
    assert place("prov", "prov/w1") == "prov/w1"
    assert place("prov", "w1") == "prov/w1"
    assert place(None, None) == ""


def test_each_progress_step_carries_its_task_as_the_status_shows_it() -> None:
    from contracts.events import JobPlanned, PlannedTaskRecord
    from muster.readmodel.progress import JobProgress

    progress = JobProgress()
    story = [
        rec(1, 0, "job", JobRequested(tenant=T, job_id=J, cluster_id="c", operation="create", request={}, planner="p1")),
        rec(2, 1, "job", JobPlanned(job_id=J, tasks=[PlannedTaskRecord(id="n1.create", node="n1", action=Action.CREATE)],
                                    links=[], stages=[["n1.create"]])),
        rec(3, 2, "job", TaskQueued(job_id=J, task_id="n1.create", attempt=1, node="n1", action=Action.CREATE)),
        rec(4, 3, "task", TaskClaimed(job_id=J, task_id="n1.create", attempt=1, provisioner="p", worker="p/w1"), "n1.create"),
    ]
    steps = [progress.apply(r) for r in story]
    assert steps[0]["task"] is None and steps[2]["task"]["state"] == "queued"
    assert steps[3]["task"] == {"id": "n1.create", "node": "n1", "action": "create", "service": None, "state": "claimed",
                                "attempt": 1, "provisioner": "p", "worker": "p/w1"}
    assert steps[3]["counts"] == {"claimed": 1} and progress.stage_progress()[0]["running"] == ["n1.create @ p/w1"]


def test_what_a_job_left_on_a_cluster_and_a_saved_plan_are_said_in_words() -> None:
    """`muster history --cluster c1` printed `ServicesMoved  ServicesMoved` for what a create
    left on the nodes (a new user's walk, session 20): the type again, no sentence."""
    from contracts.events import ClusterNameClaimed, PlanSaved, ServiceChange, ServicesMoved

    moved = ServicesMoved(cluster_id="c", job_id=J, changes=[
        ServiceChange(service="base", state="running", nodes=["n1000", "n1001", "n1002", "n1003", "n1004"]),
        ServiceChange(service="hdfs-namenode", state="running", nodes=["n1000"])])
    saved = PlanSaved(plan_id="5c3c", job_id=J, cluster_id="c", operation="expand", command={}, cluster_version=3,
                      catalog_version="4a28", digest="d", tasks=12)
    claimed = ClusterNameClaimed(name="c1", cluster_id="c", job_id=J)
    removed = ServicesMoved(cluster_id="c", job_id=J, changes=[
        ServiceChange(service="hdfs-datanode", state="removed", nodes=["n1003", "n1004"]),
        ServiceChange(service="hdfs-datanode", state="running", nodes=["n1005"])])
    lines = timeline([rec(1, 0, "cluster", moved), rec(2, 1, "cluster", saved), rec(3, 2, "cluster", claimed),
                      rec(4, 3, "cluster", removed), rec(5, 4, "cluster", ServicesMoved(cluster_id="c", job_id=J, changes=[]))])
    # A sentence naming the job, and a service taken off nodes said to be removed from them
    # (session 35: `services left: base running on ...`, and `removed on n1003`).
    assert lines[0].text == (f"job {J[:8]} left base running on n1000, n1001, n1002 and 2 more; "
                             "hdfs-namenode running on n1000")
    assert lines[3].text == f"job {J[:8]} left hdfs-datanode removed from n1003, n1004; hdfs-datanode running on n1005"
    assert lines[4].text == f"job {J[:8]} moved no service"
    # v2: where each was before (session 36: a start and a restart both read `running on n1`);
    # a v1 record reads as it did
    moved_from = ServicesMoved(cluster_id="c", job_id=J, changes=[
        ServiceChange(service="b", state="running", nodes=["n1", "n2"], before="stopped"),
        ServiceChange(service="b", state="running", nodes=["n3"], before="running"),
        ServiceChange(service="c", state="removed", nodes=["n3"], before="running"),
        ServiceChange(service="d", state="running", nodes=["n4"])])
    old = ServicesMoved.model_validate({"type": "ServicesMoved", "v": 1, "cluster_id": "c", "job_id": J,
                                        "changes": [{"service": "b", "state": "stopped", "nodes": ["n1"]}]})
    [now, before] = timeline([rec(6, 5, "cluster", moved_from), rec(7, 6, "cluster", old)])
    assert now.text == (f"job {J[:8]} left b stopped -> running on n1, n2; b running -> running on n3; "
                        "c running -> removed from n3; d running on n4")
    assert (old.v, before.text) == (1, f"job {J[:8]} left b stopped on n1")
    assert lines[1].text == "plan 5c3c saved: expand, 12 tasks (apply it: muster cluster apply 5c3c)"
    assert lines[2].text == "name 'c1' taken by cluster c"
