"""A configure --restart or an upgrade that keeps services the user stopped stopped
(`planning.keep_stopped`): the services it restarts are stopped and started in the order the
dependency rules give a plain restart, whichever nodes each is kept stopped on
(docs/planner.md, "Restoring an earlier state" and "Desired state per node")."""

from __future__ import annotations

from hypothesis import given, note, settings
from hypothesis import strategies as st
from planner_support import catalog, node, svc

from contracts.catalog import Action
from contracts.layout import NodeSpec
from services.planner.domain.model import Plan
from services.planner.domain.planning import keep_stopped

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
