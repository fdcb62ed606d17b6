"""The plan that brings a cluster back to an earlier state, phase by phase."""

from __future__ import annotations

import pytest

from contracts.catalog import Catalog, Service
from contracts.commands import RollbackCluster
from contracts.events import JobPlanned, JobRequested
from contracts.layout import NodeSpec
from services.planner.domain.admission import Facts, Refused, restorable
from services.planner.domain.job import Job
from services.planner.domain.restore import restore_plan

ACTIONS = {a: {"type": "x"} for a in ("install", "remove", "configure", "start", "stop")}
SERVICES = {n: Service.model_validate({"name": n, "provisioner": {"actions": ACTIONS}}) for n in ("a", "b")}


def node(i: str, *services: str) -> NodeSpec:
    return NodeSpec(id=i, hardwaretype="h", imagetype="i", services=list(services))


def test_phases_run_one_after_another() -> None:
    current = [node("n1", "a", "b"), node("n3", "a")]
    target = [node("n1", "a"), node("n2", "a")]
    r = restore_plan(SERVICES, current, target, config_changed=True)
    phase = {t.id: int(t.id.split(".")[0][1:]) for t in r.plan.tasks}
    assert sorted(set(phase.values())) == [1, 2, 3, 4]  # remove b, delete n3, create n2, configure
    assert {t.id for t in r.plan.tasks if t.action.value == "delete"} == {"p2.n3.delete"}
    assert any(t.id == "p3.n2.create" for t in r.plan.tasks)
    for before, after in r.plan.edges:
        assert phase[before] <= phase[after]
    first_of = {p: min(i for i, t in enumerate(r.plan.tasks) if phase[t.id] == p) for p in phase.values()}
    last_of = {p: max(i for i, t in enumerate(r.plan.tasks) if phase[t.id] == p) for p in phase.values()}
    assert all(last_of[p] < first_of[p + 1] for p in (1, 2, 3))
    assert [n.id for n in r.interim] == ["n1", "n3", "n2"]


def test_nothing_to_do() -> None:
    nodes = [node("n1", "a")]
    assert restore_plan(SERVICES, nodes, nodes, config_changed=False).plan.tasks == ()


def _phases(r: object) -> list[set[tuple[str, str, str | None]]]:
    """Each phase's tasks as (node, action, service), in phase order."""
    tasks = r.plan.tasks  # type: ignore[attr-defined]
    count = max(int(t.id.split(".")[0][1:]) for t in tasks)
    return [{(t.node, t.action.value, t.service) for t in tasks if t.id.startswith(f"p{n}.")} for n in range(1, count + 1)]


def test_a_config_put_back_restarts_what_runs_and_only_configures_what_is_stopped() -> None:
    nodes = [node("n1", "a", "b")]
    [restart, configure] = _phases(restore_plan(SERVICES, nodes, nodes, config_changed=True, stopped_now={("n1", "b")}, stopped_then={("n1", "b")}))
    assert {("n1", "stop", "a"), ("n1", "configure", "a"), ("n1", "start", "a")} <= restart
    assert not {t for t in restart if t[2] == "b"}
    assert ("n1", "configure", "b") in configure and not {t for t in configure if t[1] in ("start", "stop")}


def test_running_and_stopped_states_are_put_back() -> None:
    nodes = [node("n1", "a", "b")]
    [start] = _phases(restore_plan(SERVICES, nodes, nodes, config_changed=False, stopped_now={("n1", "a")}, stopped_then=set()))
    assert {t for t in start if t[1] == "start"} == {("n1", "start", "a")}
    [stop] = _phases(restore_plan(SERVICES, nodes, nodes, config_changed=False, stopped_now=set(), stopped_then={("n1", "b")}))
    assert {t for t in stop if t[1] == "stop"} == {("n1", "stop", "b")}
    # The same states: nothing to do.
    assert restore_plan(SERVICES, nodes, nodes, config_changed=False, stopped_now={("n1", "b")}, stopped_then={("n1", "b")}).plan.tasks == ()


def test_a_service_meant_to_be_stopped_is_stopped_again_on_a_node_created_again() -> None:
    current = [node("n1", "a")]
    target = [node("n1", "a"), node("n2", "a", "b")]
    *_, stop = _phases(restore_plan(SERVICES, current, target, config_changed=False, stopped_now=set(), stopped_then={("n2", "b")}))
    assert {t for t in stop if t[1] == "stop"} == {("n2", "stop", "b")}


def test_a_job_planned_before_stopped_services_were_recorded_is_no_target() -> None:
    job_id = "6b0d4c3e-1f2a-5b7c-8d9e-0a1b2c3d4e5f"
    old = Job(JobRequested(tenant="t", job_id=job_id, cluster_id="c", operation="configure", request={}, requested_by="ann"))
    old.record_plan(JobPlanned.model_validate({"v": 1, "job_id": job_id, "tasks": [], "links": [], "stages": []}))
    assert old.previous_stopped is None
    facts = Facts("t", "rollback", RollbackCluster(cluster_id="c", to_job=job_id), Catalog(), "j2", source=old)
    with pytest.raises(Refused, match="did not record which services were stopped before it"):
        restorable(facts)
