"""The plan that brings a cluster back to an earlier state, phase by phase."""

from __future__ import annotations

from contracts.catalog import Service
from contracts.layout import NodeSpec
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
