"""What a repair's plan does once it ran (`observed.fix_plan`): any drift, over a catalog
where needs reach two services away, leaves every (node, service) in its desired state; no task
starts one meant to be stopped, and none stops one the drift does not name (the drift says
what the repair does: decision 41, docs/planner.md "Observed state"; decision 53)."""

from __future__ import annotations

from hypothesis import given, note, settings
from hypothesis import strategies as st
from planner_support import catalog, node, ran, svc

from contracts.catalog import Action
from contracts.layout import NodeSpec
from muster.readmodel.observed import as_repaired, drift
from services.planner.domain.observed import fix_plan

A = Action
# a needs c running, c needs b
DEEP = catalog(svc("base", ["install", "configure"]), svc("b", install=["base"]), svc("c", install=["b"], runtime=["b"]),
               svc("a", install=["b"], runtime=["c"]))
NODES = ("n1", "n2", "n3")
LAYOUT = st.dictionaries(st.sampled_from(NODES), st.sampled_from([("b",), ("a", "b"), ("c",), ("b", "c"), ("a", "c"),
                                                                  ("a", "b", "c"), ("a",)]), min_size=1)
SEEN = st.sampled_from([None, "as meant", "running", "stopped", "failed", "unknown", "outdated", "stale"])
"""A pair's last `status`: none, its desired state, any state, or running an older config."""

Pair = tuple[str, str]


def _nodes(layout: dict[str, tuple[str, ...]]) -> list[NodeSpec]:
    return [node(n, "base", *layout[n]) for n in sorted(layout)]


def _fixes(layout: dict[str, tuple[str, ...]], stopped: set[Pair], seen: dict[Pair, str | None]) -> dict[Pair, str]:
    """Each drifted pair's repair, as the planner's `repairs` gives it from the cluster's drift."""
    meant = {p: "stopped" if p in stopped else "running" for p in seen}
    older = {p for p, o in seen.items() if o in ("outdated", "stale")}
    observed = {p: meant[p] if o == "as meant" or p in older else str(o) for p, o in seen.items()
                if o is not None and o not in ("outdated", "stale") or p in older}
    found = drift({n: list(ss) for n, ss in layout.items()}, stopped, observed, older,
                  {p for p in older if seen[p] == "stale"})
    return {(d.node, d.service): d.repair for d in as_repaired(found, DEEP, {s for ss in layout.values() for s in ss})}


@settings(max_examples=1000, deadline=None)
@given(LAYOUT, st.data())
def test_a_repair_leaves_every_service_as_meant_and_touches_only_what_drifted(
        layout: dict[str, tuple[str, ...]], data: st.DataObject) -> None:
    """Any pairs meant to be stopped, any last states: run in plan order (an unknown pair's
    real state either), every pair ends running or stopped as meant; no task starts a pair meant
    to be stopped, and no task stops a pair whose repair is not a stop or a restart. Before
    session 36 each phase planned its operation's closure on the pairs' nodes: the restart of
    an outdated b restarted c on its node, c the user had stopped (started, and meant to run
    from then on); a stop stopped what needs it there; a start started what it needs there;
    a reconnect started a pair meant to be stopped."""
    pairs = sorted((n, s) for n, ss in layout.items() for s in ss)
    stopped = data.draw(st.sets(st.sampled_from(pairs)))
    seen = {p: data.draw(SEEN) for p in pairs}
    seen = {p: None if o in ("outdated", "stale") and p in stopped else o for p, o in seen.items()}  # (only a running pair runs an older config)
    fixes = _fixes(layout, stopped, seen)
    if not fixes:
        return  # refused: nothing to repair
    plan = fix_plan(DEEP, _nodes(layout), fixes, stopped)
    note(f"stopped {sorted(stopped)} fixes {fixes} plan {[t.id for t in plan.tasks]}")
    meant = {p: "stopped" if p in stopped else "running" for p in pairs}
    state = {p: data.draw(st.sampled_from(["running", "stopped"])) if seen[p] == "unknown"
             else "running" if seen[p] in ("outdated", "stale") else meant[p] if seen[p] in (None, "as meant") else str(seen[p])
             for p in pairs}
    ran(plan, set(plan.index), state)
    assert {p: s for p, s in state.items() if s != meant[p]} == {}
    assert [t.id for t in plan.tasks if t.action is A.START and (t.node, t.service) in stopped] == []
    assert [t.id for t in plan.tasks if t.action is A.STOP and fixes.get((t.node, str(t.service))) not in
            ("stop", "restart", "reconfigure", "reconnect")] == []


def test_the_restart_of_an_outdated_service_does_not_start_what_needs_it_kept_stopped() -> None:
    """`stop c --nodes n1` (c needs b), then `configure` without a restart: b on n1 outdated.
    The repair restarted b with what needs it on n1 (the `restart` closure), c too: started,
    and meant to run from then on."""
    plan = fix_plan(DEEP, [node("n1", "base", "b", "c")], {("n1", "b"): "restart"}, {("n1", "c")})
    assert sorted(t.id for t in plan.tasks) == ["p1.n1.start.b", "p1.n1.stop.b"]


def test_a_reconnect_stops_again_a_service_meant_to_be_stopped() -> None:
    """n2's ssh did not answer, b there meant to be stopped: the reconnect confirmed n2 and
    started b (a start leaves a running one as it is, and makes a stopped one run)."""
    plan = fix_plan(DEEP, [node("n1", "base", "b"), node("n2", "base", "a", "b")], {("n2", "b"): "reconnect"}, {("n2", "b")})
    assert [t.id for t in plan.tasks] == ["p1.n2.confirm", "p2.n2.stop.b"]
