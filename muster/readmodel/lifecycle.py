"""Each service on each node as a small state machine (pure): installed -> configured ->
running / stopped, and `outdated` while it runs with a config older than the cluster's.

Folded by the planner's Cluster aggregate and by the read model's cluster fold alike, from the
cluster's own events: `ServicesMoved` (what a job did, recorded once when it ends),
`ClusterConfigChanged` (a new config makes every running service outdated until it is
started again) and `ServiceStateObserved` (a `status` task's finding is the real state).
docs/planner.md, "Services on nodes".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any

from contracts.catalog import Action
from contracts.events import ServiceChange, ServiceLife

Pair = tuple[str, str]
"""(node, service)"""
State = tuple[ServiceLife, bool]
"""(state, outdated)"""

_AFTER: dict[Action, dict[str | None, ServiceLife | None]] = {
    Action.INSTALL: {None: "installed", "installed": "installed", "configured": "installed", "running": "installed",
                     "stopped": "installed"},
    Action.CONFIGURE: {"installed": "configured", "configured": "configured", "running": "running", "stopped": "stopped"},
    Action.INITIALIZE: {"configured": "configured", "running": "running", "stopped": "stopped"},
    Action.START: {None: "running", "configured": "running", "running": "running", "stopped": "running"},
    Action.STOP: {None: "stopped", "installed": "stopped", "configured": "stopped", "running": "stopped", "stopped": "stopped"},
}
"""The transitions: an action from a state to the next; a pair missing here is a transition the
machine does not allow (start a service never configured). None: a state not known (a cluster
from before these states were kept): an install, a start or a stop makes it known."""


def after(state: ServiceLife | None, action: Action) -> ServiceLife | None:
    """The state after `action`, or None when the machine does not allow it (`remove`: gone)."""
    if action is Action.REMOVE:
        return None
    return _AFTER.get(action, {}).get(state) if action in _AFTER else state


def moves(states: Mapping[Pair, State], done: Iterable[tuple[str, str, Action]]) -> list[ServiceChange]:
    """What a job's succeeded service tasks (node, service, action), in the order they ran on
    each pair, left of the states before it: one change per pair that moved, grouped by
    (service, state, started). A transition the machine does not know from there records
    nothing (no fact to go by)."""
    final: dict[Pair, tuple[str, bool]] = {}
    for node, service, action in done:
        key = (node, service)
        if action is Action.REMOVE:
            final[key] = ("removed", False)
            continue
        if action not in _AFTER:
            continue  # bootstrap, status: no change of state
        state, started = final.get(key, (states[key][0] if key in states else None, False))
        nxt = after(None if state == "removed" else state, action)  # type: ignore[arg-type]
        if nxt is not None:
            final[key] = (nxt, started or action is Action.START)
    groups: dict[tuple[str, str, bool], list[str]] = {}
    for (node, service), (state, started) in final.items():
        groups.setdefault((service, state, started and state == "running"), []).append(node)
    return [ServiceChange(service=s, state=st, started=started, nodes=sorted(nodes))  # type: ignore[arg-type]
            for (s, st, started), nodes in sorted(groups.items())]


def apply_moves(states: MutableMapping[Pair, State], changes: Iterable[ServiceChange], nodes: Mapping[str, Any]) -> None:
    for change in changes:
        for node in change.nodes:
            key = (node, change.service)
            if change.state == "removed" or node not in nodes or change.service not in nodes[node].services:
                states.pop(key, None)
                continue
            outdated = states.get(key, ("installed", False))[1]
            states[key] = (change.state, change.state == "running" and outdated and not change.started)


def config_changed(states: MutableMapping[Pair, State]) -> None:
    for key, (state, _) in states.items():
        if state == "running":
            states[key] = (state, True)


def observed(states: MutableMapping[Pair, State], node: str, service: str, seen: str) -> None:
    """A check's finding is the real state: running or stopped, for a service the machine knows."""
    key = (node, service)
    if key in states and seen in ("running", "stopped"):
        state, outdated = states[key]
        states[key] = (seen, outdated and seen == "running")  # type: ignore[assignment]


def keep_layout(states: MutableMapping[Pair, State], nodes: Mapping[str, Any]) -> None:
    for key in [k for k in states if k[0] not in nodes or k[1] not in nodes[k[0]].services]:
        del states[key]


def invalid(states: Mapping[Pair, State], planned: Iterable[tuple[str, str | None, Action]]) -> str:
    """The first transition a plan would make that the machine does not allow ('' if none):
    services whose state is known only (a cluster from before these states were kept has none)."""
    now: dict[Pair, ServiceLife | None] = {}
    for node, service, action in planned:
        key = (node, service or "")
        if service is None or key not in states or action not in _AFTER:
            continue
        state = now.get(key, states[key][0])
        nxt = after(state, action)
        if nxt is None:
            return f"cannot {action.value} {service} on {node}: it is {state}" + (
                ", never configured" if state == "installed" else "")
        now[key] = nxt
    return ""


def view(states: Mapping[Pair, State], node: str, services: Iterable[str]) -> dict[str, dict[str, Any]]:
    return {s: {"state": states[(node, s)][0], "outdated": states[(node, s)][1]} for s in sorted(services) if (node, s) in states}
