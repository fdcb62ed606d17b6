"""A configure --restart or an upgrade that keeps services the user stopped stopped
(`planning.keep_stopped`): the services it restarts are stopped and started in the order the
dependency rules give a plain restart, whichever nodes each is kept stopped on, and no task
starts one kept stopped, not even for a restarted service that needs it (docs/planner.md,
"Restoring an earlier state" and "Desired state per node"; decision 53)."""

from __future__ import annotations

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st
from planner_support import catalog, node, ran, svc

from contracts.catalog import Action
from contracts.layout import NodeSpec
from services.planner.domain.errors import PlanError
from services.planner.domain.model import Plan
from services.planner.domain.planning import keep_stopped, left_stopped, restart_what_runs

A = Action
# a needs c running, c needs b
CAT = catalog(svc("base", ["install", "configure"]), svc("b", install=["base"]), svc("c", install=["b"], runtime=["b"]),
              svc("a", install=["b"], runtime=["c"]))
NEEDS = {"a": {"c"}, "c": {"b"}, "b": set()}
"""What each needs running, nearest only: the rules order a service's tasks after those of the
nearest it needs (a restart of a and b with c kept stopped orders none of theirs, as a plain one)."""
NODES = ("n1", "n2", "n3")
LAYOUT = st.dictionaries(st.sampled_from(NODES), st.sampled_from([("b",), ("b", "c"), ("a", "c"), ("a", "b", "c"), ("c",)]),
                         min_size=1)


def _nodes(layout: dict[str, tuple[str, ...]]) -> list[NodeSpec]:
    return [node(n, "base", *layout[n]) for n in sorted(layout)]


def _reach(plan: Plan) -> dict[str, set[str]]:
    reach: dict[str, set[str]] = {}
    for t in reversed(plan.tasks):  # plan order is topological
        reach[t.id] = set().union(*({s} | reach[s] for s in plan.successors(t.id)))
    return reach


def _out_of_order(plan: Plan) -> list[tuple[str, str]]:
    """(first, then) pairs of restart tasks the rules order and the plan does not: what needs a
    service stops before it, and starts after it, on every node."""
    reach = _reach(plan)
    wrong = []
    for u in plan.tasks:
        for v in plan.tasks:
            if u.service in NEEDS and v.service in NEEDS.get(u.service, ()) and u.action is v.action in (A.STOP, A.START):
                first, then = (u, v) if u.action is A.STOP else (v, u)
                if then.id not in reach[first.id]:
                    wrong.append((first.id, then.id))
    return wrong


@settings(max_examples=300, deadline=None)
@given(LAYOUT, st.data())
def test_a_configure_restart_keeping_services_stopped_restarts_in_the_order_of_the_rules(
        layout: dict[str, tuple[str, ...]], data: st.DataObject) -> None:
    pairs = sorted((n, s) for n, ss in layout.items() for s in ss)
    stopped = data.draw(st.sets(st.sampled_from(pairs)))
    plan = keep_stopped(CAT, _nodes(layout), "configure-restart", None, None, stopped)
    note(f"{[t.id for t in plan.tasks]}")
    assert _out_of_order(plan) == []


def test_a_service_kept_stopped_on_one_node_is_not_restarted_under_its_dependents_on_another() -> None:
    """c stopped on n2: b was restarted on both nodes in one phase, then c on n1 in the next,
    so b stopped while c ran on n1 (a plain restart stops c first)."""
    nodes = [node("n1", "base", "b", "c"), node("n2", "base", "b", "c")]
    plan = keep_stopped(CAT, nodes, "configure-restart", None, None, {("n2", "c")})
    assert _out_of_order(plan) == []
    assert {t.id for t in plan.tasks if t.action in (A.STOP, A.START)} >= {"p1.n1.stop.c", "p1.n1.stop.b", "p1.n2.stop.b"}


@settings(max_examples=500, deadline=None)
@given(LAYOUT, st.data(), st.sampled_from(["configure-restart", "upgrade"]))
def test_after_the_plan_every_service_kept_stopped_is_stopped_and_every_other_as_asked(
        layout: dict[str, tuple[str, ...]], data: st.DataObject, op: str) -> None:
    """Any pairs kept stopped, any services and nodes asked for: once the plan ran (in plan
    order), every pair meant to be stopped is stopped and no task started it on the way (a start
    thrown in for a restarted service that needs it: before session 36 it was, and the job left
    it running and meant to run); every other pair runs (restarted or left as it was)."""
    pairs = sorted((n, s) for n, ss in layout.items() for s in ss)
    stopped = data.draw(st.sets(st.sampled_from(pairs)))
    names = ["b"] if op == "upgrade" else data.draw(st.sampled_from([None, ["a"], ["b"], ["c"], ["a", "b"]]))
    on = data.draw(st.sampled_from([None, *(sorted(layout)[:k] for k in range(1, len(layout) + 1))]))
    there = {s for n in (on or layout) for s in layout[n]}
    if names is not None and not set(names) <= there:
        return  # refused at admission (`nodes_known`): a named service on none of the nodes
    plan = keep_stopped(CAT, _nodes(layout), op, names, on, stopped)
    note(f"{[t.id for t in plan.tasks]}")
    assert [t.id for t in plan.tasks if t.action is A.START and (t.node, t.service) in stopped] == []
    state = {p: "stopped" if p in stopped else "running" for p in pairs}
    ran(plan, set(plan.index), state)
    assert state == {p: "stopped" if p in stopped else "running" for p in pairs}


def test_a_restarted_service_starts_without_its_need_kept_stopped() -> None:
    """c stopped on n2, a on n1 needs c: the restart threw in c's start on n2 (and the job made
    it meant to run); a starts after c on n1, without c on n2, as it ran."""
    nodes = [node("n1", "base", "a", "c"), node("n2", "base", "b", "c")]
    plan = keep_stopped(CAT, nodes, "configure-restart", None, None, {("n2", "c")})
    assert "p1.n2.start.c" not in plan.index and not plan.thrown_in
    assert "p1.n1.start.a" in plan.successors("p1.n1.start.c")


def test_a_restart_of_some_nodes_throws_in_no_start_of_a_service_kept_stopped_elsewhere() -> None:
    """`configure --restart --nodes n1`, c stopped on n2 only: no pair of n1 is kept stopped, so
    the plain plan, which threw in c's start on n2."""
    nodes = [node("n1", "base", "a", "c"), node("n2", "base", "c")]
    plan = keep_stopped(CAT, nodes, "configure-restart", None, ["n1"], {("n2", "c")})
    assert "n2.start.c" not in plan.index and not plan.thrown_in


@settings(max_examples=500, deadline=None)
@given(LAYOUT, st.data())
def test_a_restart_restarts_what_runs_and_leaves_stopped_what_the_user_stopped(
        layout: dict[str, tuple[str, ...]], data: st.DataObject) -> None:
    """Any pairs stopped, any services and nodes named: after a `restart`, a pair the user
    stopped whose service was not named is stopped and was never started on the way; every pair
    the restart touched runs. Before session 37 a plain `restart` (or the restart of what needs
    a named service) started every service the user had stopped (decision 53)."""
    pairs = sorted((n, s) for n, ss in layout.items() for s in ss)
    stopped = data.draw(st.sets(st.sampled_from(pairs)))
    names = data.draw(st.sampled_from([None, ["a"], ["b"], ["c"], ["a", "b"]]))
    on = data.draw(st.sampled_from([None, *(sorted(layout)[:k] for k in range(1, len(layout) + 1))]))
    there = {s for n in (on or layout) for s in layout[n]}
    if names is not None and not set(names) <= there:
        return  # refused at admission (`nodes_known`)
    kept = {(n, s) for n, s in stopped if s not in (names or ())}
    try:
        plan, left = restart_what_runs(CAT, _nodes(layout), names, on, stopped)
    except PlanError as err:  # everything it would restart is stopped
        assert str(err).startswith("nothing to restart: every service it would restart is stopped")
        return
    note(f"{[t.id for t in plan.tasks]}")
    assert set(left) <= kept
    assert [t.id for t in plan.tasks if t.action is A.START and (t.node, t.service) in kept] == []
    state = {p: "stopped" if p in stopped else "running" for p in pairs}
    ran(plan, set(plan.index), state)
    touched = {(t.node, t.service) for t in plan.tasks if t.service}
    assert {p for p in pairs if state[p] == "stopped"} == stopped - touched and not touched & kept


def test_a_plain_restart_says_what_it_leaves_stopped_and_refuses_when_that_is_all() -> None:
    """c stopped on n2: `restart` restarts b and c on n1, b on n2, and says c stays stopped on n2
    and how to start it; naming c restarts it there too (the explicit way); with everything
    stopped there is nothing to restart."""
    nodes = [node("n1", "base", "b", "c"), node("n2", "base", "b", "c")]
    plan, left = restart_what_runs(CAT, nodes, None, None, {("n2", "c")})
    assert left == [("n2", "c")] and "n2.start.c" not in plan.index and "n2.stop.c" not in plan.index
    assert {"n1.start.c", "n1.start.b", "n2.start.b"} <= set(plan.index)
    assert left_stopped("web", left) == ("the restart leaves stopped what was stopped (`muster cluster stop`): c on n2; "
                                         "`muster cluster start web c` starts them, or name them to the restart")
    named, none_left = restart_what_runs(CAT, nodes, ["c"], None, {("n2", "c")})
    assert none_left == [] and "n2.start.c" in named.index
    with pytest.raises(PlanError, match=r"nothing to restart: every service it would restart is stopped \(b on n1, n2; c on n1, n2\)"):
        restart_what_runs(CAT, nodes, None, None, {(n, s) for n in ("n1", "n2") for s in ("b", "c")})
