"""The console's pure parts: a job's task graph for the page, and one task's attempts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from contracts.events import (
    CleanupQueued,
    JobPlanned,
    JobRequested,
    PlannedTaskRecord,
    RollbackPlanned,
    TaskAttemptFailed,
    TaskClaimed,
    TaskFailed,
    TaskQueued,
    TaskSucceeded,
)
from muster.bus.eventstore import Recorded
from muster.readmodel.jobs import JobView
from services.tracker.ui.graph import MAX_OUTPUT, attempts, plan_graph

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
JOB = "00000000-0000-0000-0000-000000000001"


def _log(*events: object) -> list[Recorded]:
    out = []
    for i, e in enumerate(events, 1):
        kind = "task" if type(e).__name__ in ("TaskClaimed", "TaskSucceeded", "TaskFailed") else "job"
        out.append(Recorded(seq=i, subject=f"muster.evt.t.{kind}.{JOB}", time=T0 + timedelta(seconds=i), event=e))
    return out


def _task(tid: str, action: str = "create", service: str | None = None) -> PlannedTaskRecord:
    return PlannedTaskRecord(id=tid, node=tid.split(".")[0], action=action, service=service)  # type: ignore[arg-type]


def _history() -> list[Recorded]:
    return _log(
        JobRequested(tenant="t", job_id=JOB, cluster_id="c", operation="create", request={}),
        JobPlanned(job_id=JOB, tasks=[_task("n1.create"), _task("n2.create"), _task("n1.install.base", "install", "base")],
                   links=[(["n1.create"], ["n1.install.base"])], stages=[["n1.create", "n2.create"], ["n1.install.base"]]),
        TaskQueued(job_id=JOB, task_id="n1.create", attempt=1, node="n1", action="create"),  # type: ignore[arg-type]
        TaskClaimed(job_id=JOB, task_id="n1.create", attempt=1, provisioner="p1", worker="p1/w0"),
        TaskFailed(job_id=JOB, task_id="n1.create", attempt=1, provisioner="p1", worker="p1/w0", error="boom", stdout="x" * (MAX_OUTPUT + 5)),
        TaskAttemptFailed(job_id=JOB, task_id="n1.create", attempt=1, error="boom"),
        CleanupQueued(job_id=JOB, task_id="n1.create.cleanup", node="n1", for_task="n1.create", attempt=1),
        TaskQueued(job_id=JOB, task_id="n1.create", attempt=2, node="n1", action="create"),  # type: ignore[arg-type]
        TaskClaimed(job_id=JOB, task_id="n1.create", attempt=2, provisioner="p2", worker="p2/w1"),
        TaskSucceeded(job_id=JOB, task_id="n1.create", attempt=2, provisioner="p2", worker="p2/w1", hostname="h1", ipaddresses={"access_v4": "10.0.0.1"}),
        RollbackPlanned(job_id=JOB, reason="n2.create failed", tasks=[_task("undo.n1.create", "delete")], links=[],
                        stages=[["undo.n1.create"]]),
    )


def test_the_graph_has_every_plan_phase_with_stages_links_and_states() -> None:
    history = _history()
    view = JobView()
    for r in history:
        view.apply(r)
    status = {"tasks": [{"id": "n1.create", "state": "queued", "attempt": 2, "provisioner": "p2", "worker": "p2/w1"}]}
    graph = plan_graph(view.graph(), status)
    by_id = {t["id"]: t for t in graph.tasks}
    assert [t["phase"] for t in graph.tasks] == ["forward", "forward", "forward", "rollback", "cleanup"]
    assert by_id["n1.install.base"]["stage"] == 2 and by_id["undo.n1.create"]["stage"] == 1
    assert {k: by_id["n1.create"][k] for k in ("state", "attempt", "provisioner")} == {"state": "queued", "attempt": 2, "provisioner": "p2"}
    assert by_id["n2.create"]["state"] == "planned" and by_id["n2.create"]["attempt"] == 0
    assert graph.links == [[["n1.create"], ["n1.install.base"]]]
    assert set(graph.stages) == {"forward", "rollback"}
    assert plan_graph({}, None).tasks == []


def test_attempts_list_each_retry_with_its_claim_outcome_and_what_the_planner_took() -> None:
    first, second = attempts(_history(), "n1.create")
    assert first["attempt"] == 1 and first["claims"][0]["provisioner"] == "p1"
    assert first["outcome"]["state"] == "failed" and first["outcome"]["error"] == "boom"
    assert first["outcome"]["stdout"].endswith("(5 more characters)")  # long output is clipped
    assert first["taken"] == {"state": "failed", "at": (T0 + timedelta(seconds=6)).isoformat(), "error": "boom"}
    assert second["outcome"]["state"] == "succeeded" and second["outcome"]["ipaddresses"] == {"access_v4": "10.0.0.1"}
    assert second["taken"] is None  # not taken into the job yet
    cleanup = attempts(_history(), "n1.create.cleanup")
    assert cleanup[0]["cleanup_for"] == "n1.create" and cleanup[0]["outcome"] is None
    assert attempts(_history(), "nope") == []
