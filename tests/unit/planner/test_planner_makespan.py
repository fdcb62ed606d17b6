"""Critical path, busiest node and simulated makespans."""

from __future__ import annotations

import random

import pytest
from planner_support import catalog, node, svc

from contracts.catalog import Action
from services.planner.domain.makespan import busiest_node, by_remaining_time, critical_path, simulate
from services.planner.domain.plan import Plan, PlannedTask, build_plan


def test_critical_path_follows_the_longest_chain() -> None:
    tasks = [PlannedTask(t, t, Action.START, None) for t in "abcd"]
    plan = Plan.from_edges(tasks, [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")])
    length, path = critical_path(plan, {"a": 1, "b": 5, "c": 2, "d": 1})
    assert length == 7 and path == ("a", "b", "d")
    assert critical_path(Plan.from_edges([], []), {}) == (0.0, ())


def test_staged_runs_stage_by_stage_and_eager_does_not() -> None:
    tasks = [PlannedTask(f"{n}{i}", n, Action.START, f"s{i}") for n in "xy" for i in range(2)]
    plan = Plan.from_edges(tasks, [("x0", "x1"), ("y0", "y1")])
    durations = {"x0": 10, "x1": 1, "y0": 1, "y1": 10}
    assert simulate(plan, durations, "staged") == 20  # max(10, 1) + max(1, 10)
    assert simulate(plan, durations, "eager") == 11
    assert critical_path(plan, durations)[0] == 11


def test_one_task_per_node_makes_the_busiest_node_a_bound() -> None:
    plan = build_plan(catalog(svc("a", ["install"]), svc("b", ["install"])), [node("n1", "a", "b")], "create")
    durations = dict.fromkeys(plan.index, 1.0)
    assert busiest_node(plan, durations) == 5
    assert critical_path(plan, durations)[0] == 4
    assert simulate(plan, durations) == 5


@pytest.mark.parametrize("seed", range(5))
def test_simulated_makespans_respect_the_bounds(seed: int) -> None:
    rnd = random.Random(seed)
    cat = catalog(svc("b"), svc("a", install=["b"], runtime=["b"]))
    plan = build_plan(cat, [node(f"n{i}", rnd.choice("ab")) for i in range(8)], "create")
    durations = {t: rnd.lognormvariate(0, 1) for t in plan.index}
    bound = max(critical_path(plan, durations)[0], busiest_node(plan, durations))
    for mode in ("eager", "staged"):
        assert simulate(plan, durations, mode) >= bound - 1e-9


def test_ranking_by_remaining_time_puts_the_long_branch_first() -> None:
    tasks = [PlannedTask(t, "n", Action.START, t) for t in ("a", "b", "c")]
    plan = Plan.from_edges(tasks, [("a", "c")])
    durations = {"a": 1.0, "b": 5.0, "c": 1.0}
    assert by_remaining_time(plan, durations) == ("b", "a", "c")
    assert simulate(plan, durations, "eager", by_remaining_time(plan, durations)) == 7.0
