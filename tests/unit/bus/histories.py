"""Random but valid histories of the planner's aggregates, for property tests of folds (and of
snapshots): a Job or a Cluster driven through random commands, each of which the aggregate
accepts or refuses by its own rules; the events it records become the history."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hypothesis import strategies as st

from contracts.catalog import Action, Service
from contracts.events import ClusterRequested, JobPlanned, JobRequested, PlannedTaskRecord, TaskAttemptFailed, TaskCompleted
from contracts.layout import NodeSpec
from muster.bus.eventstore import Recorded
from muster.bus.repository import pending_appends
from services.planner.domain.cluster import Cluster
from services.planner.domain.job import Job, job_uuid

START = datetime(2026, 1, 1, tzinfo=UTC)
SERVICES = {
    name: Service.model_validate({"name": name, "provisioner": {"actions": {"install": {"type": "x"}, "remove": {"type": "x"}}}})
    for name in ("a", "b")
}
JOB_STEPS = ("queue",) * 6 + ("complete",) * 5 + ("fail",) * 2 + (
    "pause", "resume", "cancel", "retry", "rollback", "rollback", "finish_rollback", "succeed", "succeed", "needs_attention",
    "cleanup", "cleanup")
"""Weighted: mostly dispatch and outcomes, so that histories get long before a job ends."""


def new_job(n: int, mode: str = "eager", max_attempts: int = 2) -> Job:
    job_id = str(job_uuid("acme", f"req-{n}"))
    job = Job(JobRequested(tenant="acme", job_id=job_id, cluster_id="c", operation="create", request={"n": n},
                           max_attempts=max_attempts))
    tasks = [PlannedTaskRecord(id=f"n{i}.create", node=f"n{i}", action=Action.CREATE) for i in (1, 2)]
    tasks += [PlannedTaskRecord(id="n1.install.a", node="n1", action=Action.INSTALL, service="a"),
              PlannedTaskRecord(id="n2.install.b", node="n2", action=Action.INSTALL, service="b")]
    links = [(["n1.create"], ["n1.install.a"]), (["n2.create"], ["n2.install.b"]), (["n1.install.a"], ["n2.install.b"])]
    job.record_plan(JobPlanned(job_id=job_id, mode=mode, tasks=tasks, links=links,  # type: ignore[arg-type]
                               stages=[["n1.create", "n2.create"], ["n1.install.a"], ["n2.install.b"]],
                               nodes=[NodeSpec(id="n1", hardwaretype="h", imagetype="i", services=["a"])]))
    return job


def job_step(job: Job, step: str, pick: Any) -> None:
    """One command; `pick` chooses among candidates (a hypothesis `data.draw` of an index)."""
    queued = sorted(t for t, s in job.task_state.items() if s == "queued")
    if step == "queue" and job.ready():
        job.queue(pick(job.ready()))
    elif step == "complete" and queued:
        t = pick(queued)
        job.complete(TaskCompleted(job_id=str(job.id), task_id=t, attempt=job.attempts[t], result={"k": t}))
    elif step == "fail" and queued:
        t = pick(queued)
        job.fail_attempt(TaskAttemptFailed(job_id=str(job.id), task_id=t, attempt=job.attempts[t], error="boom"))
    elif step == "pause":
        job.pause("someone", pick(["r1", "r2", None]))
    elif step == "resume":
        job.resume("someone", pick(["r3", None]))
    elif step == "cancel":
        job.cancel("someone")
    elif step == "retry":
        job.retry("someone")
    elif step == "rollback" and job.stopping and job.in_flight == 0:
        job.plan_rollback("stopped", SERVICES)
    elif step == "finish_rollback":
        job.finish_rollback()
    elif step == "succeed" and job.all_done:
        job.succeed()
    elif step == "needs_attention" and job.state == "rolling_back":
        job.needs_attention("rollback failed")
    elif step == "cleanup":
        failed = sorted(t for t, s in job.task_state.items() if s == "failed" and t.endswith(".create"))
        if failed:
            job.queue_cleanup(pick(failed))


def new_cluster(n: int) -> Cluster:
    return Cluster(ClusterRequested(tenant="acme", cluster_id=str(job_uuid("acme", f"cluster-{n}")), name=f"c{n}",
                                    template="t", provider="p", job_id="j0"))


def cluster_step(cluster: Cluster, step: str, pick: Any) -> None:
    node = pick(["n1", "n2", "n3"])
    if step == "layout":
        ids = pick([["n1"], ["n1", "n2"], ["n2", "n3"], []])
        cluster.change_layout("j1", [NodeSpec(id=i, hardwaretype="h", imagetype="i", services=["a"]) for i in ids])
    elif step == "config":
        cluster.change_config("j1", {"k": pick([1, 2, 3])})
    elif step == "results":
        cluster.record_results(node, f"{node}.install.a", {"port": pick([1, 2])}, pick([{}, {"access": "10.0.0.1"}]),
                               pick(["", "h1"]))
    elif step == "status":
        cluster.set_status(pick(["active", "failed", "deleted"]), pick(["j1", "j2"]), pick(["", "why"]))


CLUSTER_STEPS = ("layout", "config", "results", "status")


def record(aggregate: Any, first_seq: int, subject: str) -> list[Recorded]:
    """The aggregate's new events as the log would hold them."""
    return [
        Recorded(first_seq + i, subject, a.time or START, a.event, a.aggregate_id, a.version)
        for i, a in enumerate(pending_appends(aggregate))
    ]


@st.composite
def job_histories(draw: Any, max_steps: int = 60) -> tuple[Job, list[Recorded]]:
    """A job after random commands, and the history that records them."""
    job = new_job(draw(st.integers(0, 10**6)), draw(st.sampled_from(["eager", "staged"])), draw(st.integers(1, 3)))

    def pick(options: list[Any]) -> Any:
        return options[draw(st.integers(0, len(options) - 1))]

    for step in draw(st.lists(st.sampled_from(JOB_STEPS), min_size=max_steps // 3, max_size=max_steps)):
        job_step(job, step, pick)
    if draw(st.booleans()) and draw(st.booleans()):
        job.fail("gave up")
    return job, record(job, 1, f"muster.evt.acme.job.{job.id}")


@st.composite
def cluster_histories(draw: Any, max_steps: int = 20) -> tuple[Cluster, list[Recorded]]:
    cluster = new_cluster(draw(st.integers(0, 10**6)))

    def pick(options: list[Any]) -> Any:
        return options[draw(st.integers(0, len(options) - 1))]

    for step in draw(st.lists(st.sampled_from(CLUSTER_STEPS), min_size=max_steps // 3, max_size=max_steps)):
        cluster_step(cluster, step, pick)
    return cluster, record(cluster, 1, f"muster.evt.acme.cluster.{cluster.id}")


def state(aggregate: Any) -> dict[str, Any]:
    """Everything an aggregate holds, but caches derived from it (a Job's parsed plans and its
    dispatch index, rebuilt from the rest when needed)."""
    return {k: v for k, v in vars(aggregate).items() if k not in ("_plans", "_dispatch", "_pending_events")}
