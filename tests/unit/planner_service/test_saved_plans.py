"""Apply exactly what was planned (#17.3): a dry run saves its plan, bound to the cluster's
version and the catalog's; `ApplyPlan` runs that plan task for task, or is refused saying what
moved. `if_version` refuses any request on a cluster that is not at the version a script saw."""

from __future__ import annotations

from typing import Any

from planner_harness import SIMPLE, Harness, demo_catalog

from contracts.catalog import Service
from contracts.commands import (
    Accepted,
    ApplyPlan,
    ConfigureCluster,
    CreateCluster,
    DeleteCluster,
    DryRun,
    ExpandCluster,
    Rejected,
    RestartServices,
    RollbackCluster,
)


async def _dry(h: Harness, command: Any) -> DryRun:
    reply = await h.send(command)
    assert isinstance(reply, DryRun), reply
    assert reply.plan_id
    return reply


def _apply(shown: DryRun, requested_by: str = "anonymous") -> ApplyPlan:
    assert shown.plan_id is not None
    return ApplyPlan(plan_id=shown.plan_id, requested_by=requested_by)


def _planned_tasks(h: Harness, job_id: str) -> list[str]:
    [planned] = h.events(job_id, "JobPlanned")
    return [t.id for t in planned.tasks]


async def test_applying_a_saved_plan_runs_exactly_the_plan_shown() -> None:
    h = Harness()
    cid = await h.cluster_of(3)
    shown = await _dry(h, RestartServices(cluster_id=cid, services=["zookeeper-server"], dry_run=True))
    assert shown.cluster_version == h.cluster(cid).version and shown.catalog_version
    reply = await h.send(_apply(shown, requested_by="ops"))
    assert isinstance(reply, Accepted) and reply.cluster_id == cid
    await h.settle()
    job = h.job(reply.job_id)
    assert job.state == "succeeded" and job.operation == "restart"
    assert _planned_tasks(h, reply.job_id) == [t["id"] for t in shown.plan["tasks"]]
    [requested] = h.events(reply.job_id, "JobRequested")
    assert requested.plan_id == shown.plan_id and requested.requested_by == "ops"
    # Applying it again is the same job, not a second one.
    again = await h.send(_apply(shown))
    assert isinstance(again, Accepted) and again.duplicate and again.job_id == reply.job_id


async def test_a_layout_change_applies_the_saved_layout_without_asking_the_solver_again() -> None:
    h = Harness()
    cid = await h.cluster_of(3)
    shown = await _dry(h, ExpandCluster(cluster_id=cid, nodes=5, dry_run=True))
    h.solving = False  # a solver asked now would never answer
    reply = await h.send(_apply(shown))
    assert isinstance(reply, Accepted), reply
    await h.settle()
    assert h.job(reply.job_id).state == "succeeded" and len(h.cluster(cid).nodes) == 5
    assert _planned_tasks(h, reply.job_id) == [t["id"] for t in shown.plan["tasks"]]
    assert h.log.types(f"muster.evt.default.layout.{reply.job_id}") == []


async def test_a_create_plan_applies_too() -> None:
    h = Harness()
    shown = await _dry(h, CreateCluster(name="planned", template="hadoop-small", nodes=4, dry_run=True))
    assert shown.cluster_version is None
    h.solving = False
    reply = await h.send(_apply(shown))
    assert isinstance(reply, Accepted), reply
    await h.settle()
    assert h.job(reply.job_id).state == "succeeded" and len(h.cluster(reply.cluster_id).nodes) == 4
    assert _planned_tasks(h, reply.job_id) == [t["id"] for t in shown.plan["tasks"]]


async def test_a_plan_is_refused_once_the_cluster_changed_and_nothing_is_recorded() -> None:
    h = Harness()
    cid = await h.cluster_of(3)
    shown = await _dry(h, ConfigureCluster(cluster_id=cid, config={"a": 1}, dry_run=True))
    await h.ok(ConfigureCluster(cluster_id=cid, config={"b": 2}))  # someone else changed it meanwhile
    before = len(h.log.records)
    reply = await h.send(_apply(shown))
    assert isinstance(reply, Rejected)
    assert reply.reason.startswith(f"plan {shown.plan_id} was made on cluster {cid!r} at version {shown.cluster_version}; "
                                   f"it is at version {h.cluster(cid).version} now: make a new plan")
    assert len(h.log.records) == before


async def test_a_plan_is_refused_once_the_catalog_changed() -> None:
    h = Harness(catalog=demo_catalog(extra=SIMPLE))
    cid = await h.cluster_of(3)
    shown = await _dry(h, RestartServices(cluster_id=cid, dry_run=True))
    catalog = h.catalogs.by_tenant["default"]
    catalog.services["extra"] = Service.model_validate({**catalog.services["extra"].model_dump(), "description": "changed"})
    reply = await h.send(_apply(shown))
    assert isinstance(reply, Rejected) and "the catalog changed since" in reply.reason


async def test_a_rollback_plan_and_a_delete_plan_apply() -> None:
    h = Harness()
    cid = await h.cluster_of(3)
    expand = await h.ok(ExpandCluster(cluster_id=cid, nodes=4))
    shown = await _dry(h, RollbackCluster(cluster_id=cid, to_job=expand.job_id, dry_run=True))
    back = await h.send(_apply(shown))
    assert isinstance(back, Accepted), back
    await h.settle()
    assert h.job(back.job_id).state == "succeeded" and len(h.cluster(cid).nodes) == 3
    gone = await _dry(h, DeleteCluster(cluster_id=cid, dry_run=True))
    reply = await h.send(_apply(gone))
    assert isinstance(reply, Accepted)
    await h.settle()
    assert h.cluster(cid).status == "deleted"


async def test_the_same_dry_run_saves_one_plan() -> None:
    h = Harness()
    cid = await h.cluster_of(2)
    first = await _dry(h, ConfigureCluster(cluster_id=cid, config={"a": 1}, request_id="cfg-1", dry_run=True))
    second = await _dry(h, ConfigureCluster(cluster_id=cid, config={"a": 1}, request_id="cfg-1", dry_run=True))
    assert first.plan_id == second.plan_id
    assert h.log.types(f"muster.evt.default.plan.{first.plan_id}") == ["PlanSaved"]


async def test_an_unknown_plan_is_refused(h: Harness) -> None:
    reply = await h.send(ApplyPlan(plan_id="no-such-plan"))
    assert isinstance(reply, Rejected) and reply.reason.startswith("unknown plan 'no-such-plan'")


async def test_if_version_is_an_optimistic_check_for_scripts() -> None:
    h = Harness()
    cid = await h.cluster_of(2)
    seen = h.cluster(cid).version
    stale = await h.send(ConfigureCluster(cluster_id=cid, config={"a": 1}, if_version=seen - 1))
    assert isinstance(stale, Rejected)
    assert stale.reason == f"cluster {cid!r} is at version {seen}, not {seen - 1} (if_version): it changed since you looked"
    await h.ok(ConfigureCluster(cluster_id=cid, config={"a": 1}, if_version=seen))
    late = await h.send(DeleteCluster(cluster_id=cid, if_version=seen))
    assert isinstance(late, Rejected) and "changed since you looked" in late.reason
