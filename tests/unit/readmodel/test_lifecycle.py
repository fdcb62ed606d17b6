"""Each service on each node as a state machine: the transitions, what a job's tasks leave,
`outdated` while a service runs with a config other than the cluster's, checks as the real
state, and plans the machine refuses."""

from __future__ import annotations

from types import SimpleNamespace

from contracts.catalog import Action
from muster.readmodel import lifecycle
from muster.readmodel.lifecycle import Pair, State
from muster.readmodel.observed import drift

A = Action
NODES = {"n1": SimpleNamespace(services=["a", "b"]), "n2": SimpleNamespace(services=["a"])}
OLD, NEW = {"v": 1}, {"v": 2}
D_OLD, D_NEW = lifecycle.digest(OLD), lifecycle.digest(NEW)


def fold(states: dict[Pair, State], done: list[tuple[str, str, Action]], config: dict[str, int] = OLD) -> dict[Pair, State]:
    tasks = [(n, s, a, lifecycle.digest(config)) for n, s, a in done]
    lifecycle.apply_moves(states, lifecycle.moves(states, tasks), NODES)
    return states


def shown(states: dict[Pair, State], config: dict[str, int]) -> dict[Pair, tuple[str, bool]]:
    old = lifecycle.outdated(states, config)
    return {k: (v[0], k in old) for k, v in states.items()}


def test_a_create_leaves_every_service_running_with_the_clusters_config() -> None:
    chain = [A.INSTALL, A.CONFIGURE, A.INITIALIZE, A.START]
    states = fold({}, [(n, s, a) for n, s in (("n1", "a"), ("n1", "b"), ("n2", "a")) for a in chain])
    assert shown(states, OLD) == {("n1", "a"): ("running", False), ("n1", "b"): ("running", False), ("n2", "a"): ("running", False)}


def test_a_running_service_is_outdated_until_it_is_started_with_the_clusters_config() -> None:
    states = fold({}, [("n1", "a", a) for a in (A.INSTALL, A.CONFIGURE, A.START)] + [("n1", "b", a) for a in (A.INSTALL, A.CONFIGURE)])
    assert shown(states, NEW) == {("n1", "a"): ("running", True), ("n1", "b"): ("configured", False)}
    fold(states, [("n1", "a", A.CONFIGURE)], NEW)  # configured, not restarted: still runs the old one
    assert shown(states, NEW)[("n1", "a")] == ("running", True)
    assert shown(states, OLD)[("n1", "a")] == ("running", False)  # the config put back: current again
    fold(states, [("n1", "a", A.STOP), ("n1", "a", A.START)], NEW)
    assert shown(states, NEW)[("n1", "a")] == ("running", False)


def test_a_stop_a_remove_and_a_check_are_taken_as_they_are() -> None:
    states: dict[Pair, State] = {("n1", "a"): ("running", D_OLD, D_OLD), ("n1", "b"): ("running", D_OLD, D_OLD)}
    fold(states, [("n1", "a", A.STOP), ("n1", "b", A.STOP), ("n1", "b", A.REMOVE)])
    assert states == {("n1", "a"): ("stopped", D_OLD, None)}
    lifecycle.observed(states, "n1", "a", "running")  # started outside muster: the check says so
    lifecycle.observed(states, "n2", "a", "running")  # a state not known stays unknown
    assert states == {("n1", "a"): ("running", D_OLD, D_OLD)}


def test_states_not_known_are_learnt_from_an_install_a_start_or_a_stop_only() -> None:
    states = fold({}, [("n1", "a", A.CONFIGURE), ("n2", "a", A.START)])
    assert states == {("n2", "a"): ("running", None, None)}
    assert lifecycle.outdated(states, NEW) == set()  # the config it runs with is not known


def test_a_plan_that_starts_a_service_never_configured_is_refused() -> None:
    states: dict[Pair, State] = {("n1", "a"): ("installed", None, None), ("n1", "b"): ("running", D_OLD, D_OLD)}
    assert lifecycle.invalid(states, [("n1", "a", A.START)]) == "cannot start a on n1: it is installed, never configured"
    assert lifecycle.invalid(states, [("n1", "a", A.CONFIGURE), ("n1", "a", A.START), ("n1", "b", A.START)]) == ""
    assert lifecycle.invalid(states, [("n2", "a", A.START), ("n1", None, A.BOOTSTRAP)]) == ""  # not known: not checked


def test_an_outdated_service_meant_to_run_is_drift_repaired_by_a_restart() -> None:
    nodes = {"n1": ["a", "b"]}
    found = drift(nodes, {("n1", "b")}, {}, outdated={("n1", "a"), ("n1", "b")})  # b is meant to be stopped: not drift
    assert [(d.service, d.observed, d.repair) for d in found] == [("a", "outdated", "restart")]
    assert drift(nodes, set(), {("n1", "a"): "failed"}, outdated={("n1", "a")})[0].repair == "reinstall"  # the worse first


def test_a_config_naming_members_is_stale_once_they_change_and_a_digest_recorded_without_them_is_not() -> None:
    config = {"peers": "%join(ip.service.a,',')%"}
    three, two = {"n1": ["a"], "n2": ["a"], "n3": ["a"]}, {"n1": ["a"], "n2": ["a"]}
    assert lifecycle.digest({"v": 1}, three) == lifecycle.digest({"v": 1}) == D_OLD  # no macro about members: as before
    written = lifecycle.digest(config, three)
    states: dict[Pair, State] = {("n1", "a"): ("running", written, written)}
    assert lifecycle.outdated(states, config, three) == set() and lifecycle.stale(states, config, two) == {("n1", "a")}
    # Configured with the new members, not restarted yet: outdated, not stale (a restart will do).
    states[("n1", "a")] = ("running", lifecycle.digest(config, two), written)
    assert lifecycle.outdated(states, config, two) == {("n1", "a")} and lifecycle.stale(states, config, two) == set()
    # A digest recorded before members were kept (config only) is judged by the config alone.
    states[("n1", "a")] = ("running", lifecycle.digest(config), lifecycle.digest(config))
    assert lifecycle.outdated(states, config, two) == set()
    assert [(d.observed, d.repair) for d in drift(two, set(), {}, *[f(states, {"x": 1}, two) for f in (lifecycle.outdated, lifecycle.stale)])] \
        == [("stale", "reconfigure")]


def test_a_jobs_moves_say_where_each_service_was_before_it() -> None:
    """`ServicesMoved` said only where a job left each service: a restart and a start both read
    `running on n1`. v2 records the state before too, grouped by it (session 36)."""
    states: dict[Pair, State] = {("n1", "a"): ("stopped", D_OLD, None), ("n2", "a"): ("running", D_OLD, D_OLD),
                                 ("n1", "b"): ("running", D_OLD, D_OLD)}
    done = [("n1", "a", A.START), ("n2", "a", A.STOP), ("n2", "a", A.START), ("n1", "b", A.STOP), ("n1", "b", A.REMOVE),
            ("n3", "c", A.INSTALL), ("n3", "c", A.CONFIGURE)]
    changes = lifecycle.moves(states, [(n, s, a, D_OLD) for n, s, a in done])
    assert [(c.service, c.before, c.state, c.nodes) for c in changes] == [
        ("a", "running", "running", ["n2"]), ("a", "stopped", "running", ["n1"]), ("b", "running", "removed", ["n1"]),
        ("c", None, "configured", ["n3"])]
