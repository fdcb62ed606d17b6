"""The order a rollback keeps: what the forward plan did in an order (transitively) is undone in
the reverse order, for every operation, rolling or not, phased or not, and wherever the job
stopped, a rolling change's nodes written off within its tolerance included (docs/planner.md,
"Rollback"; decision 51)."""

from __future__ import annotations

import random
from collections.abc import Collection
from typing import Any

from hypothesis import assume, given, note, settings
from hypothesis import strategies as st
from planner_support import base_b_a, catalog, node, svc

from contracts.catalog import Action
from contracts.layout import NodeSpec
from services.planner.domain.errors import PlanError
from services.planner.domain.model import Plan, PlannedTask, phase_of
from services.planner.domain.observed import fix_plan
from services.planner.domain.plan import build_plan
from services.planner.domain.planning import keep_stopped
from services.planner.domain.restore import restore_plan
from services.planner.domain.rollback import inverses, rollback_plan
from services.planner.domain.rolling import batch_of, batched

A = Action
# a needs c running, c needs b: a path between two nodes' tasks may go through a third node's
CAT = catalog(svc("base", ["install", "configure"]), svc("b", install=["base"]), svc("c", install=["b"], runtime=["b"]),
              svc("a", install=["b"], runtime=["c"]))
NODES = ("n1", "n2", "n3", "n4")
SERVICES = st.sampled_from([("b",), ("a", "b"), ("c",), ("b", "c"), ("a", "c"), ("a", "b", "c"), ("a",)])
LAYOUT = st.dictionaries(st.sampled_from(NODES), SERVICES, min_size=1)
ROLLING = ("configure", "configure-restart", "restart", "upgrade", "repair")
PLAIN = ("create", "expand", "shrink", "add-services", "remove-services", "start", "stop", "restore")
RUN_KINDS = ("reconnect", "reinstall", "start", "restart", "reconfigure")

Pair = tuple[str, str]


def _nodes(layout: dict[str, tuple[str, ...]]) -> list[NodeSpec]:
    return [node(n, "base", *layout[n]) for n in sorted(layout)]


def _pairs(layout: dict[str, tuple[str, ...]]) -> list[Pair]:
    return sorted((n, s) for n, ss in layout.items() for s in ("base", *ss))


@st.composite
def jobs(draw: st.DrawFn, rolling: bool = False) -> dict[str, Any]:
    """A job's plan (batched when rolling), the cluster's pairs before it and those of them
    meant to be stopped; with `rolling`, a rolling change's."""
    try:
        return _job(draw, rolling)
    except PlanError:  # nothing to repair, a service without what it needs
        assume(False)
        raise


def _job(draw: st.DrawFn, rolling: bool) -> dict[str, Any]:
    layout = draw(LAYOUT)
    nodes, pairs = _nodes(layout), _pairs(layout)
    present = sorted({s for ss in layout.values() for s in ss})
    stopped = draw(st.sets(st.sampled_from([p for p in pairs if p[1] != "base"])))
    op = draw(st.sampled_from(ROLLING if rolling else ROLLING + PLAIN))
    some = st.lists(st.sampled_from(present), min_size=1, unique=True)
    chosen = draw(st.lists(st.sampled_from(sorted(layout)), min_size=1, unique=True))
    had: Collection[Pair] = pairs
    if op in ("configure", "restart", "start", "stop"):
        plan = build_plan(CAT, nodes, op, services=draw(st.one_of(st.none(), some)), stopped=stopped)  # as `plan_direct`
    elif op in ("configure-restart", "upgrade"):
        names = [draw(st.sampled_from(present))] if op == "upgrade" else draw(st.one_of(st.none(), some))
        plan = keep_stopped(CAT, nodes, op, names, None, stopped)
    elif op == "repair":
        fixes = {p: draw(st.sampled_from(("reconnect", "reinstall", "stop") if p in stopped else RUN_KINDS))
                 for p in draw(st.sets(st.sampled_from([p for p in pairs if p[1] != "base"]), min_size=1))}
        plan = fix_plan(CAT, nodes, fixes, stopped)
    elif op == "restore":
        target = draw(LAYOUT)
        then = draw(st.sets(st.sampled_from([p for p in _pairs(target) if p[1] != "base"])))
        plan = restore_plan(CAT, nodes, _nodes(target), draw(st.booleans()), stopped, then).plan
    elif op in ("create", "expand"):
        plan = build_plan(CAT, nodes, op, node_ids=None if op == "create" else chosen, stopped=stopped)
        had = [] if op == "create" else [p for p in pairs if p[0] not in chosen]
    elif op == "shrink":
        plan = build_plan(CAT, nodes, op, node_ids=chosen)
    else:  # add-services, remove-services
        names = draw(some)
        plan = build_plan(CAT, nodes, op, services=names, node_ids=chosen, stopped=stopped)
        if op == "add-services":
            had = [p for p in pairs if not (p[0] in chosen and p[1] in names)]
    batches: list[list[str]] = []
    if op in ROLLING:
        sizes: list[int | str | None] = [1, 2, "50%"] if rolling else [None, 1, 2, "50%"]
        size = draw(st.sampled_from(sizes))
        if size is not None:
            done = batched(plan, size)
            plan, batches = done.plan, done.batches
    return {"op": op, "layout": layout, "plan": plan, "batches": batches, "had": set(had),
            "stopped": stopped & set(had)}


def _run(plan: Plan, batches: list[list[str]], cut: int, rng: random.Random, failing: float) -> set[str]:
    """The tasks a run completed in its first `cut` picks among the ready ones; a pick that
    fails (a `failing` share of them) writes its task off with every task of its batch that
    needed it (`Job.written_off`), and a later batch goes on: only a rolling change tolerates
    it (another job stops at its first failure)."""
    which = batch_of(batches)
    settled: set[str] = set()
    done: set[str] = set()
    for _ in range(cut):
        ready = [t.id for t in plan.tasks if t.id not in settled and all(p in settled for p in plan.predecessors(t.id))]
        if not ready:
            break
        task = rng.choice(ready)
        if not (batches and rng.random() < failing):
            done.add(task)
            settled.add(task)
            continue
        stack = [task]
        while stack:
            t = stack.pop()
            if t not in settled:
                settled.add(t)
                stack.extend(s for s in plan.successors(t) if which[plan.by_id[s].node] == which[plan.by_id[t].node])
    return done


def _note(job: dict[str, Any], done: set[str]) -> None:
    plan = job["plan"]
    note(f"{job['op']} {job['layout']} batches {job['batches']} had {sorted(job['had'])} stopped {sorted(job['stopped'])}")
    note(f"plan {plan.to_compact_json()}")
    note(f"done {sorted(done, key=plan.index.__getitem__)}")


def _reach(plan: Plan) -> dict[str, set[str]]:
    """Each task's successors, transitively."""
    reach: dict[str, set[str]] = {}
    for t in reversed(plan.tasks):  # plan order is topological
        found: set[str] = set()
        for s in plan.successors(t.id):
            found |= {s} | reach[s]
        reach[t.id] = found
    return reach


def _config_first(plan: Plan, task: PlannedTask, undo: dict[str, tuple[PlannedTask, ...]]) -> str | None:
    """The stop a configure came right before (configure-restart), both undone: the exception
    to the reverse order (the old config is back before that stop is undone, the service
    started again; what came after the stop need not wait for it)."""
    if task.action is not A.CONFIGURE or task.id not in undo or undo[task.id][0].action is not A.CONFIGURE:
        return None
    for link in plan.out_links[task.id]:
        sources, targets = plan.links[link]
        there = plan.by_id[targets[0]]
        if len(sources) == len(targets) == 1 and (there.node, there.service, there.action) == (task.node, task.service, A.STOP):
            return there.id if there.id in undo else None
    return None


def unordered(plan: Plan, done: set[str], had: Collection[Pair], stopped: Collection[Pair]) -> list[tuple[str, str]]:
    """Pairs of completed tasks u before v in `plan` whose inverses the rollback does not
    order the other way round: each task undoing v before each undoing u. Not asked of: two
    tasks one inverse covers (a node's delete, a removal), a created node's delete (last of
    all: ordered both ways, a cycle), and a configure put back before its stop is undone."""
    undo = inverses(plan, done, CAT, had, stopped)
    back = rollback_plan(plan, done, CAT, had, stopped)
    ahead, behind = _reach(plan), _reach(back)
    wrong = []
    for u, first in undo.items():
        stop = _config_first(plan, plan.by_id[u], undo)
        # what the configure comes before only through its stop
        through = set() if stop is None else {stop} | ahead[stop] - set().union(
            *({s} | ahead[s] for s in plan.successors(u) if s != stop))
        for v in ahead[u] & undo.keys() - through:
            second = undo[v]
            if {t.id for t in first} & {t.id for t in second} or any(t.action is A.DELETE for t in second):
                continue
            if not all(y.id in behind[x.id] for x in second for y in first):
                wrong.append((u, v))
    for u, first in undo.items():  # the exception's own order
        stop = _config_first(plan, plan.by_id[u], undo)
        if stop in undo and not all(x.id in behind[first[-1].id] for x in undo[stop]):
            wrong.append((stop, u))
    return wrong


@settings(max_examples=400, deadline=None)
@given(jobs(rolling=True))
def test_a_batch_keeps_the_order_of_its_phases(job: dict[str, Any]) -> None:
    """A rolling change's batch runs a phase of its tasks only once its earlier phases are done,
    on every node of the batch, not only on one node (`chain_phases`): a phase with nothing on
    the batch does not leave the phases around it unordered."""
    plan, batches = job["plan"], job["batches"]
    which, ahead = batch_of(batches), _reach(plan)
    note(f"{job['op']} {job['layout']} {batches}")
    for u in plan.tasks:
        for v in plan.tasks:
            if which[u.node] == which[v.node] and phase_of(u) < phase_of(v):
                assert v.id in ahead[u.id], (u.id, v.id)


@settings(max_examples=400, deadline=None)
@given(jobs(), st.integers(0, 100), st.randoms(use_true_random=False))
def test_a_rollback_undoes_in_the_reverse_order_of_a_run_without_failures(job: dict[str, Any], cut: int, rng: random.Random) -> None:
    """Wherever a job stopped (the tasks done are those of any order the plan allows)."""
    plan = job["plan"]
    done = _run(plan, job["batches"], cut, rng, 0)
    _note(job, done)
    assert unordered(plan, done, job["had"], job["stopped"]) == []


@settings(max_examples=400, deadline=None)
@given(jobs(rolling=True), st.integers(0, 100), st.randoms(use_true_random=False), st.sampled_from([0.1, 0.3]))
def test_a_rollback_undoes_in_the_reverse_order_after_nodes_written_off(job: dict[str, Any], cut: int, rng: random.Random,
                                                                        failing: float) -> None:
    """A rolling change that wrote nodes off (within its tolerance) and then failed past it:
    the batches it did are undone in their reverse order, a batch written off wholly between
    two included (the rollback of the later one went at once with the earlier one's)."""
    plan = job["plan"]
    done = _run(plan, job["batches"], cut, rng, failing)
    _note(job, done)
    assert unordered(plan, done, job["had"], job["stopped"]) == []


# -- the cases the properties found, shrunk ------------------------------------------------------

B_A = base_b_a()


def test_a_rolling_repair_brings_its_batch_up_before_it_stops_anything_there() -> None:
    """n1's state unknown (phase 1: confirm it, start b), n3's b down (phase 2), n2's a meant to
    be stopped (phase 3), two nodes a batch: n1 and n2 together, phase 2 on n3 alone. The batch
    kept only the barriers within it and the links between a node's phases: n2's stop could
    run before n1's start (the repair brings services up before it stops any)."""
    nodes = [node("n1", "base", "a", "b"), node("n2", "base", "a", "b"), node("n3", "base", "b")]
    fixes = {("n1", "b"): "reconnect", ("n2", "a"): "stop", ("n3", "b"): "start"}
    plan = batched(fix_plan(B_A, nodes, fixes), 2).plan
    assert {"p1.n1.start.b", "p2.n3.start.b", "p3.n2.stop.a"} <= set(plan.index)
    assert "p3.n2.stop.a" in _reach(plan)["p1.n1.start.b"]


def test_a_rolling_configure_restart_is_undone_in_reverse_across_a_phase_empty_on_its_batch() -> None:
    """b meant to be stopped on n1 and n2: the configure --restart configured base everywhere
    (phase 1), restarted b on n3 (phase 2), configured b on n1 and n2 (phase 3); two nodes a
    batch: phase 2 had nothing on n1 and n2. Its rollback put n1's base config back with no
    order to n2's b config (put back first now: the last phase is undone before the first).
    Since session 35 the restart of b on n3 is in the first phase, with base's configure (one
    plan over the pairs it restarts, `restore.exact`): no phase is empty on a batch any more
    here (a repair's still may: the first test), and the order across phases still holds."""
    nodes = [node(n, "base", "b") for n in ("n1", "n2", "n3")]
    stopped = {("n1", "b"), ("n2", "b")}
    plan = batched(keep_stopped(B_A, nodes, "configure-restart", None, None, stopped), 2).plan
    assert {"p1.n1.configure.base", "p1.n3.stop.b", "p2.n2.configure.b"} <= set(plan.index)
    had = {(n.id, s) for n in nodes for s in n.services}
    back = rollback_plan(plan, set(plan.index), B_A, had, stopped)
    assert "n1.configure.base" in _reach(back)["n2.configure.b"]


def test_a_rollback_orders_what_came_before_and_after_a_node_it_created() -> None:
    """A rollback --to-job: a off n2 (phase 1), n1 made again (phase 2), the config put back
    with a restart of b everywhere (phase 3). Its own rollback restarted b on n4 at the same
    time as it brought a back on n2: the order went through n1's tasks, all undone by one
    DELETE, which goes last and passed nothing through."""
    now = [node("n2", "base", "a", "b"), node("n4", "base", "b")]
    target = [node("n1", "base", "b"), node("n2", "base", "b"), node("n4", "base", "b")]
    plan = restore_plan(B_A, now, target, True).plan
    assert {"p1.n2.stop.a", "p2.n1.create", "p3.n4.stop.b"} <= set(plan.index)
    back = rollback_plan(plan, set(plan.index), B_A, {(n.id, s) for n in now for s in n.services}, set())
    assert {"n2.install.a", "n2.start.a", "n1.delete"} <= _reach(back)["n4.start.b"]


def test_the_batches_either_side_of_one_written_off_are_undone_one_after_the_other() -> None:
    """A rolling restart of b, a node a batch: n1 restarted, n2's stop failed (written off with
    its start, within the tolerance), n3 stopped, then its start failed (past it). n1's restart
    and n3's stop were undone at once: the order between them went through n2's tasks, none
    done. Now n3's b is started again first."""
    nodes = [node(n, "base", "b") for n in ("n1", "n2", "n3")]
    plan = batched(build_plan(B_A, nodes, "restart"), 1).plan
    had = {(n.id, s) for n in nodes for s in n.services}
    back = rollback_plan(plan, {"n1.stop.b", "n1.start.b", "n3.stop.b"}, B_A, had, set())
    assert [t.id for t in back.tasks] == ["n3.start.b", "n1.stop.b", "n1.start.b"]
    assert {"n1.stop.b", "n1.start.b"} <= _reach(back)["n3.start.b"]
