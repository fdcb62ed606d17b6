"""Dispatch decisions: eager readiness with one running task per node, staged barriers, and
the incremental Dispatcher agreeing with both."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from planner_support import catalog, node, svc

from services.planner.domain.plan import Plan, build_plan
from services.planner.domain.scheduling import Dispatcher, ready, ready_eager, ready_staged

CAT = catalog(svc("b"), svc("a", install=["b"], runtime=["b"]))
NODES = [node("n1", "b"), node("n2", "a"), node("n3", "a")]


def create() -> Plan:
    return build_plan(CAT, NODES, "create")


def test_eager_starts_with_the_sources_one_per_node() -> None:
    assert ready_eager(create(), set(), set()) == ("n1.create", "n2.create", "n3.create")


def test_eager_waits_for_every_predecessor() -> None:
    plan = create()
    done = {t.id for t in plan.tasks if t.node != "n1"} - {t.id for t in plan.tasks if t.service == "a"}
    done |= {"n1.create", "n1.confirm", "n1.bootstrap"}
    # install a on n2/n3 needs install b on n1 (install rule), which is not done yet
    assert ready_eager(plan, done, set()) == ("n1.install.b",)
    assert set(ready_eager(plan, done | {"n1.install.b"}, set())) == {"n2.install.a", "n3.install.a", "n1.configure.b"}


def test_eager_keeps_one_running_task_per_node() -> None:
    cat = catalog(svc("x"), svc("y"))
    plan = build_plan(cat, [node("n1", "x", "y")], "create")
    done = {"n1.create", "n1.confirm", "n1.bootstrap"}
    assert ready_eager(plan, done, set()) == ("n1.install.x",)  # install y is ready too, same node
    assert ready_eager(plan, done, {"n1.install.x"}) == ()
    assert ready_eager(plan, done | {"n1.install.x"}, set()) == ("n1.install.y",)


def test_eager_does_not_wait_for_a_slow_node() -> None:
    plan = create()
    done = {"n1.create", "n2.create", "n2.confirm"}
    assert ready_eager(plan, done, {"n3.create"}) == ("n1.confirm", "n2.bootstrap")


def test_staged_waits_for_the_whole_stage() -> None:
    plan = create()
    assert set(ready_staged(plan, set(), set())) == set(plan.stages[0])
    assert ready_staged(plan, {"n1.create", "n2.create"}, {"n3.create"}) == ()
    assert set(ready_staged(plan, {"n1.create", "n2.create", "n3.create"}, set())) == set(plan.stages[1])
    everything = {t.id for t in plan.tasks}
    assert ready_staged(plan, everything, set()) == ready_eager(plan, everything, set()) == ()


def test_failed_tasks_come_back_as_ready() -> None:
    plan = create()
    # n1.create failed: neither done nor running
    assert "n1.create" in ready(plan, set(), {"n2.create"}, "eager")
    assert ready(plan, {"n2.create", "n3.create"}, set(), "staged") == ("n1.create",)


def test_priority_prefers_the_longest_remaining_chain() -> None:
    cat = catalog(svc("short", ["install"]), svc("long", ["install", "configure", "start"]))
    plan = build_plan(cat, [node("n1", "short", "long")], "create")
    assert ready_eager(plan, {"n1.create", "n1.confirm", "n1.bootstrap"}, set()) == ("n1.install.long",)


@st.composite
def plans(draw: st.DrawFn) -> Plan:
    names = [f"s{i}" for i in range(draw(st.integers(1, 5)))]
    services = []
    for i, name in enumerate(names):
        deps = draw(st.lists(st.sampled_from(names[:i]), unique=True)) if i else []
        kind = draw(st.sampled_from(["install", "runtime"]))
        acts = draw(st.lists(st.sampled_from(["install", "configure", "initialize", "start"]), min_size=1, unique=True))
        services.append(svc(name, acts, **{kind: deps}))
    nodes = [node(f"n{j}", *draw(st.lists(st.sampled_from(names), min_size=1, unique=True))) for j in range(draw(st.integers(1, 6)))]
    return build_plan(catalog(*services), nodes, "create")


@settings(max_examples=60, deadline=None)
@given(plans(), st.sampled_from(["eager", "staged"]), st.randoms(use_true_random=False))
def test_the_dispatcher_makes_the_ready_functions_decisions(plan: Plan, mode: str, rnd: random.Random) -> None:
    dispatcher = Dispatcher(plan, mode)
    running = dispatcher.start()
    assert tuple(running) == ready(plan, set(), set(), mode)
    while running:
        task = running.pop(rnd.randrange(len(running)))
        assert set(plan.predecessors(task)) <= dispatcher.done
        new = dispatcher.finished(task)
        expected = ready(plan, dispatcher.done, set(running), mode)
        assert tuple(new) == expected
        running.extend(new)
        nodes = [plan.by_id[t].node for t in running]
        assert len(nodes) == len(set(nodes))  # one running task per node
    assert dispatcher.done == set(plan.index)


def test_a_released_task_is_dispatched_again_or_yields_to_a_more_urgent_one() -> None:
    cat = catalog(svc("x"), svc("y"))
    plan = build_plan(cat, [node("n1", "x", "y")], "create")
    dispatcher = Dispatcher(plan)
    assert dispatcher.start() == ["n1.create"]
    assert dispatcher.released("n1.create") == ["n1.create"]  # a retry
    for t in ("n1.create", "n1.confirm"):
        dispatcher.finished(t)
    assert dispatcher.finished("n1.bootstrap") == ["n1.install.x"]
    assert dispatcher.released("n1.install.x") == ["n1.install.x"]
    staged = Dispatcher(plan, "staged")
    assert staged.start() == ["n1.create"]
    assert staged.released("n1.create") == ["n1.create"]
    assert staged.finished("n1.create") == ["n1.confirm"]


def test_a_custom_priority_changes_the_order_on_a_node() -> None:
    cat = catalog(svc("short", ["install"]), svc("long", ["install", "configure", "start"]))
    plan = build_plan(cat, [node("n1", "short", "long")], "create")
    backwards = tuple(reversed(plan.priority))
    dispatcher = Dispatcher(plan, priority=backwards)
    for t in dispatcher.start() + ["n1.confirm"]:
        dispatcher.finished(t)
    assert dispatcher.finished("n1.bootstrap") == ["n1.install.short"]


def test_unknown_modes_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown mode 'fast'"):
        ready(create(), set(), set(), "fast")
    with pytest.raises(ValueError, match="unknown mode 'fast'"):
        Dispatcher(create(), "fast")


@settings(max_examples=80, deadline=None)
@given(plans(), st.randoms(use_true_random=False))
def test_the_ready_index_answers_as_ready_eager_through_starts_failures_and_finishes(plan: Plan, rnd: random.Random) -> None:
    """The job's incremental index (`ReadyIndex`) against a scan of the whole plan, at every
    step of a run where some tasks are held back, some attempts fail and are tried again."""
    from services.planner.domain.scheduling import ReadyIndex

    done: set[str] = set()
    running: set[str] = set()
    index = ReadyIndex(plan, done, running)
    for _ in range(4 * len(plan.tasks) + 10):
        expected = ready_eager(plan, done, running)
        assert index.ready() == expected
        if not expected and not running:
            break
        move = rnd.random()
        if expected and (move < 0.6 or not running):
            task = rnd.choice(expected)  # a dispatch policy may take any of them, not all
            running.add(task)
            index.started(task)
        else:
            task = rnd.choice(sorted(running))
            running.discard(task)
            if move < 0.8:
                done.add(task)
                index.finished(task)
            else:
                index.released(task)
    assert index.all_done == (done == set(plan.index))
    rebuilt = ReadyIndex(plan, done, running)  # built from the state at any point: the same answer
    assert rebuilt.ready() == index.ready()
