"""Staged grouping: Kahn layers, then one task per node per stage, deterministically
(coopr-facts §4.2-4.4)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.catalog import Action
from services.planner.domain.errors import PlanError
from services.planner.domain.plan import Plan, PlannedTask
from services.planner.domain.stages import Link, layers, split_one_per_node, staged

# -- Coopr's TaskDagTest#testDagSingleHost ---------------------------------------------------

SINGLE_HOST_EDGES = [
    ("provision", "bootstrap"),
    *[(a, b) for svc in ("dn", "rs") for a, b in [
        ("bootstrap", f"install {svc}"), (f"install {svc}", f"configure {svc}"),
        (f"configure {svc}", f"initialize {svc}"), (f"initialize {svc}", f"start {svc}")]],
    ("initialize dn", "initialize rs"),
    ("initialize dn", "start rs"),
    ("start dn", "initialize rs"),
]


def _links(edges: list[tuple[str, str]]) -> list[Link]:
    return [((a,), (b,)) for a, b in edges]


def test_dag_single_host_linearizes_into_coopr_stages() -> None:
    tasks = sorted({t for e in SINGLE_HOST_EDGES for t in e})
    level = layers(tasks, _links(SINGLE_HOST_EDGES))
    by_level: dict[int, set[str]] = {}
    for task, lv in level.items():
        by_level.setdefault(lv, set()).add(task)
    assert [by_level[i] for i in range(len(by_level))] == [
        {"provision"},
        {"bootstrap"},
        {"install dn", "install rs"},
        {"configure dn", "configure rs"},
        {"initialize dn"},
        {"start dn"},
        {"initialize rs"},
        {"start rs"},
    ]


def test_dag_single_host_dedup_splits_each_stage_to_one_task_per_host() -> None:
    tasks = sorted({t for e in SINGLE_HOST_EDGES for t in e})
    stages = staged(tasks, _links(SINGLE_HOST_EDGES), node_of=lambda t: "host1", key=lambda t: t)
    assert stages == (
        ("provision",), ("bootstrap",),
        ("install dn",), ("install rs",),
        ("configure dn",), ("configure rs",),
        ("initialize dn",), ("start dn",), ("initialize rs",), ("start rs",),
    )


def test_the_same_dag_as_a_plan_has_the_same_stages() -> None:
    action = {"provision": Action.CREATE, "bootstrap": Action.BOOTSTRAP}
    tasks = []
    for name in sorted({t for e in SINGLE_HOST_EDGES for t in e}):
        verb, _, svc = name.partition(" ")
        tasks.append(PlannedTask(name.replace(" ", "."), "host1", action.get(verb) or Action(verb), svc or None))
    plan = Plan.from_edges(tasks, [(a.replace(" ", "."), b.replace(" ", ".")) for a, b in SINGLE_HOST_EDGES])
    assert [list(s) for s in plan.stages] == [
        ["provision"], ["bootstrap"], ["install.dn"], ["install.rs"], ["configure.dn"], ["configure.rs"],
        ["initialize.dn"], ["start.dn"], ["initialize.rs"], ["start.rs"],
    ]


def test_no_source_means_no_dag() -> None:  # TaskDagTest#testNoDag: bootstrap -> bootstrap
    with pytest.raises(PlanError, match="dependency cycle between tasks: bootstrap -> bootstrap"):
        layers(["bootstrap"], _links([("bootstrap", "bootstrap")]))


def test_a_cycle_is_named_task_by_task() -> None:
    edges = [("a", "b"), ("b", "c"), ("c", "a"), ("x", "a")]
    with pytest.raises(PlanError, match="a -> b -> c -> a"):
        layers(["a", "b", "c", "x"], _links(edges))


def test_a_fan_in_link_waits_for_all_its_sources() -> None:
    links: list[Link] = [(("a", "b"), ("c", "d")), (("x",), ("b",))]
    assert layers(["a", "b", "c", "d", "x"], links) == {"a": 0, "x": 0, "b": 1, "c": 2, "d": 2}


def test_split_puts_a_nodes_nth_task_in_the_nth_sub_stage() -> None:
    node = {"a1": "a", "a2": "a", "a3": "a", "b1": "b", "c1": "c", "c2": "c"}
    assert split_one_per_node(["a1", "a2", "a3", "b1", "c1", "c2"], node.__getitem__) == [
        ["a1", "b1", "c1"], ["a2", "c2"], ["a3"],
    ]


# -- properties on random DAGs -------------------------------------------------------------


@st.composite
def random_dags(draw: st.DrawFn) -> tuple[list[PlannedTask], list[tuple[str, str]]]:
    n = draw(st.integers(min_value=1, max_value=30))
    nodes = draw(st.integers(min_value=1, max_value=5))
    kinds = list(Action)
    tasks = [
        PlannedTask(f"t{i}", f"n{draw(st.integers(0, nodes - 1))}", draw(st.sampled_from(kinds)), f"s{i}")
        for i in range(n)
    ]
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    chosen = draw(st.lists(st.sampled_from(pairs), max_size=3 * n, unique=True)) if pairs else []
    return tasks, [(f"t{i}", f"t{j}") for i, j in chosen]


@settings(max_examples=150, deadline=None)
@given(random_dags())
def test_stages_respect_edges_and_hold_one_task_per_node(dag: tuple[list[PlannedTask], list[tuple[str, str]]]) -> None:
    tasks, edges = dag
    plan = Plan.from_edges(tasks, edges)
    stage_of = {t: i for i, stage in enumerate(plan.stages) for t in stage}
    assert sorted(stage_of) == sorted(t.id for t in tasks)  # every task exactly once
    assert sum(len(s) for s in plan.stages) == len(tasks)
    for a, b in edges:
        assert stage_of[a] < stage_of[b]
    for stage in plan.stages:
        nodes = [plan.by_id[t].node for t in stage]
        assert len(nodes) == len(set(nodes))
    assert [t.id for t in plan.tasks] == [t for s in plan.stages for t in s]


@settings(max_examples=100, deadline=None)
@given(random_dags(), st.randoms(use_true_random=False))
def test_plans_do_not_depend_on_input_order(dag: tuple[list[PlannedTask], list[tuple[str, str]]], rnd: random.Random) -> None:
    tasks, edges = dag
    plan = Plan.from_edges(tasks, edges)
    shuffled_tasks, shuffled_edges = list(tasks), list(edges)
    rnd.shuffle(shuffled_tasks)
    rnd.shuffle(shuffled_edges)
    again = Plan.from_edges(shuffled_tasks, shuffled_edges)
    assert again.tasks == plan.tasks and again.stages == plan.stages
    assert again.to_json() == plan.to_json()
    assert again.priority == plan.priority


def test_nodes_sort_naturally_within_a_stage() -> None:
    tasks = [PlannedTask(f"{n}.create", n, Action.CREATE, None) for n in ("n10", "n2", "m1", "n1")]
    assert Plan.from_edges(tasks, []).stages == (("m1.create", "n1.create", "n2.create", "n10.create"),)


def test_links_to_tasks_that_are_not_there_are_refused() -> None:
    task = PlannedTask("n1.create", "n1", Action.CREATE, None)
    with pytest.raises(PlanError, match=r"not in the plan: \['n9.create'\]"):
        Plan.from_edges([task], [("n9.create", "n1.create")])
    with pytest.raises(PlanError, match="not in the plan"):
        Plan.assemble([task], [], thrown_in=["n2.start.x"])


def test_a_node_busier_in_a_layer_has_its_last_task_in_a_stage_alone_and_no_split_is_shorter() -> None:
    """Session 36's walk saw a create's `configure base` on one node alone, a stage after the
    others' (docs/planner.md, "Stages"): the demo's hadoop-small on three nodes, where n1 has four
    tasks in the layer after `install base` (three installs and `configure base`) and n2, n3 three.
    Not a quirk: `configure base` is in the same Kahn layer everywhere, and every layer takes as
    many stages as its busiest node has tasks there, no more."""
    from collections import Counter
    from pathlib import Path

    from contracts.layout import NodeSpec
    from muster.catalog.files import load_catalog
    from services.planner.domain.plan import build_plan

    catalog = load_catalog(str(Path(__file__).parents[3] / "muster" / "demo" / "catalog"))
    services = {"n1": ["base", "zookeeper-server", "hdfs-namenode", "yarn-resourcemanager"],
                "n2": ["base", "hdfs-datanode", "yarn-nodemanager"], "n3": ["base", "hdfs-datanode", "yarn-nodemanager"]}
    nodes = [NodeSpec(id=n, hardwaretype="medium", imagetype="ubuntu22", services=s) for n, s in services.items()]
    plan = build_plan(catalog.services, nodes, "create")
    level = layers([t.id for t in plan.tasks], plan.links)
    assert level["n1.configure.base"] == level["n2.configure.base"] == level["n1.install.zookeeper-server"]
    stage_of = {t: i for i, stage in enumerate(plan.stages) for t in stage}
    assert plan.stages[stage_of["n1.configure.base"]] == ("n1.configure.base",)
    assert stage_of["n2.configure.base"] == stage_of["n1.configure.base"] - 1
    busiest = Counter[int]()
    for lv in set(level.values()):
        busiest[lv] = max(Counter(t.split(".")[0] for t, at in level.items() if at == lv).values())
    assert len(plan.stages) == sum(busiest.values())
