"""The read model's job fold gives the owner's view: the planner's Job aggregate is driven
through random walks of its commands (dispatch, results, retries, cleanups, pause, cancel,
rollback, job retry), and after every command the fold of the events it recorded must equal
`Job.view()`, field by field. The read model imports none of the planner; this test does."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from contracts.catalog import Service
from contracts.events import FINAL_JOB_EVENTS, JobPlanned, JobRequested, PlannedTaskRecord, TaskAttemptFailed, TaskCompleted
from contracts.layout import Layout
from contracts.records import Recorded
from muster.bus.repository import pending_appends
from muster.readmodel.jobs import JobView, job_view
from services.planner.domain.job import Job, job_uuid

SERVICES = {
    name: Service.model_validate({"name": name, "provisioner": {"actions": {"install": {"type": "x"}, "remove": {"type": "x"}}}})
    for name in ("a", "b")
}
TASKS = [
    PlannedTaskRecord(id="n1.create", node="n1", action="create"),  # type: ignore[arg-type]
    PlannedTaskRecord(id="n2.create", node="n2", action="create"),  # type: ignore[arg-type]
    PlannedTaskRecord(id="n1.confirm", node="n1", action="confirm"),  # type: ignore[arg-type]
    PlannedTaskRecord(id="n1.install.a", node="n1", action="install", service="a"),  # type: ignore[arg-type]
    PlannedTaskRecord(id="n2.install.b", node="n2", action="install", service="b"),  # type: ignore[arg-type]
]
LINKS = [(["n1.create"], ["n1.confirm"]), (["n1.confirm"], ["n1.install.a"]), (["n2.create"], ["n2.install.b"]), (["n1.install.a"], ["n2.install.b"])]
STAGES = [["n1.create", "n2.create"], ["n1.confirm"], ["n1.install.a"], ["n2.install.b"]]


class Walk:
    """A job and the log of what it recorded."""

    def __init__(self, max_attempts: int = 2, relayout: int = 0) -> None:
        job_id = str(job_uuid("acme", "req-1"))
        self.job = Job(JobRequested(tenant="acme", job_id=job_id, cluster_id="c", operation="create", request={},
                                    requested_by="ann", planner="p1", max_attempts=max_attempts, relayout=relayout))
        self.log: list[Recorded] = []
        self.collect()

    def collect(self) -> None:
        for a in pending_appends(self.job):
            assert a.time is not None
            self.log.append(Recorded(seq=len(self.log) + 1, subject=f"muster.evt.acme.job.{self.job.id}", time=a.time,
                                     event=a.event, aggregate_id=a.aggregate_id, version=a.version))

    def step(self, choice: int) -> None:
        """One of the commands that are possible now, picked by `choice` (0 always makes
        progress: the first moves end the job or move it forward)."""
        job = self.job
        moves: list[Any] = []
        if job.all_done:
            moves += [job.succeed, job.finish_rollback]
        if job.all_done and job.may_relayout:  # another layout, after the rollback
            moves.append(lambda: job.retry_layout(Layout(nodes=2, layout=[])))
        if job.exhausted and job.state == "rolling_back":
            moves.append(lambda: job.needs_attention("rollback failed"))
        if not job.planned:
            moves.append(lambda: job.record_plan(JobPlanned(job_id=str(job.id), tasks=TASKS, links=LINKS, stages=STAGES)))
            moves.append(lambda: job.fail("no layout"))
            moves.append(lambda: job.no_other_layout("no other layout"))
        moves += [lambda t=t: job.queue(t) for t in job.ready()]
        for t, s in job.task_state.items():
            if s == "queued":
                attempt = job.attempts[t]
                moves.append(lambda t=t, a=attempt: job.complete(TaskCompleted(job_id=str(job.id), task_id=t, attempt=a)))
                moves.append(lambda t=t, a=attempt: job.fail_attempt(
                    TaskAttemptFailed(job_id=str(job.id), task_id=t, attempt=a, error="boom")))
                moves.append(lambda t=t, a=attempt: job.fail_attempt(
                    TaskAttemptFailed(job_id=str(job.id), task_id=t, attempt=a, error="silent", state="timed_out")))
            elif s == "failed" and job.tasks[t].action.value in ("create", "confirm") and t not in job.cleanups.values():
                moves.append(lambda t=t: job.queue_cleanup(t))
        moves += [lambda: job.pause("ops", "p"), lambda: job.resume("ops", "r"), lambda: job.cancel("ops", "c")]
        moves += [lambda: job.request_resources("lab", str(job.id), 2), lambda: job.take_resources({"n1": "h1", "n2": "h2"})]
        moves.append(lambda: job.adopt("p2" if job.planner == "p1" else "p1"))  # a planner restarted
        if job.stopping and job.in_flight == 0:
            moves.append(lambda: job.plan_rollback("stopped", SERVICES))
        moves.append(lambda: job.retry("ops", "again"))
        moves[choice % len(moves)]()
        self.collect()


def walks(count: int = 200, steps: int = 80) -> Iterator[Walk]:
    """Seeded random walks (the same every run), each yielded after every step."""
    for seed in range(count):
        walk, pick = Walk(max_attempts=1 + seed % 3, relayout=2 * (seed % 2)), random.Random(seed)
        for _ in range(steps):
            walk.step(0 if seed == 0 else pick.randrange(1000))  # walk 0: the happy path
            yield walk


def test_the_fold_of_a_jobs_events_is_the_owners_view_after_every_step() -> None:
    fold, applied, current = JobView(), 0, None
    for walk in walks():
        if walk is not current:
            fold, applied, current = JobView(), 0, walk
        for r in walk.log[applied:]:
            fold.apply(r)
        applied = len(walk.log)
        assert fold.view() == walk.job.view(), walk.log[-1].type
        assert job_view(walk.log) == walk.job.view()


def test_a_walk_reaches_every_kind_of_job_event() -> None:
    """The walks above are only worth something if they reach cleanups, job control,
    rollbacks and every end."""
    ended = {id(w): w for w in walks()}.values()
    seen = {r.type for walk in ended for r in walk.log}
    assert {"CleanupQueued", "RollbackPlanned", "JobRetried", "JobLayoutRetried", "JobPaused", "JobCancelRequested", "JobAdopted",
            "JobResourcesRequested", "JobResourcesGranted"} <= seen
    assert FINAL_JOB_EVENTS <= seen
    retried = [r.event for walk in ended for r in walk.log if r.type == "JobRetried"]
    assert {e.rollback for e in retried} == {False, True}  # a plan started over, and a failed rollback run again
    shown = {t["state"] for walk in ended for t in walk.job.view()["tasks"]}
    assert {"planned", "queued", "succeeded", "failed", "timed_out", "cancelled"} <= shown


def test_events_before_the_request_and_unknown_types_are_skipped() -> None:
    walk = Walk()
    walk.step(0)  # planned
    stray = Recorded(seq=99, subject="s", time=walk.log[0].time, event=TaskCompleted(job_id="x", task_id="n1.create", attempt=1))
    assert job_view([stray]) is None
    assert job_view([stray, *walk.log]) == walk.job.view()


def test_the_plan_graphs_and_one_task_as_a_page_draws_them() -> None:
    walk = Walk(max_attempts=1)
    walk.step(0)  # planned
    for _ in range(3):
        walk.step(0)  # n1.create and n2.create queued, n1.create done
    fold = JobView()
    for r in walk.log:
        fold.apply(r)
    graph = fold.graph()
    assert [t["id"] for t in graph["forward"]["tasks"]] == [t.id for t in TASKS]
    assert graph["forward"]["links"] == LINKS and graph["forward"]["stages"] == STAGES
    assert graph["rollback"] is None and graph["cleanups"] == []
    assert fold.task("n1.create") == {"id": "n1.create", "node": "n1", "action": "create", "service": None,
                                      "state": "succeeded", "attempt": 1}
    assert fold.task("nope") is None

    walk.job.fail_attempt(TaskAttemptFailed(job_id=str(walk.job.id), task_id="n2.create", attempt=1, error="x"))
    walk.job.plan_rollback("n2.create failed", SERVICES)
    walk.collect()
    for r in walk.log[-2:]:
        fold.apply(r)
    rollback = fold.graph()["rollback"]
    assert rollback is not None and [t["id"] for t in rollback["tasks"]] == ["undo.n1.delete"]
    assert rollback["stages"] == [["undo.n1.delete"]]
    assert fold.view() == walk.job.view()


def test_a_jobs_trace_id_is_its_traceparents_second_field_or_none() -> None:
    """What `GET /v1/jobs/{id}` and `muster status` name (docs/tracing.md, "Seeing a job's trace")."""
    from muster.readmodel.jobs import trace_id

    assert trace_id("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01") == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert [trace_id(v) for v in (None, "", "garbage", "00-abc-01")] == [None] * 4
