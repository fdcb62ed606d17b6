"""The Job aggregate, without a broker: decisions are idempotent, replay gives the same state."""

from __future__ import annotations

from datetime import UTC, datetime

from contracts.catalog import Action, Service
from contracts.events import JobPlanned, JobRequested, PlannedTaskRecord, TaskAttemptFailed, TaskCompleted
from muster.bus.eventstore import Recorded
from muster.bus.repository import pending_appends, rebuild
from services.planner.domain.job import Job, job_uuid


def _job(mode: str = "eager") -> Job:
    job_id = str(job_uuid("acme", "req-1"))
    job = Job(JobRequested(tenant="acme", job_id=job_id, cluster_id="c", operation="create", request={}, max_attempts=3))
    tasks = [
        PlannedTaskRecord(id="n1.create", node="n1", action=Action.CREATE),
        PlannedTaskRecord(id="n2.create", node="n2", action=Action.CREATE),
        PlannedTaskRecord(id="n1.install.a", node="n1", action=Action.INSTALL, service="a"),
        PlannedTaskRecord(id="n2.install.b", node="n2", action=Action.INSTALL, service="b"),
    ]
    links = [(["n1.create"], ["n1.install.a"]), (["n2.create"], ["n2.install.b"]), (["n1.install.a"], ["n2.install.b"])]
    job.record_plan(JobPlanned(job_id=job_id, mode=mode, tasks=tasks, links=links,  # type: ignore[arg-type]
                               stages=[["n1.create", "n2.create"], ["n1.install.a"], ["n2.install.b"]]))
    return job


def _done(job: Job, task: str) -> bool:
    return job.complete(TaskCompleted(job_id=str(job.id), task_id=task, attempt=job.attempts[task]))


def test_job_ids_derive_from_the_idempotency_key() -> None:
    assert job_uuid("acme", "r1") == job_uuid("acme", "r1")
    assert job_uuid("acme", "r1") != job_uuid("other", "r1")
    assert job_uuid("acme", None) != job_uuid("acme", None)


def test_eager_dispatch_follows_edges_one_task_per_node() -> None:
    job = _job()
    first = job.ready()
    assert first == ["n1.create", "n2.create"]
    for t in first:
        job.queue(t)
    assert job.ready() == []  # both nodes busy
    assert _done(job, "n1.create")
    assert job.ready() == ["n1.install.a"]
    job.queue("n1.install.a")
    assert _done(job, "n2.create") and job.ready() == []  # n2.install.b waits for n1.install.a
    assert _done(job, "n1.install.a") and job.ready() == ["n2.install.b"]


def test_a_repeated_or_late_result_changes_nothing() -> None:
    job = _job()
    job.queue("n1.create")
    assert _done(job, "n1.create")
    assert not _done(job, "n1.create")  # redelivered
    job.queue("n2.create")
    assert _fail(job, "n2.create")
    job.queue("n2.create")
    late = TaskCompleted(job_id=str(job.id), task_id="n2.create", attempt=1)
    assert not job.complete(late)  # attempt 1 is superseded by attempt 2
    assert job.task_state["n2.create"] == "queued" and job.attempts["n2.create"] == 2


def _fail(job: Job, task: str) -> bool:
    return job.fail_attempt(TaskAttemptFailed(job_id=str(job.id), task_id=task, attempt=job.attempts[task], error="boom"))


def test_a_failed_task_is_offered_again_until_its_attempts_run_out() -> None:
    job = _job()
    for attempt in (1, 2, 3):
        assert "n1.create" in job.ready()
        assert job.queue("n1.create").attempt == attempt
        assert _fail(job, "n1.create")
    assert job.attempts_left("n1.create") == 0 and job.exhausted == ["n1.create"]
    assert job.stopping and job.ready() == []  # nothing new once a task is out of attempts


def test_staged_mode_waits_for_the_whole_stage() -> None:
    job = _job(mode="staged")
    assert job.ready() == ["n1.create", "n2.create"]
    job.queue("n1.create")
    job.queue("n2.create")
    assert _done(job, "n1.create") and job.ready() == []  # eager would start n1.install.a now
    assert _done(job, "n2.create") and job.ready() == ["n1.install.a"]


def test_final_states_are_final() -> None:
    job = _job()
    assert job.fail("no provisioner")
    assert not job.fail("again") and not job.succeed()
    assert job.ready() == []


def test_rebuilding_from_recorded_events_gives_the_same_state() -> None:
    job = _job()
    for t in job.ready():
        job.queue(t)
    _done(job, "n1.create")
    appends = pending_appends(job)
    history = [
        Recorded(seq=i + 1, subject="s", time=a.time or datetime.now(UTC), event=a.event,
                 aggregate_id=a.aggregate_id, version=a.version)
        for i, a in enumerate(appends)
    ]
    rebuilt = rebuild(Job, history)
    assert rebuilt is not None
    assert rebuilt.task_state == job.task_state and rebuilt.attempts == job.attempts
    assert rebuilt.ready() == job.ready() and rebuilt.version == job.version


SERVICES = {
    "a": Service.model_validate({"name": "a", "provisioner": {"actions": {"install": {"type": "x"}, "remove": {"type": "x"}}}}),
    "b": Service.model_validate({"name": "b", "provisioner": {"actions": {"install": {"type": "x"}, "remove": {"type": "x"}}}}),
}


def test_rollback_undoes_what_completed_in_reverse_and_ends_rolled_back() -> None:
    job = _job()
    for t in job.ready():
        job.queue(t)
    _done(job, "n1.create")
    _done(job, "n2.create")
    for _ in range(3):
        job.queue("n1.install.a")
        _fail(job, "n1.install.a")
    assert job.stopping and job.in_flight == 0
    rollback = job.plan_rollback("task n1.install.a failed 3 times", SERVICES)
    assert rollback is not None and job.state == "rolling_back"
    assert sorted(t.id for t in rollback.tasks) == ["undo.n1.delete", "undo.n2.delete"]
    assert not job.stopping and sorted(job.ready()) == ["undo.n1.delete", "undo.n2.delete"]
    for t in job.ready():
        job.queue(t)
        _done(job, t)
    assert job.all_done and job.finish_rollback() and job.state == "rolled_back" and job.is_final


def test_a_failing_rollback_needs_attention() -> None:
    job = _job()
    job.queue("n1.create")
    _done(job, "n1.create")
    job.cancel("ops")
    assert job.stopping
    job.plan_rollback("cancelled", SERVICES)
    for _ in range(3):
        job.queue("undo.n1.delete")
        _fail(job, "undo.n1.delete")
    assert job.exhausted == ["undo.n1.delete"]
    assert job.needs_attention("rollback failed") and job.state == "needs_attention"


def test_pause_holds_dispatch_and_resume_releases_it() -> None:
    job = _job()
    assert job.pause("ops") and not job.pause("ops")
    assert job.ready() == [] and job.view()["state"] == "paused"
    assert job.resume("ops") and job.ready() == ["n1.create", "n2.create"]


def test_a_job_that_finished_while_paused_cannot_be_resumed() -> None:
    """Found by the nemesis soak (#18.10): a pause arrived while the last tasks ran, they
    finished, the job succeeded, and the resume that followed recorded JobResumed after
    JobSucceeded."""
    job = _job()
    assert job.pause("ops") and job.succeed()
    assert not job.resume("ops") and job.is_final


def test_retry_after_rollback_starts_over_with_fresh_attempts() -> None:
    job = _job()
    for _ in range(3):
        job.queue("n1.create")
        _fail(job, "n1.create")
    job.plan_rollback("create failed", SERVICES)
    job.finish_rollback()
    assert job.retry("ops") and job.state == "running"
    assert job.ready() == ["n1.create", "n2.create"] and job.attempts_left("n1.create") == 3
    assert job.queue("n1.create").attempt == 4  # attempts keep counting: ids stay unique


def test_a_failed_create_with_a_machine_is_cleaned_up_before_creating_again() -> None:
    job = _job()
    job.queue("n1.create")
    _done(job, "n1.create")
    job.queue("n2.create")
    _fail(job, "n2.create")
    cleanup = job.queue_cleanup("n2.create")
    assert cleanup.node == "n2" and job.tasks[cleanup.task_id].action.value == "delete"
    assert "n2.create" not in job.ready()  # n2 is busy being cleaned up
    assert job.complete(TaskCompleted(job_id=str(job.id), task_id=cleanup.task_id, attempt=1))
    assert "n2.create" in job.ready()


def test_the_rollback_deletes_a_node_whose_create_may_have_made_its_machine() -> None:
    """A create attempt that asked the cloud for the machine and lost the answer (the endpoint
    went away mid-create), or that timed out, may have made it: only a delete finds out. A create
    that failed before asking, as every later attempt of n2's does, made nothing."""
    job = _job()
    for attempt, made in enumerate((True, False, False), 1):
        job.queue("n1.create")
        job.fail_attempt(TaskAttemptFailed(job_id=str(job.id), task_id="n1.create", attempt=attempt, error="lost",
                                           may_have_made=made))
        job.queue("n2.create")
        _fail(job, "n2.create")
    rollback = job.plan_rollback("task n1.create failed 3 times", SERVICES)
    assert rollback is not None and [t.id for t in rollback.tasks] == ["undo.n1.delete"]

    job.finish_rollback()
    assert job.retry("ops")
    job.queue("n2.create")
    job.fail_attempt(TaskAttemptFailed(job_id=str(job.id), task_id="n2.create", attempt=4, error="x", state="timed_out"))
    job.cancel("ops")  # n1's machine went with the first round's rollback; n2's create timed out
    again = job.plan_rollback("cancelled", SERVICES)
    assert again is not None and [t.id for t in again.tasks] == ["undo.n2.delete"]


def test_the_reason_a_task_stopped_the_job_names_its_last_error_on_one_line() -> None:
    from services.planner.domain.saga import REASON_ERROR_MAX, exhausted_reason

    job = _job()
    for _ in range(3):
        job.queue("n1.create")
        _fail(job, "n1.create")
    assert exhausted_reason(job) == "task n1.create failed 3 times: boom"
    job.last_errors["n1.create"] = "create: list nodes: cannot reach the cloud at 127.0.0.1:4000:\n Connection refused"
    assert exhausted_reason(job) == "task n1.create failed 3 times: create: list nodes: cannot reach the cloud at 127.0.0.1:4000: Connection refused"
    job.last_errors["n1.create"] = "x" * 5000
    said = exhausted_reason(job)
    assert said == "task n1.create failed 3 times: " + "x" * (REASON_ERROR_MAX - 1) + "…"


def test_upgrade_plans_stop_install_configure_start_of_the_named_service_only() -> None:
    from contracts.layout import NodeSpec
    from services.planner.domain.plan import build_plan

    svc = {
        name: Service.model_validate({"name": name, "dependencies": {"runtime": {"requires": req}},
                                      "provisioner": {"actions": {a: {"type": "x"} for a in ("install", "configure", "start", "stop")}}})
        for name, req in (("db", []), ("app", ["db"]))
    }
    plan = build_plan(svc, [NodeSpec(id="n1", hardwaretype="h", imagetype="i", services=["db", "app"])], "upgrade", services=["db"])
    assert [t.id for t in plan.tasks] == ["n1.stop.db", "n1.install.db", "n1.configure.db", "n1.start.db"]


def test_job_control_remembers_request_ids() -> None:
    job = _job()
    assert job.pause("ops", request_id="p-1") and "p-1" in job.control_requests
    rebuilt_requests = set(job.control_requests)
    assert job.resume("ops", request_id="r-1") and set(job.control_requests) == rebuilt_requests | {"r-1"}


def test_a_failed_upgrade_rolls_back_to_the_service_running_not_removed() -> None:
    """The job's rollback knows what the nodes had before it (`JobPlanned.previous_nodes`): an
    upgrade's install replaced the service, so undoing it must not remove the service."""
    from contracts.layout import NodeSpec
    from services.planner.domain.plan import build_plan

    catalog = {"db": Service.model_validate({"name": "db", "provisioner": {"actions": {
        a: {"type": "x"} for a in ("install", "configure", "start", "stop", "remove")}}})}
    before = [NodeSpec(id="n1", hardwaretype="h", imagetype="i", services=["db"])]
    plan = build_plan(catalog, before, "upgrade", services=["db"])
    job_id = str(job_uuid("acme", "up-1"))
    job = Job(JobRequested(tenant="acme", job_id=job_id, cluster_id="c", operation="upgrade", request={}, max_attempts=1))
    job.record_plan(JobPlanned(
        job_id=job_id, mode="eager", nodes=before, previous_nodes=before,
        tasks=[PlannedTaskRecord(id=t.id, node=t.node, action=t.action, service=t.service) for t in plan.tasks],
        links=[(list(s), list(t)) for s, t in plan.links], stages=[list(s) for s in plan.stages]))
    for task in ("n1.stop.db", "n1.install.db", "n1.configure.db"):
        job.queue(task)
        assert _done(job, task)
    undo = job.plan_rollback("task n1.start.db failed", catalog)
    assert undo is not None
    assert [(t.action, t.service) for t in undo.tasks] == [(Action.CONFIGURE, "db"), (Action.START, "db")]


def test_a_repair_that_fails_does_not_stop_the_services_it_started_that_were_meant_to_run() -> None:
    from contracts.layout import NodeSpec
    from services.planner.domain.plan import build_plan

    catalog = {"db": Service.model_validate({"name": "db", "provisioner": {"actions": {
        a: {"type": "x"} for a in ("install", "configure", "start", "stop", "status")}}})}
    before = [NodeSpec(id=n, hardwaretype="h", imagetype="i", services=["db"]) for n in ("n1", "n2")]
    plan = build_plan(catalog, before, "repair-node", services=["db"])
    job_id = str(job_uuid("acme", "repair-1"))
    job = Job(JobRequested(tenant="acme", job_id=job_id, cluster_id="c", operation="repair", request={}, max_attempts=1))
    job.record_plan(JobPlanned(
        job_id=job_id, mode="eager", nodes=before, previous_nodes=before, previous_stopped=[],
        previous_stopped_on={"db": ["n2"]},
        tasks=[PlannedTaskRecord(id=t.id, node=t.node, action=t.action, service=t.service) for t in plan.tasks],
        links=[(list(s), list(t)) for s, t in plan.links], stages=[list(s) for s in plan.stages]))
    for task in ("n1.confirm", "n2.confirm", "n1.start.db", "n2.start.db"):
        job.queue(task)
        assert _done(job, task)
    undo = job.plan_rollback("task n1.status.db failed", catalog)
    assert undo is not None
    assert [t.id for t in undo.tasks] == ["undo.n2.stop.db"]  # n1's db was meant to run; n2's to be stopped
