"""Rollback of phased plans (repair, rollback --to-job, configure-restart and upgrade keeping
services stopped): one action on one service and node in two phases is undone once."""

from __future__ import annotations

from typing import Any

from hypothesis import assume, given, note, settings
from hypothesis import strategies as st
from planner_support import base_b_a, catalog, node, ran, run_until, svc

from contracts.catalog import Action
from contracts.layout import NodeSpec
from services.planner.domain.errors import PlanError
from services.planner.domain.model import Plan
from services.planner.domain.observed import fix_plan
from services.planner.domain.planning import keep_stopped
from services.planner.domain.restore import restore_plan
from services.planner.domain.rollback import rollback_plan
from services.planner.domain.rolling import batched

NODES = ("n1", "n2", "n3")
# a node's services: b alone, or b and a (a needs b installed and running on it)
LAYOUT = st.dictionaries(st.sampled_from(NODES), st.sampled_from([("b",), ("a", "b")]), min_size=1)
CAT = base_b_a()
RUN_KINDS = ("reconnect", "reinstall", "start", "restart", "reconfigure")  # a pair meant to run: its repairs


def _nodes(layout: dict[str, tuple[str, ...]]) -> list[NodeSpec]:
    return [node(n, "base", *layout[n]) for n in sorted(layout)]


def _pairs(layout: dict[str, tuple[str, ...]]) -> list[tuple[str, str]]:
    return sorted((n, s) for n, ss in layout.items() for s in ss)


@st.composite
def phased(draw: st.DrawFn) -> tuple[str, dict[str, tuple[str, ...]], set[tuple[str, str]], dict[str, Any]]:
    """A job of any operation that makes phases (its kind, the layout before it, the pairs
    meant to be stopped then, and what it was asked)."""
    layout = draw(LAYOUT)
    pairs = _pairs(layout)
    stopped = draw(st.sets(st.sampled_from(pairs)))
    kind = draw(st.sampled_from(["keep_stopped", "restore", "repair"]))
    if kind == "keep_stopped":
        op = draw(st.sampled_from(["configure-restart", "upgrade"]))
        names = ["b"] if op == "upgrade" else draw(st.sampled_from([None, ["a"], ["b"]]))
        return kind, layout, stopped, {"op": op, "names": names}
    if kind == "restore":
        target = draw(LAYOUT)
        then = draw(st.sets(st.sampled_from(_pairs(target))))
        return kind, layout, stopped, {"target": target, "then": then, "config": draw(st.booleans())}
    # each pair's repair as its drift gives it: `stop` for one meant to be stopped, `reconnect`
    # and `reinstall` for any, the others for one meant to run
    fixes = {p: draw(st.sampled_from(("reconnect", "reinstall", "stop") if p in stopped else RUN_KINDS))
             for p in draw(st.sets(st.sampled_from(pairs), min_size=1))}
    return kind, layout, stopped, {"fixes": fixes, "rolling": draw(st.sampled_from([None, 1, 2]))}


def _plan(kind: str, nodes: list[NodeSpec], stopped: set[tuple[str, str]], asked: dict[str, Any]) -> Plan:
    if kind == "keep_stopped":
        return keep_stopped(CAT, nodes, asked["op"], asked["names"], None, stopped)
    if kind == "restore":
        return restore_plan(CAT, nodes, _nodes(asked["target"]), asked["config"], stopped, asked["then"]).plan
    plan = fix_plan(CAT, nodes, asked["fixes"], stopped)
    return plan if asked["rolling"] is None else batched(plan, asked["rolling"]).plan  # a node's phases in its batch


@settings(max_examples=400, deadline=None)
@given(phased(), st.integers(0, 80))
def test_the_rollback_of_any_phased_plan_is_a_dag_that_puts_each_service_back(
        case: tuple[str, dict[str, tuple[str, ...]], set[tuple[str, str]], dict[str, Any]], cut: int) -> None:
    """Wherever the job failed: the rollback plan assembles (a task undone twice made a cycle,
    a PlanError), names each task once, and once run leaves each service as it was before the
    job (those it added absent or on a machine deleted again)."""
    kind, layout, stopped, asked = case
    nodes = _nodes(layout)
    try:
        plan = _plan(kind, nodes, stopped, asked)
    except PlanError:
        assume(False)
        raise
    done = run_until(plan, cut)
    note(f"{case}; done: {sorted(done, key=plan.index.__getitem__)}")
    had = {(n.id, s) for n in nodes for s in n.services}
    back = rollback_plan(plan, done, CAT, had=had, meant_stopped=stopped)
    ids = [t.id for t in back.tasks]
    assert len(ids) == len(set(ids))
    before = {p: "stopped" if p in stopped else "running" for p in had if p[1] != "base"}
    state = dict(before)
    ran(plan, done, state)
    ran(back, set(back.index), state)
    assert {k: v for k, v in state.items() if k in before and v != "gone"} == {k: v for k, v in before.items() if state[k] != "gone"}
    assert all(v in ("absent", "gone") for k, v in state.items() if k not in before)
    # every completed install of a service the cluster did not have is undone by a removal (or
    # the machine's delete)
    for t in (plan.by_id[i] for i in done):
        if t.action is Action.INSTALL and (t.node, t.service) not in had:
            assert {f"{t.node}.remove.{t.service}", f"{t.node}.delete"} & set(ids)


def test_a_service_added_and_restarted_by_a_rollback_to_a_job_is_undone_once() -> None:
    """A rollback --to-job that adds `s` to a node (phase 1: install, configure, start) and, the
    config differing, configures and restarts it (phase 2), failed at its last start: its
    rollback undid `start s` of both phases as one task `n1.stop.s`, ordered before and after
    `n1.start.s` (a PlanError: dependency cycle). Now: s started again, stopped, removed."""
    cat = catalog(svc("s", ["install", "configure", "start", "stop", "remove"]),
                  svc("r", ["install", "configure", "start", "stop", "remove"]))
    plan = restore_plan(cat, [node("n1", "r")], [node("n1", "r", "s")], config_changed=True).plan
    assert {"p1.n1.start.s", "p2.n1.start.s"} <= set(plan.index)
    back = rollback_plan(plan, set(plan.index) - {"p2.n1.start.r"}, cat, had={("n1", "r")}, meant_stopped=set())
    assert [t.id for t in back.tasks if t.service == "s"] == ["n1.start.s", "n1.stop.s", "n1.remove.s"]
    assert {("n1.start.s", "n1.stop.s"), ("n1.stop.s", "n1.remove.s"), ("n1.configure.r", "n1.start.r")} <= set(back.edges)


def test_a_repair_that_started_a_service_then_restarted_it_is_undone_once() -> None:
    """n1's `a` in an unknown state, its `b` on an old config: the repair confirms n1 and starts
    a, b's start thrown in (phase 1), then restarts b (phase 2). Failed after b's stop, or at
    its last start, its rollback starts b once (before session 36 the restart stopped and
    started a around b, and its rollback had taken the phase 1 start for one of a service the
    job had stopped, and a cycle)."""
    plan = fix_plan(CAT, [node("n1", "base", "a", "b")], {("n1", "b"): "restart", ("n1", "a"): "reconnect"})
    assert [t.id for t in plan.tasks] == ["p1.n1.confirm", "p1.n1.start.b", "p1.n1.start.a", "p2.n1.stop.b", "p2.n1.start.b"]
    had = {("n1", "base"), ("n1", "a"), ("n1", "b")}
    early = {"p1.n1.confirm", "p1.n1.start.b", "p1.n1.start.a", "p2.n1.stop.b"}
    assert [t.id for t in rollback_plan(plan, early, CAT, had=had, meant_stopped=set()).tasks] == ["n1.start.b"]
    back = rollback_plan(plan, set(plan.index) - {"p2.n1.start.b"}, CAT, had=had, meant_stopped=set())
    assert [t.id for t in back.tasks] == ["n1.start.b"]


def test_a_rollback_to_a_job_starts_nothing_on_the_nodes_it_deleted() -> None:
    """Back to a cluster of n2 alone from one of n1 alone: phase 1 deletes n1, phase 2 makes n2,
    whose `a` needs `b` running; the expand was planned with n1 still there and threw in the
    start of b on n1, a machine deleted by then (the start fails, the job with it)."""
    plan = restore_plan(CAT, [node("n1", "base", "b")], [node("n2", "base", "a", "b")], False).plan
    assert "p1.n1.delete" in plan.index
    assert not [t.id for t in plan.tasks if t.node == "n1" and t.action is not Action.DELETE and t.id.startswith("p2.")]
    assert not plan.thrown_in


def test_a_rolling_repair_keeps_a_nodes_phases_in_order() -> None:
    """n2's `a` in an unknown state, its `b` meant to be stopped and running: the repair confirms
    n2 and starts a (phase 1), starts a on n1 (phase 2, n1's alone), then stops b on n2 (phase
    3). Rolling, a batch kept only the links within it: the barriers went through phase 2,
    which has nothing on n2, and n2's phases ran in no order."""
    nodes = [node(n, "base", "a", "b") for n in ("n1", "n2")]
    fixes = {("n2", "a"): "reconnect", ("n1", "a"): "start", ("n2", "b"): "stop"}
    plan = batched(fix_plan(CAT, nodes, fixes, {("n2", "b")}), 1).plan
    assert not [t.id for t in plan.tasks if t.node == "n2" and t.id.startswith("p2.")]
    assert {"p1.n2.confirm", "p1.n2.start.a"} <= _all_before(plan, "p3.n2.stop.b")


def _all_before(plan: Plan, task: str) -> set[str]:
    found, todo = set(), [task]
    while todo:
        for p in plan.predecessors(todo.pop()):
            if p not in found:
                found.add(p)
                todo.append(p)
    return found
