"""Each service on each node as a small state machine (pure): installed -> configured ->
running / stopped, and `outdated` while it runs with a config other than the cluster's.

Folded by the planner's Cluster aggregate and by the read model's cluster fold alike, from the
cluster's own events: `ServicesMoved` (what a job did, recorded once when it ends, with the
config each service was configured with and runs with, as digests) and `ServiceStateObserved`
(a `status` task's finding is the real state). `outdated` is not recorded: it is a running
service whose config is not the cluster's now, so a config put back makes it current again.
"The cluster's config" includes who has the services its macros name: a service configured
before an expand or a shrink changed them is `stale` (its file names the old members).
docs/planner.md, "Services on nodes".
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable, Mapping, MutableMapping
from typing import Any

from contracts.catalog import Action
from contracts.events import ServiceChange, ServiceLife
from muster.macros import services_named

Pair = tuple[str, str]
"""(node, service)"""
State = tuple[ServiceLife, str | None, str | None]
"""(state, the digest of the config it was configured with, of the config it runs with)"""

_AFTER: dict[Action, dict[str | None, ServiceLife]] = {
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


def digest(config: Mapping[str, Any], nodes: Mapping[str, Iterable[str]] | None = None) -> str:
    """The config's digest; with the cluster's `nodes` (node -> services), also of who has the
    services its macros name (`%ip.service.nats%`): a node's expanded config depends on them, so
    after an expand or a shrink the other nodes' configs are stale. `<config>.<members>` then;
    `<config>` alone for a config without such macros (as every digest was before)."""
    text = hashlib.sha256(json.dumps(config, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]
    named = services_named(config) if nodes is not None else set()
    if not named:
        return text
    members = {s: sorted(n for n, has in nodes.items() if s in has) for s in sorted(named)}  # type: ignore[union-attr]
    return f"{text}.{hashlib.sha256(json.dumps(members).encode()).hexdigest()[:8]}"


def _current(recorded: str | None, now: str) -> bool:
    """A recorded digest is the cluster's now; one without members (recorded before they were
    kept) is judged by the config alone."""
    return recorded is not None and (recorded == now or ("." not in recorded and recorded == now.split(".")[0]))


def after(state: ServiceLife | None, action: Action) -> ServiceLife | None:
    """The state after `action`, or None when the machine does not allow it."""
    return _AFTER[action].get(state) if action in _AFTER else state


def moves(states: Mapping[Pair, State], done: Iterable[tuple[str, str, Action, str]]) -> list[ServiceChange]:
    """What a job's succeeded service tasks (node, service, action, digest of the config the task
    carried), in the order they ran on each pair, left of the states before it: one change per
    pair that moved, grouped, with the state it was in before (`before`: a reader of the log sees
    what moved from where). A transition the machine does not know from there records nothing
    (no fact to go by)."""
    final: dict[Pair, tuple[str, str | None, str | None]] = {}
    for node, service, action, config in done:
        key = (node, service)
        if action is Action.REMOVE:
            final[key] = ("removed", None, None)
            continue
        if action not in _AFTER:
            continue  # bootstrap, status: no change of state
        state, configured, running = final.get(key, states.get(key, (None, None, None)))
        nxt = after(None if state == "removed" else state, action)  # type: ignore[arg-type]
        if nxt is None:
            continue
        if action is Action.CONFIGURE:
            configured = config
        elif action is Action.START:
            running = configured
        elif action in (Action.STOP, Action.INSTALL):
            running = None
        final[key] = (nxt, configured, running)
    groups: dict[tuple[str, str, str | None, str | None, str | None], list[str]] = {}
    for (node, service), (state, configured, running) in final.items():
        before = states.get((node, service), (None, None, None))[0]
        groups.setdefault((service, state, configured, running, before), []).append(node)
    return [ServiceChange(service=s, state=st, configured=c, running=r, nodes=sorted(nodes), before=b)  # type: ignore[arg-type]
            for (s, st, c, r, b), nodes in sorted(groups.items(), key=lambda g: tuple(str(x) for x in g[0]))]


def apply_moves(states: MutableMapping[Pair, State], changes: Iterable[ServiceChange], nodes: Mapping[str, Any]) -> None:
    for change in changes:
        for node in change.nodes:
            key = (node, change.service)
            if change.state == "removed" or node not in nodes or change.service not in nodes[node].services:
                states.pop(key, None)
            else:
                states[key] = (change.state, change.configured, change.running)


def observed(states: MutableMapping[Pair, State], node: str, service: str, seen: str) -> None:
    """A check's finding is the real state: running or stopped, for a service the machine knows
    (started outside muster, it runs with the config it was configured with)."""
    key = (node, service)
    if key in states and seen in ("running", "stopped") and states[key][0] != seen:
        state, configured, _ = states[key]
        states[key] = (seen, configured, configured if seen == "running" else None)  # type: ignore[assignment]


def keep_layout(states: MutableMapping[Pair, State], nodes: Mapping[str, Any]) -> None:
    for key in [k for k in states if k[0] not in nodes or k[1] not in nodes[k[0]].services]:
        del states[key]


def outdated(states: Mapping[Pair, State], config: Mapping[str, Any], nodes: Mapping[str, Iterable[str]] | None = None) -> set[Pair]:
    """Running services whose config is known and is not the cluster's `config` (on its `nodes`)."""
    now = digest(config, nodes)
    return {k for k, (state, _, running) in states.items() if state == "running" and running is not None and not _current(running, now)}


def stale(states: Mapping[Pair, State], config: Mapping[str, Any], nodes: Mapping[str, Iterable[str]] | None = None) -> set[Pair]:
    """The outdated services whose node has not even been configured with the cluster's config:
    another config, or the same one written for other members (an expand or a shrink since, a
    configure of other nodes only). A restart would start them on the old file again: their
    repair configures them first."""
    now = digest(config, nodes)
    return {k for k in outdated(states, config, nodes) if not _current(states[k][1], now)}


def invalid(states: Mapping[Pair, State], planned: Iterable[tuple[str, str | None, Action]]) -> str:
    """The first transition a plan would make that the machine does not allow ('' if none):
    services whose state is known only."""
    if not states:
        return ""  # (a new cluster: nothing known, its tasks are not walked)
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


def view(states: Mapping[Pair, State], node: str, services: Iterable[str], old: Collection[Pair]) -> dict[str, dict[str, Any]]:
    """`old`: the cluster's `outdated` pairs."""
    return {s: {"state": states[(node, s)][0], "outdated": (node, s) in old} for s in sorted(services) if (node, s) in states}
