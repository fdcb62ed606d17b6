"""Observed service state and drift (pure): what the `status` tasks last found on each node,
against what the cluster should be (its layout; every service running on every node except
where a stop job stopped it: `desired.py`), and the repair of each difference.

The planner's Cluster aggregate and the read model's cluster fold both keep the same three inputs
and ask this module.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from contracts.events import ServiceState

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
    cluster's (docs/planner.md, "Services on nodes")."""

    @property
    def repair(self) -> str:
        """What the repair re-runs: `start`, `reinstall` (install and configure, then start),
        `stop`, `restart`; "" for an unknown state (check again, or look)."""
        if self.observed == "unknown":
            return ""
        if self.observed == "outdated":
            return "restart"
        if self.desired == "running":
            return "reinstall" if self.observed == "failed" else "start"
        return "stop"

    def to_json(self) -> dict[str, str]:
        return {"node": self.node, "service": self.service, "desired": self.desired, "observed": self.observed,
                "repair": self.repair}


def drift(nodes: Mapping[str, Iterable[str]], stopped: Collection[tuple[str, str]], observed: Mapping[tuple[str, str], str],
          outdated: Collection[tuple[str, str]] = ()) -> list[Drift]:
    """Every (node, service) of the layout whose last observed state is not the desired one, and
    every one meant to run that runs with an older config (`outdated`). `stopped`: the (node,
    service) pairs meant to be stopped (`desired.stopped_pairs`). Pairs never observed (no
    `status` action, never checked) are not drift by their state."""
    out = []
    for node in sorted(nodes):
        for service in sorted(set(nodes[node])):
            seen = observed.get((node, service))
            desired = "stopped" if (node, service) in stopped else "running"
            if seen is not None and seen != desired:
                out.append(Drift(node, service, desired, seen))
            elif desired == "running" and (node, service) in outdated:
                out.append(Drift(node, service, desired, "outdated"))
    return out
