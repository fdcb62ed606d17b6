"""build_plan: chains per operation, the four cross-service rules, provides, minimization,
skipping, subsets and thrown-in starts, start/stop expansion, errors (coopr-facts §2.2-2.4)."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pytest
from planner_support import catalog, coopr_install, coopr_minimize, coopr_runtime, coopr_uses, node, svc

from contracts.catalog import Action
from services.planner.domain.operations import CHAINS as OPERATIONS
from services.planner.domain.plan import Plan, PlanError, build_plan, task_id
from services.planner.domain.rolling import batched

HADOOP = catalog(
    svc("base", ["install", "configure"]),
    svc("zk", ["install", "configure", "start", "stop"], install=["base"]),
    svc("nn", ["install", "configure", "initialize", "start", "stop"], install=["base"], runtime=["zk"]),
    svc("dn", ["install", "configure", "start", "stop", "remove"], install=["base"], runtime=["nn"], provides=["hdfs"]),
    svc("hb", ["install", "configure", "initialize", "start", "stop", "remove"], install=["base"], runtime=["hdfs", "zk"]),
)
CLUSTER = [node("n1", "base", "zk"), node("n2", "base", "nn"), node("n3", "base", "dn"), node("n4", "base", "dn")]


def ids(plan: Plan) -> set[str]:
    return {t.id for t in plan.tasks}


def edges(plan: Plan) -> set[tuple[str, str]]:
    return set(plan.edges)


def chain(*tasks: str) -> set[tuple[str, str]]:
    return set(pairwise(tasks))


# -- chains per operation ---------------------------------------------------------------------


def test_create_runs_the_full_chain_for_one_service() -> None:
    plan = build_plan(catalog(svc("s")), [node("n1", "s")], "create")
    expected = ["n1.create", "n1.confirm", "n1.bootstrap", "n1.install.s", "n1.configure.s", "n1.initialize.s", "n1.start.s"]
    assert [t.id for t in plan.tasks] == expected
    assert edges(plan) == chain(*expected)
    assert [list(s) for s in plan.stages] == [[t] for t in expected]


def test_machine_actions_are_planned_once_per_node_and_shared_by_its_services() -> None:
    plan = build_plan(catalog(svc("a"), svc("b")), [node("n1", "a", "b")], "create")
    machine = [t for t in plan.tasks if t.service is None]
    assert [t.id for t in machine] == ["n1.create", "n1.confirm", "n1.bootstrap"]
    assert {("n1.bootstrap", "n1.install.a"), ("n1.bootstrap", "n1.install.b")} <= edges(plan)


def test_a_service_lacking_actions_is_skipped_and_its_chain_goes_on() -> None:
    plan = build_plan(catalog(svc("s", ["configure", "start"])), [node("n1", "s")], "add-services", services=["s"])
    assert [t.id for t in plan.tasks] == ["n1.bootstrap", "n1.configure.s", "n1.start.s"]
    assert edges(plan) == chain("n1.bootstrap", "n1.configure.s", "n1.start.s")


def test_a_node_without_services_still_gets_its_machine_in_create_and_delete() -> None:
    assert ids(build_plan({}, [node("n1")], "create")) == {"n1.create", "n1.confirm", "n1.bootstrap"}
    assert ids(build_plan({}, [node("n1")], "delete")) == {"n1.delete"}
    assert ids(build_plan({}, [node("n1")], "configure")) == set()


def test_delete_is_one_isolated_delete_per_node() -> None:
    plan = build_plan(HADOOP, CLUSTER, "delete")
    assert [t.id for t in plan.tasks] == ["n1.delete", "n2.delete", "n3.delete", "n4.delete"]
    assert plan.edges == ()
    assert plan.stages == (("n1.delete", "n2.delete", "n3.delete", "n4.delete"),)


def test_delete_does_not_need_the_services_in_the_catalog() -> None:
    assert ids(build_plan({}, [node("n1", "gone-from-catalog")], "delete")) == {"n1.delete"}


@pytest.mark.parametrize(
    ("operation", "expected"),
    [
        ("create", ["n1.create", "n1.confirm", "n1.bootstrap", "n1.install.s", "n1.configure.s", "n1.initialize.s", "n1.start.s"]),
        ("add-services", ["n1.bootstrap", "n1.install.s", "n1.configure.s", "n1.initialize.s", "n1.start.s"]),
        ("configure", ["n1.bootstrap", "n1.configure.s"]),
        ("configure-restart", ["n1.bootstrap", "n1.configure.s", "n1.stop.s", "n1.start.s"]),
        ("start", ["n1.start.s"]),
        ("stop", ["n1.stop.s"]),
        ("restart", ["n1.stop.s", "n1.start.s"]),
        ("remove-services", ["n1.stop.s", "n1.remove.s"]),
        ("delete", ["n1.delete"]),
    ],
)
def test_each_operation_has_its_chain(operation: str, expected: list[str]) -> None:
    plan = build_plan(catalog(svc("s")), [node("n1", "s")], operation, services=["s"] if "services" in operation else None)
    assert [t.id for t in plan.tasks] == expected
    assert edges(plan) == chain(*expected)


def test_expand_and_shrink_chains() -> None:
    nodes = [node("n1", "s"), node("n2", "s")]
    assert [t.id for t in build_plan(catalog(svc("s")), nodes, "expand", node_ids=["n2"]).tasks] == [
        "n2.create", "n2.confirm", "n2.bootstrap", "n2.install.s", "n2.configure.s", "n2.initialize.s", "n2.start.s"]
    assert [t.id for t in build_plan(catalog(svc("s")), nodes, "shrink", node_ids=["n2"]).tasks] == ["n2.stop.s", "n2.delete"]


def test_operation_orders_follow_coopr() -> None:
    A = Action

    def coopr(op: str) -> tuple[Action, ...]:  # muster's `status` checks aside
        return tuple(a for a in OPERATIONS[op] if a is not A.STATUS)

    assert coopr("create") == (A.CREATE, A.CONFIRM, A.BOOTSTRAP, A.INSTALL, A.CONFIGURE, A.INITIALIZE, A.START)
    assert coopr("delete") == (A.DELETE,)
    assert coopr("add-services") == (A.BOOTSTRAP, A.INSTALL, A.CONFIGURE, A.INITIALIZE, A.START)
    assert coopr("configure") == (A.BOOTSTRAP, A.CONFIGURE)
    # muster: the new config is written before the stop (Coopr: BOOTSTRAP, STOP, CONFIGURE, START)
    assert coopr("configure-restart") == (A.BOOTSTRAP, A.CONFIGURE, A.STOP, A.START)
    assert coopr("start") == (A.START,)
    assert coopr("stop") == (A.STOP,)
    assert coopr("restart") == (A.STOP, A.START)
    # A check follows the last start or stop of every chain that leaves services running or stopped.
    for op in ("create", "add-services", "configure-restart", "start", "stop", "restart", "upgrade"):
        assert OPERATIONS[op][-1] is A.STATUS and OPERATIONS[op][-2] in (A.START, A.STOP), op
    assert A.STATUS not in OPERATIONS["shrink"] + OPERATIONS["remove-services"] + OPERATIONS["delete"]


def test_configure_restart_writes_each_nodes_config_before_it_stops_its_service() -> None:
    """A config that fails to apply leaves the node's service running: its stop waits for its
    configure. The stop and start rules still hold across nodes."""
    plan = build_plan(HADOOP, CLUSTER, "configure-restart")
    for task in plan.tasks:
        if task.action is Action.STOP:
            assert task_id(task.node, Action.CONFIGURE, task.service) in plan.predecessors(task.id), task.id
            assert task_id(task.node, Action.CONFIGURE, task.service) in batched(plan, 2).plan.predecessors(task.id)
    assert {("n3.stop.dn", "n2.stop.nn"), ("n2.stop.nn", "n1.stop.zk"), ("n1.start.zk", "n2.start.nn")} <= edges(plan)
    assert not any(plan.by_id[a].action is Action.STOP and plan.by_id[b].action is Action.CONFIGURE for a, b in plan.edges)


# -- the four cross-service rules -------------------------------------------------------------

RULES_CAT = catalog(svc("b"), svc("a", install=["b"], runtime=["b"]))
RULES_NODES = [node("n1", "b"), node("n2", "b"), node("n3", "a")]


def test_rule_start_b_before_start_a_on_every_node_hosting_b() -> None:
    plan = build_plan(RULES_CAT, RULES_NODES, "start")
    assert edges(plan) == {("n1.start.b", "n3.start.a"), ("n2.start.b", "n3.start.a")}


def test_rule_start_b_before_initialize_a() -> None:
    plan = build_plan(RULES_CAT, RULES_NODES, "create")
    assert {("n1.start.b", "n3.initialize.a"), ("n2.start.b", "n3.initialize.a")} <= edges(plan)


def test_rule_stop_a_before_stop_b() -> None:
    plan = build_plan(RULES_CAT, RULES_NODES, "stop")
    assert edges(plan) == {("n3.stop.a", "n1.stop.b"), ("n3.stop.a", "n2.stop.b")}


def test_rule_install_b_before_install_a() -> None:
    plan = build_plan(RULES_CAT, RULES_NODES, "create")
    assert {("n1.install.b", "n3.install.a"), ("n2.install.b", "n3.install.a")} <= edges(plan)


def test_install_rules_use_the_install_graph_and_runtime_rules_the_runtime_graph() -> None:
    cat = catalog(svc("b"), svc("c"), svc("a", install=["b"], runtime=["c"]))
    plan = build_plan(cat, [node("n1", "a", "b", "c")], "create")
    cross = {e for e in edges(plan) if e[0].split(".")[-1] != e[1].split(".")[-1] and plan.by_id[e[0]].service}
    assert cross == {("n1.install.b", "n1.install.a"), ("n1.start.c", "n1.initialize.a"), ("n1.start.c", "n1.start.a")}


def test_a_fan_in_is_one_link_not_a_pair_per_node() -> None:
    nodes = [node(f"n{i}", "b") for i in range(50)] + [node(f"m{i}", "a") for i in range(50)]
    plan = build_plan(RULES_CAT, nodes, "start")
    assert len(plan.links) == 1 and len(plan.edges) == 2500
    assert plan.predecessors("m7.start.a") == tuple(f"n{i}.start.b" for i in range(50))


def test_provides_substitutes_every_provider_of_the_name() -> None:
    plan = build_plan(HADOOP, [*CLUSTER, node("n5", "hb")], "create")
    assert set(plan.predecessors("n5.start.hb")) == {"n5.initialize.hb", "n3.start.dn", "n4.start.dn"}
    assert set(plan.predecessors("n5.initialize.hb")) == {"n5.configure.hb", "n3.start.dn", "n4.start.dn"}


def test_minimized_dependencies_give_only_the_nearest_edges() -> None:
    cat = coopr_minimize()
    plan = build_plan(cat, [node(f"n{i}", s) for i, s in enumerate(cat)], "start")
    assert set(plan.predecessors("n5.start.s5")) == {"n3.start.s3", "n4.start.s4"}


def test_cluster_runtime_dependencies_in_a_plan() -> None:
    cat = coopr_runtime()
    plan = build_plan(cat, [node("h", *cat)], "create")
    cross = {(a, b) for a, b in plan.edges if plan.by_id[a].service not in (None, plan.by_id[b].service)}
    assert cross == {
        ("h.start.s1", "h.initialize.s2"),
        ("h.start.s1", "h.start.s3"),
        ("h.start.s3", "h.start.s4"), ("h.start.s5", "h.start.s4"),
        ("h.start.s3", "h.initialize.s4"), ("h.start.s5", "h.initialize.s4"),
        ("h.start.s5", "h.initialize.s6"),
    }


def test_cluster_install_dependencies_in_a_plan() -> None:
    cat = coopr_install()
    plan = build_plan(cat, [node("h", *cat)], "create")
    cross = {(a, b) for a, b in plan.edges if plan.by_id[a].service not in (None, plan.by_id[b].service)}
    assert cross == {("h.install.s1", "h.install.s3"), ("h.install.s3", "h.install.s4"), ("h.install.s5", "h.install.s4")}


def test_dependencies_on_services_not_on_the_cluster_are_ignored() -> None:
    plan = build_plan(coopr_uses(), [node("n1", "s1"), node("n2", "s2")], "create")
    assert plan.predecessors("n2.install.s2") == ("n2.bootstrap", "n1.install.s1")


def test_a_rule_applies_only_if_the_dependent_has_the_action() -> None:
    cat = catalog(svc("b"), svc("a", ["install", "configure"], runtime=["b"]))
    plan = build_plan(cat, [node("n1", "a", "b")], "create")
    assert not any(plan.by_id[x].service == "b" and plan.by_id[y].service == "a" for x, y in plan.edges)


# -- subsets: thrown-in starts, dropped install edges ----------------------------------------


def test_add_services_throws_in_starts_of_running_dependencies_and_drops_their_install_edges() -> None:
    nodes = [*CLUSTER[:3], node("n4", "base", "dn", "hb")]
    plan = build_plan(HADOOP, nodes, "add-services", services=["hb"], node_ids=["n4"])
    assert ids(plan) == {
        "n4.bootstrap", "n4.install.hb", "n4.configure.hb", "n4.initialize.hb", "n4.start.hb",
        "n3.start.dn", "n4.start.dn",  # thrown in: hb needs hdfs (provided by dn) running
    }
    assert plan.thrown_in == {"n3.start.dn", "n4.start.dn"}
    assert plan.predecessors("n4.install.hb") == ("n4.bootstrap",)  # install base is not planned
    assert set(plan.predecessors("n4.start.hb")) == {"n4.initialize.hb", "n3.start.dn", "n4.start.dn"}
    assert plan.predecessors("n3.start.dn") == ()  # what it needs (nn) is not in the plan: running, left alone


def test_a_thrown_in_start_waits_for_the_plans_starts_of_what_it_needs_on_other_nodes() -> None:
    # hb on n3 needs hdfs on n3 and n4, and the planned dn of n3 throws in nn's start: the
    # thrown-in dn of n4 starts after it too, as in a create (it started with it, unordered)
    nodes = [node("n1", "base", "zk"), node("n2", "base", "nn"), node("n3", "base", "dn", "hb"), node("n4", "base", "dn", "hb")]
    plan = build_plan(HADOOP, nodes, "start", services=["hb"], node_ids=["n3"])
    assert plan.thrown_in == {"n2.start.nn", "n4.start.dn"}
    assert plan.predecessors("n3.start.dn") == ("n2.start.nn",)
    assert plan.predecessors("n4.start.dn") == ("n2.start.nn",)
    assert set(plan.predecessors("n3.start.hb")) == {"n3.start.dn", "n4.start.dn"}
    assert plan.predecessors("n2.start.nn") == ()  # zk is not in the plan: it runs, nothing is added


def test_restart_of_a_subset_throws_in_the_start_of_what_it_needs() -> None:
    plan = build_plan(HADOOP, CLUSTER, "restart", services=["dn"])
    assert ids(plan) == {"n3.stop.dn", "n3.start.dn", "n4.stop.dn", "n4.start.dn", "n2.start.nn"}
    assert plan.thrown_in == {"n2.start.nn"}


def test_expand_gives_new_nodes_the_create_chain_and_runtime_edges_to_existing_services() -> None:
    nodes = [*CLUSTER, node("n5", "base", "dn")]
    plan = build_plan(HADOOP, nodes, "expand", node_ids=["n5"])
    assert {t.node for t in plan.tasks if t.id not in plan.thrown_in} == {"n5"}
    assert plan.thrown_in == {"n2.start.nn"}
    assert ("n2.start.nn", "n5.start.dn") in edges(plan)
    assert plan.predecessors("n5.install.dn") == ("n5.bootstrap", "n5.install.base")  # old installs dropped


def test_shrink_stops_in_reverse_dependency_order_then_deletes_and_leaves_other_nodes_alone() -> None:
    nodes = [node("n1", "base", "zk", "nn"), node("n2", "base", "dn"), node("n3", "base", "dn", "hb")]
    plan = build_plan(HADOOP, nodes, "shrink", node_ids=["n1"])
    assert ids(plan) == {"n1.stop.zk", "n1.stop.nn", "n1.delete"}
    assert edges(plan) == {("n1.stop.nn", "n1.stop.zk"), ("n1.stop.zk", "n1.delete"), ("n1.stop.nn", "n1.delete")}


def test_remove_services_stops_then_removes_in_reverse_dependency_order() -> None:
    cat = catalog(svc("b"), svc("a", install=["b"], runtime=["b"]), svc("keep"))
    nodes = [node("n1", "b", "keep"), node("n2", "a")]
    plan = build_plan(cat, nodes, "remove-services", services=["a", "b"])
    assert ids(plan) == {"n1.stop.b", "n1.remove.b", "n2.stop.a", "n2.remove.a"}
    assert edges(plan) == {
        ("n2.stop.a", "n1.stop.b"), ("n1.stop.b", "n1.remove.b"), ("n2.stop.a", "n2.remove.a"),
        ("n2.remove.a", "n1.remove.b"),
    }


# -- start / stop expansion -------------------------------------------------------------------


def test_start_expands_to_what_the_services_need_running() -> None:
    plan = build_plan(HADOOP, CLUSTER, "start", services=["nn"])
    assert ids(plan) == {"n1.start.zk", "n2.start.nn"}
    assert plan.edges == (("n1.start.zk", "n2.start.nn"),)


def test_stop_and_restart_expand_to_the_services_that_depend_on_them() -> None:
    stop = build_plan(HADOOP, CLUSTER, "stop", services=["nn"])
    assert ids(stop) == {"n2.stop.nn", "n3.stop.dn", "n4.stop.dn"}
    assert edges(stop) == {("n3.stop.dn", "n2.stop.nn"), ("n4.stop.dn", "n2.stop.nn")}
    restart = build_plan(HADOOP, CLUSTER, "restart", services=["zk"])
    assert {t.service for t in restart.tasks} == {"zk", "nn", "dn"}
    assert [list(s) for s in restart.stages] == [
        ["n3.stop.dn", "n4.stop.dn"], ["n2.stop.nn"], ["n1.stop.zk"], ["n1.start.zk"], ["n2.start.nn"],
        ["n3.start.dn", "n4.start.dn"],
    ]


def test_start_stop_restart_default_to_every_service() -> None:
    assert {t.service for t in build_plan(HADOOP, CLUSTER, "start").tasks} == {"zk", "nn", "dn"}


# -- errors -----------------------------------------------------------------------------------


def test_pairs_plan_exactly_them_without_the_closure() -> None:
    """A stop of zk on n1 by pairs stops neither nn (which needs it) nor anything elsewhere;
    the pairs of two services are ordered by the rules as a whole-service plan orders them."""
    assert ids(build_plan(HADOOP, CLUSTER, "stop", pairs=[("n1", "zk")])) == {"n1.stop.zk"}
    assert "n1.stop.zk" in ids(build_plan(HADOOP, CLUSTER, "stop", services=["zk"]))
    assert "n2.stop.nn" in ids(build_plan(HADOOP, CLUSTER, "stop", services=["zk"]))
    plan = build_plan(HADOOP, CLUSTER, "stop", pairs=[("n1", "zk"), ("n2", "nn")])
    assert ("n2.stop.nn", "n1.stop.zk") in plan.edges


def test_a_dependency_cycle_is_an_error_naming_the_services() -> None:
    cat = catalog(svc("x", runtime=["y"]), svc("y", runtime=["x"]))
    with pytest.raises(PlanError, match="runtime dependency cycle between services: x -> y -> x"):
        build_plan(cat, [node("n1", "x"), node("n2", "y")], "create")
    assert ids(build_plan(cat, [node("n1", "x"), node("n2", "y")], "delete")) == {"n1.delete", "n2.delete"}


@pytest.mark.parametrize(
    ("operation", "kwargs", "message"),
    [
        ("explode", {}, "unknown operation 'explode'"),
        ("expand", {}, "expand needs node_ids"),
        ("shrink", {}, "shrink needs node_ids"),
        ("add-services", {}, "add-services needs the services"),
        ("remove-services", {}, "remove-services needs the services"),
        ("start", {"services": ["ghost"]}, "service ghost is not in the catalog"),
        ("start", {"services": ["hb"]}, "service hb is not on the cluster"),
        ("create", {"node_ids": ["n9"]}, r"unknown node\(s\) \['n9'\]"),
        ("stop", {"pairs": [("n1", "nn")]}, r"pair\(s\) \[\('n1', 'nn'\)\] not on the cluster"),
        ("stop", {"pairs": [("n1", "zk")], "node_ids": ["n1"]}, "pairs name the nodes and services: not with services or node_ids"),
    ],
)
def test_invalid_requests_are_plan_errors(operation: str, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(PlanError, match=message):
        build_plan(HADOOP, CLUSTER, operation, **kwargs)


def test_unknown_services_and_duplicate_nodes_are_plan_errors() -> None:
    with pytest.raises(PlanError, match="service ghost is not in the catalog"):
        build_plan(HADOOP, [node("n1", "ghost")], "create")
    with pytest.raises(PlanError, match="node id 'n1' appears twice"):
        build_plan(HADOOP, [node("n1"), node("n1")], "create")


def test_plan_error_is_a_value_error() -> None:
    assert issubclass(PlanError, ValueError)


# -- ids and determinism ------------------------------------------------------------------------


def test_task_ids_are_node_action_service() -> None:
    assert task_id("n1", Action.CREATE, None) == "n1.create"
    assert task_id("n1", Action.INSTALL, "hdfs-datanode") == "n1.install.hdfs-datanode"
    plan = build_plan(HADOOP, CLUSTER, "create")
    for t in plan.tasks:
        assert t.id == task_id(t.node, t.action, t.service)
        assert all(part and all(c.isalnum() or c in "_-" for c in part) for part in t.id.split("."))


def test_the_same_request_gives_the_same_plan() -> None:
    first = build_plan(HADOOP, CLUSTER, "create")
    again = build_plan(HADOOP, list(CLUSTER), "create")
    assert first == again and first.to_json() == again.to_json()


def test_json_round_trips_exactly() -> None:
    plan = build_plan(HADOOP, [*CLUSTER[:3], node("n4", "base", "dn", "hb")], "add-services", services=["hb"], node_ids=["n4"])
    assert Plan.from_json(plan.to_compact_json()) == plan
    again = Plan.from_json(plan.to_json())
    assert (again.tasks, again.edges, again.stages, again.priority) == (plan.tasks, plan.edges, plan.stages, plan.priority)
    compact = plan.to_compact_json()
    del compact["stages"]  # stages and order are recomputed the same way from tasks and links
    compact["tasks"].reverse()
    assert Plan.from_json(compact) == plan
    assert plan.to_json()["tasks"][1] == {"id": "n4.bootstrap", "node": "n4", "action": "bootstrap", "service": None}


def test_a_rolling_plan_does_the_nodes_it_is_told_first_then_the_others_in_node_order() -> None:
    """A rolling repair brings services up on some nodes and restarts them on others: those it
    only brings up go first (`first`), so nothing running goes down before they are back."""
    plan = build_plan(HADOOP, [*CLUSTER, node("n10", "base", "dn")], "restart")
    assert batched(plan, 2).batches == [["n1", "n2"], ["n3", "n4"], ["n10"]]
    done = batched(plan, 2, first={"n10", "n3"})
    assert done.batches == [["n3", "n10"], ["n1", "n2"], ["n4"]]
    # batch k+1 waits for all of batch k: the stages run the batches one after the other
    batch = {n: i for i, group in enumerate(done.batches) for n in group}
    in_stage = [{batch[done.plan.by_id[t].node] for t in stage} for stage in done.plan.stages]
    assert all(len(b) == 1 for b in in_stage)
    order = [min(b) for b in in_stage]
    assert order == sorted(order) and order[0] == 0 and order[-1] == 2
