"""Rollback plans: the inverse of what completed, in reverse dependency order."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from planner_support import base_b_a, catalog, node, ran, run_until, svc

from contracts.catalog import Action
from services.planner.domain.plan import build_plan
from services.planner.domain.rollback import rollback_plan

CAT = base_b_a()


def test_a_failed_create_deletes_every_machine_it_made_and_nothing_else() -> None:
    plan = build_plan(CAT, [node("n1", "base", "b"), node("n2", "base", "a"), node("n3", "base", "a")], "create")
    completed = {t.id for t in plan.tasks if t.node != "n3"} | {"n3.create", "n3.confirm"}
    back = rollback_plan(plan, completed)
    assert [t.id for t in back.tasks] == ["n1.delete", "n2.delete", "n3.delete"]
    assert back.edges == ()


def test_nothing_completed_nothing_to_undo() -> None:
    plan = build_plan(CAT, [node("n1", "b")], "create")
    assert rollback_plan(plan, set()).tasks == ()


def test_add_services_rollback_stops_then_removes_in_reverse_dependency_order() -> None:
    nodes = [node("n1", "base", "b"), node("n2", "base", "a")]
    plan = build_plan(CAT, nodes, "add-services", services=["a", "b"])
    back = rollback_plan(plan, {t.id for t in plan.tasks})
    assert {t.id for t in back.tasks} == {"n1.stop.b", "n1.remove.b", "n2.stop.a", "n2.remove.a"}
    assert set(back.edges) == {
        ("n2.stop.a", "n1.stop.b"),  # stop the dependent first
        ("n2.remove.a", "n1.remove.b"),  # remove the dependent first
        ("n1.stop.b", "n1.remove.b"),
        ("n2.stop.a", "n2.remove.a"),
        ("n2.remove.a", "n1.stop.b"),  # start b came before initialize a, which remove a undoes
    }


def test_thrown_in_starts_are_not_undone() -> None:
    nodes = [node("n1", "base", "b"), node("n2", "base", "a")]
    plan = build_plan(CAT, nodes, "add-services", services=["a"], node_ids=["n2"])
    assert plan.thrown_in == {"n1.start.b"}
    back = rollback_plan(plan, {t.id for t in plan.tasks})
    assert {t.id for t in back.tasks} == {"n2.stop.a", "n2.remove.a"}


def test_configure_restart_rollback_restores_the_old_config_with_a_restart() -> None:
    plan = build_plan(CAT, [node("n1", "b")], "configure-restart")
    back = rollback_plan(plan, {t.id for t in plan.tasks})
    assert [t.id for t in back.tasks] == ["n1.configure.b", "n1.stop.b", "n1.start.b"]
    assert set(back.edges) == {("n1.configure.b", "n1.start.b"), ("n1.stop.b", "n1.start.b")}


def test_configure_restart_rollback_puts_the_old_config_back_before_the_service_starts_again() -> None:
    """The new config was written, then the service stopped, and its start failed: the old
    config goes back first, so the service starts on it (reversed, it would start on the new
    one, the one that just failed to start)."""
    plan = build_plan(CAT, [node("n1", "b"), node("n2", "a")], "configure-restart")
    done = {"n1.bootstrap", "n2.bootstrap", "n1.configure.b", "n2.configure.a", "n2.stop.a", "n1.stop.b"}
    back = rollback_plan(plan, done)
    assert set(back.edges) == {
        ("n1.configure.b", "n1.start.b"), ("n2.configure.a", "n2.start.a"),
        ("n1.start.b", "n2.start.a"),  # start the dependency first, as ever
    }
    # only the configure went through on n1: its old config goes back, nothing else happens there
    assert [t.id for t in rollback_plan(plan, {"n1.bootstrap", "n1.configure.b"}).tasks] == ["n1.configure.b"]


def test_stop_is_undone_by_start_and_remove_by_install_and_configure() -> None:
    """A removed service was installed again and started: with no config (the remove had deleted
    it, as the real catalog's redis does), its start failed and the rollback needed attention.
    It comes back as add-services brings it: install, configure, initialize (after the start
    of what it needs), start."""
    plan = build_plan(CAT, [node("n1", "b"), node("n2", "a")], "remove-services", services=["a", "b"])
    back = rollback_plan(plan, {t.id for t in plan.tasks})
    assert [t.id for t in back.tasks] == ["n1.install.b", "n1.configure.b", "n1.initialize.b", "n2.install.a", "n1.start.b",
                                          "n2.configure.a", "n2.initialize.a", "n2.start.a"]
    assert {("n1.configure.b", "n2.install.a"), ("n1.start.b", "n2.initialize.a"), ("n2.initialize.a", "n2.start.a"),
            ("n1.initialize.b", "n1.start.b")} <= set(back.edges)
    # meant to be stopped before the job: back, configured and initialized, not started
    kept = rollback_plan(plan, {t.id for t in plan.tasks}, had={("n1", "b"), ("n2", "a")}, meant_stopped={("n2", "a")})
    assert [t.id for t in kept.tasks if t.node == "n2"] == ["n2.install.a", "n2.configure.a", "n2.initialize.a"]


def test_nothing_is_undone_on_a_node_the_job_deleted() -> None:
    """A shrink stopped `a` on n2 and n3 and deleted n2; n3's delete failed. The rollback started
    `a` on n2 too, a machine gone: that start could never succeed, and the rollback needed
    attention for good."""
    nodes = [node("n1", "base", "b"), node("n2", "base", "a"), node("n3", "base", "a")]
    plan = build_plan(CAT, nodes, "shrink", node_ids=["n2", "n3"])
    back = rollback_plan(plan, {"n2.stop.a", "n2.delete", "n3.stop.a"}, CAT, had={(n.id, s) for n in nodes for s in n.services},
                         meant_stopped=set())
    assert [t.id for t in back.tasks] == ["n3.start.a"]


def test_with_the_catalog_undefined_inverse_actions_are_left_out() -> None:
    cat = catalog(svc("s", ["install", "configure", "start", "stop"]))  # no remove
    plan = build_plan(cat, [node("n1", "s")], "add-services", services=["s"])
    assert [t.id for t in rollback_plan(plan, set(plan.index), cat).tasks] == ["n1.stop.s"]
    assert [t.id for t in rollback_plan(plan, set(plan.index)).tasks] == ["n1.stop.s", "n1.remove.s"]


def test_completed_tasks_without_an_inverse_pass_the_order_through() -> None:
    cat = catalog(svc("x", ["initialize", "start", "configure"]), svc("y", ["start"], runtime=["x"]))
    plan = build_plan(cat, [node("n1", "x"), node("n2", "y")], "add-services", services=["x", "y"])
    back = rollback_plan(plan, set(plan.index))
    # initialize x has no inverse; stop y must still come before stop x
    assert ("n2.stop.y", "n1.stop.x") in back.edges


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 60), st.randoms(use_true_random=False))
def test_rollback_of_a_partial_add_services_is_a_dag_that_reverses_the_order(cut: int, rnd: random.Random) -> None:
    nodes = [node(f"n{i}", "base", rnd.choice(["a", "b"])) for i in range(4)]
    plan = build_plan(CAT, nodes, "add-services", services=sorted({s for n in nodes for s in n.services} - {"base"}))
    done = run_until(plan, cut)
    back = rollback_plan(plan, done)
    position = {t.id: i for i, t in enumerate(back.tasks)}
    for before, after in back.edges:
        assert position[before] < position[after]
    undone = {(t.node, t.service) for t in back.tasks}
    installed = {(plan.by_id[t].node, plan.by_id[t].service) for t in done if plan.by_id[t].action is Action.INSTALL}
    assert installed <= undone


def test_an_install_over_a_service_the_node_had_is_not_undone_by_removing_it() -> None:
    """A failed upgrade (stop, install, configure, then the start failed) was rolled back with
    `remove s` then `start s`: the service removed from a node whose layout still has it, and
    started after its removal. What the node had before the job is put back running instead:
    the config goes back, the service starts again; the install itself has no inverse."""
    cat = catalog(svc("s", ["install", "configure", "start", "stop", "remove"]))
    plan = build_plan(cat, [node("n1", "s")], "upgrade", services=["s"])
    done = {"n1.stop.s", "n1.install.s", "n1.configure.s"}
    back = rollback_plan(plan, done, cat, had={("n1", "s")})
    assert [t.id for t in back.tasks] == ["n1.configure.s", "n1.start.s"]
    assert set(back.edges) == {("n1.configure.s", "n1.start.s")}
    # a service the node did not have (add-services) is still removed
    added = build_plan(cat, [node("n1", "s")], "add-services", services=["s"])
    assert [t.id for t in rollback_plan(added, {"n1.install.s", "n1.configure.s"}, cat, had=set()).tasks] == ["n1.remove.s"]


def test_a_start_of_a_service_meant_to_run_before_the_job_is_not_undone_by_stopping_it() -> None:
    """A repair of nodes whose state was unknown (confirm, start, status) whose status check kept
    failing was rolled back with a stop of the service on every node: services that may well
    have been running, and are meant to, stopped by the repair. A service meant to be stopped
    before the job (a `start` job's) is still stopped again."""
    cat = catalog(svc("s", ["install", "configure", "start", "stop", "remove"]))
    plan = build_plan(cat, [node("n1", "s"), node("n2", "s")], "start", services=["s"])
    done = {"n1.start.s", "n2.start.s"}
    assert [t.id for t in rollback_plan(plan, done, cat, had={("n1", "s"), ("n2", "s")},
                                        meant_stopped={("n2", "s")}).tasks] == ["n2.stop.s"]
    # stopped and started again by the job, on a new config: the rollback restarts it on the old one
    again = build_plan(cat, [node("n1", "s")], "configure-restart")
    back = rollback_plan(again, set(again.index), cat, had={("n1", "s")}, meant_stopped=set())
    assert [t.id for t in back.tasks] == ["n1.configure.s", "n1.stop.s", "n1.start.s"]


def test_a_configure_restart_rollback_leaves_a_service_meant_to_be_stopped_stopped() -> None:
    """A service the user stopped before a configure-restart: the job stopped it (a no-op) and
    perhaps started it; the configure of another service failed. Its rollback started it (the
    inverse of the stop) or restarted it (stop, start): a service meant to be stopped, running.
    The rollback ends each service in its state of before the job: `s` stopped, `r` running."""
    cat = catalog(svc("s", ["configure", "start", "stop"]), svc("r", ["configure", "start", "stop"]))
    plan = build_plan(cat, [node("n1", "s", "r")], "configure-restart")
    had = {("n1", "s"), ("n1", "r")}
    stopped_only = {"n1.bootstrap", "n1.configure.s", "n1.stop.s", "n1.configure.r", "n1.stop.r"}
    back = rollback_plan(plan, stopped_only, cat, had=had, meant_stopped={("n1", "s")})
    assert [t.id for t in back.tasks] == ["n1.configure.r", "n1.configure.s", "n1.start.r"]
    # stopped and started again by the job: stopped again, and only its config put back
    both = stopped_only | {"n1.start.s"}
    back = rollback_plan(plan, both, cat, had=had, meant_stopped={("n1", "s")})
    assert {t.id for t in back.tasks} == {"n1.configure.r", "n1.configure.s", "n1.stop.s", "n1.start.r"}
    assert ("n1.configure.r", "n1.start.r") in back.edges


def test_a_thrown_in_start_of_a_service_meant_to_be_stopped_is_undone() -> None:
    """A start of `a` on n2 throws in the start of `b` on n1, which `a` needs running: b was
    meant to be stopped there, so the rollback stops it again, after `a` (its dependent)."""
    nodes = [node("n1", "base", "b"), node("n2", "base", "a")]
    plan = build_plan(CAT, nodes, "start", services=["a"], node_ids=["n2"])
    assert plan.thrown_in == {"n1.start.b"}
    had = {(n.id, s) for n in nodes for s in n.services}
    back = rollback_plan(plan, set(plan.index), CAT, had=had, meant_stopped={("n1", "b"), ("n2", "a")})
    assert {t.id for t in back.tasks} == {"n2.stop.a", "n1.stop.b"} and set(back.edges) == {("n2.stop.a", "n1.stop.b")}
    # b meant to run there: the thrown-in start is not undone, as ever
    assert [t.id for t in rollback_plan(plan, set(plan.index), CAT, had=had, meant_stopped={("n2", "a")}).tasks] == ["n2.stop.a"]


OPS: list[tuple[str, dict[str, list[str]]]] = [
    ("configure-restart", {}), ("restart", {}), ("start", {}), ("stop", {}), ("upgrade", {"services": ["b"]}),
    ("start", {"services": ["a"], "node_ids": ["n2"]}),  # b's start on n1 thrown in
    ("remove-services", {"services": ["a"]}), ("shrink", {"node_ids": ["n3"]})]


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(OPS), st.integers(0, 30), st.sets(st.sampled_from([("n1", "b"), ("n2", "a"), ("n3", "a")])))
def test_a_rollback_leaves_each_service_as_it_was_before_the_job(op: tuple[str, dict[str, Any]], cut: int, stopped: set[tuple[str, str]]) -> None:
    """Whatever completed of any operation, on any services the user had stopped: once the
    rollback ran, each service the cluster had is running or stopped as before the job (but on
    a machine the job deleted, which is gone)."""
    nodes = [node("n1", "base", "b"), node("n2", "base", "a"), node("n3", "base", "a")]
    plan = build_plan(CAT, nodes, op[0], **op[1])
    done = run_until(plan, cut)
    before = {(n.id, s): "stopped" if (n.id, s) in stopped else "running" for n in nodes for s in n.services if s != "base"}
    state = dict(before)
    ran(plan, done, state)
    back = rollback_plan(plan, done, CAT, had={(n.id, s) for n in nodes for s in n.services}, meant_stopped=stopped)
    ran(back, set(back.index), state)
    assert {k: v for k, v in state.items() if v != "gone"} == {k: v for k, v in before.items() if state[k] != "gone"}


def test_an_expand_that_started_a_service_the_user_stopped_rolls_back_with_the_new_node_deleted_last() -> None:
    """The demo catalog: n1 has hdfs-namenode stopped by the user; an expand adds n2 with a
    datanode, which needs the namenode, so the plan starts it (thrown in) after n2's zookeeper
    and before n2's datanode. The new node's one DELETE stood in for both: ordered before and
    after the namenode's stop, a cycle (`dependency cycle between tasks`), and the failed
    expand could not be rolled back. The delete goes last: the namenode stops, then n2 goes."""
    from pathlib import Path

    from muster.catalog.files import load_catalog

    demo = load_catalog(Path(__file__).resolve().parents[3] / "muster" / "demo" / "catalog").services
    n1 = node("n1", "base", "zookeeper-server", "hdfs-namenode", "yarn-resourcemanager")
    n2 = node("n2", "base", "zookeeper-server", "hdfs-datanode")
    plan = build_plan(demo, [n1, n2], "expand", node_ids=["n2"])
    assert "n1.start.hdfs-namenode" in plan.thrown_in
    done = {t.id for t in plan.tasks if t.node == "n2" and t.action.value in ("create", "confirm", "bootstrap", "install", "configure")}
    done = (done | {"n2.start.zookeeper-server", "n2.status.zookeeper-server", "n1.start.hdfs-namenode", "n2.start.hdfs-datanode"}) & set(plan.index)
    back = rollback_plan(plan, done, demo, had={("n1", s) for s in n1.services}, meant_stopped={("n1", "hdfs-namenode")})
    assert [t.id for t in back.tasks] == ["n1.stop.hdfs-namenode", "n2.delete"]
    assert ("n1.stop.hdfs-namenode", "n2.delete") in {(a, b) for sources, targets in back.links for a in sources for b in targets}
