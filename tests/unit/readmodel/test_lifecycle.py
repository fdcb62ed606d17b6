"""Each service on each node as a state machine: the transitions, what a job's tasks leave,
config changes making running services outdated, checks as the real state, and plans the
machine refuses."""

from __future__ import annotations

from types import SimpleNamespace

from contracts.catalog import Action
from muster.readmodel import lifecycle
from muster.readmodel.lifecycle import Pair, State

A = Action
NODES = {"n1": SimpleNamespace(services=["a", "b"]), "n2": SimpleNamespace(services=["a"])}


def fold(states: dict[Pair, State], done: list[tuple[str, str, Action]]) -> dict[Pair, State]:
    lifecycle.apply_moves(states, lifecycle.moves(states, done), NODES)
    return states


def test_a_create_leaves_every_service_running_and_current() -> None:
    chain = [A.INSTALL, A.CONFIGURE, A.INITIALIZE, A.START]
    states = fold({}, [(n, s, a) for n, s in (("n1", "a"), ("n1", "b"), ("n2", "a")) for a in chain])
    assert states == {("n1", "a"): ("running", False), ("n1", "b"): ("running", False), ("n2", "a"): ("running", False)}


def test_a_config_change_makes_running_services_outdated_until_started_again() -> None:
    states: dict[Pair, State] = {("n1", "a"): ("running", False), ("n1", "b"): ("stopped", False)}
    lifecycle.config_changed(states)
    assert states == {("n1", "a"): ("running", True), ("n1", "b"): ("stopped", False)}
    fold(states, [("n1", "a", A.CONFIGURE), ("n1", "b", A.CONFIGURE)])  # configured, not restarted
    assert states == {("n1", "a"): ("running", True), ("n1", "b"): ("stopped", False)}
    fold(states, [("n1", "a", A.STOP), ("n1", "a", A.START)])
    assert states[("n1", "a")] == ("running", False)


def test_a_stop_a_remove_and_a_check_are_taken_as_they_are() -> None:
    states: dict[Pair, State] = {("n1", "a"): ("running", True), ("n1", "b"): ("running", False)}
    fold(states, [("n1", "a", A.STOP), ("n1", "b", A.STOP), ("n1", "b", A.REMOVE)])
    assert states == {("n1", "a"): ("stopped", False)}
    lifecycle.observed(states, "n1", "a", "running")  # started outside muster: the check says so
    lifecycle.observed(states, "n2", "a", "running")  # a state not known stays unknown
    assert states == {("n1", "a"): ("running", False)}


def test_states_not_known_are_learnt_from_an_install_a_start_or_a_stop_only() -> None:
    states = fold({}, [("n1", "a", A.CONFIGURE), ("n2", "a", A.STOP)])
    assert states == {("n2", "a"): ("stopped", False)}


def test_a_plan_that_starts_a_service_never_configured_is_refused() -> None:
    states: dict[Pair, State] = {("n1", "a"): ("installed", False), ("n1", "b"): ("running", False)}
    assert lifecycle.invalid(states, [("n1", "a", A.START)]) == "cannot start a on n1: it is installed, never configured"
    assert lifecycle.invalid(states, [("n1", "a", A.CONFIGURE), ("n1", "a", A.START), ("n1", "b", A.START)]) == ""
    assert lifecycle.invalid(states, [("n2", "a", A.START), ("n1", None, A.BOOTSTRAP)]) == ""  # not known: not checked
