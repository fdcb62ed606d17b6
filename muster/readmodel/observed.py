"""Observed service state and drift (pure): what the `status` tasks last found on each node,
against what the cluster should be (its layout; every service running on every node except
where a stop job stopped it: `desired.py`), and the repair of each difference.

The planner's Cluster aggregate and the read model's cluster fold both keep the same three inputs
and ask this module. What a repair does about a pair can also depend on the tenant's catalog
(`as_repaired`, the one rule: the planner plans its repair with it): the readers that show the
drift (the tracker's cluster view and replay, the console, `muster cluster drift`, the Python
client) read the catalog from the log when it matters.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from contracts.catalog import Service
from contracts.events import ServiceState
from muster.catalog.needs import runtime_needs

STATES: dict[str, ServiceState] = {"running": "running", "stopped": "stopped", "failed": "failed", "unknown": "unknown"}
LSB_STATE: dict[int, ServiceState] = {0: "running", 1: "failed", 2: "failed", 3: "stopped"}
"""The exit status of an LSB init script's `status` (0 running, 1/2 dead, 3 not running,
4 unknown) -> our state; anything else is unknown."""


def state_of(value: object) -> ServiceState:
    """A plugin's answer as one of STATES (anything else: unknown)."""
    return STATES.get(str(value or "").strip().lower(), "unknown")


@dataclass(frozen=True)
class Drift:
    node: str
    service: str
    desired: str
    """running or stopped."""
    observed: str
    """running, stopped, failed or unknown; or `outdated`: running with a config older than the
    cluster's (docs/planner.md, "Services on nodes"); or `stale`: outdated, and its node was
    not even configured with the cluster's config (another one, or the same written for other
    members: an expand or a shrink since)."""
    after: tuple[str, ...] = ()
    """A failed service's needs (runtime dependencies, on any node) that are down too
    (`as_repaired`): the repair starts it after them, it does not install it again."""

    @property
    def repair(self) -> str:
        """What the repair re-runs: `start`, `reinstall` (install and configure, then start),
        `stop`, `restart`, `reconfigure` (configure, then restart); `reconnect` for an unknown
        state (its status could not be asked: the node's provider confirms the node, bringing
        its ssh back where it can, then the service is started, which leaves one that runs as
        it is, and asked again)."""
        if self.observed == "unknown":
            return "reconnect"
        if self.observed == "outdated":
            return "restart"
        if self.observed == "stale":
            return "reconfigure"
        if self.desired == "running":
            return "reinstall" if self.observed == "failed" and not self.after else "start"
        return "stop"

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "service": self.service, "desired": self.desired, "observed": self.observed,
                "repair": self.repair, "after": list(self.after)}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Drift:
        after = data.get("after") or ()
        return cls(str(data["node"]), str(data["service"]), str(data["desired"]), str(data["observed"]),
                   tuple(str(s) for s in after) if isinstance(after, list | tuple) else ())


def drift(nodes: Mapping[str, Iterable[str]], stopped: Collection[tuple[str, str]], observed: Mapping[tuple[str, str], str],
          outdated: Collection[tuple[str, str]] = (), stale: Collection[tuple[str, str]] = ()) -> list[Drift]:
    """Every (node, service) of the layout whose last observed state is not the desired one, and
    every one meant to run that runs with an older config (`outdated`; `stale` among them: not
    even configured with the cluster's). `stopped`: the (node, service) pairs meant to be
    stopped (`desired.stopped_pairs`). Pairs never observed (no `status` action, never checked)
    are not drift by their state."""
    out = []
    for node in sorted(nodes):
        for service in sorted(set(nodes[node])):
            seen = observed.get((node, service))
            desired = "stopped" if (node, service) in stopped else "running"
            if seen is not None and seen != desired:
                out.append(Drift(node, service, desired, seen))
            elif desired == "running" and (node, service) in outdated:
                out.append(Drift(node, service, desired, "stale" if (node, service) in stale else "outdated"))
    return out


def needs_catalog(found: Iterable[Drift]) -> bool:
    """Whether the catalog could change what the repair does about this drift (only a failed
    service's repair depends on it): the readers read the catalog only then."""
    return any(d.repair == "reinstall" for d in found)


def as_repaired(found: Sequence[Drift], catalog: Mapping[str, Service] | None, on_cluster: Iterable[str]) -> list[Drift]:
    """The drift with each pair's repair as `muster cluster repair` plans it with this catalog
    (the planner's `observed.repairs` asks this): a service failed while something it needs
    running (on any node: `muster/catalog/needs.py`) is down too, such as a replica whose
    primary died, may have failed for that alone, so it is started after that, not installed
    and configured again. `catalog`: the tenant's services (None: unknown; each pair's own
    repair, as when the catalog cannot plan: a service it no longer has, a cycle)."""
    if catalog is None or not needs_catalog(found):
        return list(found)
    needs = runtime_needs(catalog, on_cluster)
    if needs is None:
        return list(found)
    down = {d.service for d in found if d.repair in ("start", "reinstall")}
    return [replace(d, after=tuple(sorted(needs.get(d.service, frozenset()) & down))) if d.repair == "reinstall" else d
            for d in found]
