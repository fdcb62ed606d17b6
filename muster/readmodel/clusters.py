"""A cluster as its events tell it, and the cluster as it was at a point of the log (pure).

The read-side fold of `muster.evt.<tenant>.cluster.<id>`: the planner's Cluster aggregate
decides, this replays what it recorded (`tests/unit/readmodel/test_clusters.py` compares
the two). Nothing here reads a clock: the same events give the same output, byte for byte.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from contracts.catalog import Service
from contracts.layout import NodeSpec
from contracts.records import Recorded

from . import desired, lifecycle
from .observed import Drift, as_repaired, drift

Catalog = Mapping[str, Service]
"""The tenant's services, for what a repair does about the drift (`observed.as_repaired`)."""


class ClusterState:
    """Folds one cluster's own events, in log order; unknown types are skipped."""

    def __init__(self) -> None:
        self.id = self.tenant = self.name = self.template = self.provider = self.job_id = ""
        self.config: dict[str, Any] = {}
        self.status = "pending"
        self.status_reason = ""
        self.nodes: dict[str, NodeSpec] = {}
        self.ipaddresses: dict[str, dict[str, str]] = {}
        self.hostnames: dict[str, str] = {}
        self.machines: dict[str, dict[str, str]] = {}
        """node -> what its provider said of the machine (MACHINE_RESULTS: provider id, host key fingerprint)."""
        self.version = 0
        """How many of its events were folded: the planner's `Cluster.version` (`if_version`)."""
        self.expires_at: datetime | None = None
        """The lease's end (None: forever)."""
        self.observed: dict[tuple[str, str], dict[str, str]] = {}
        """(node, service) -> what its last `status` task found: state, job, task."""
        self.services_state: dict[lifecycle.Pair, lifecycle.State] = {}
        """(node, service) -> (state, configured with, runs with) (`lifecycle`)."""
        self.stopped: list[str] = []
        """Services meant to be stopped on every node that has them; `stopped_on`: on some nodes only."""
        self.stopped_on: dict[str, list[str]] = {}

    def apply(self, e: Any) -> None:
        self.version += 1
        match e.type:
            case "ClusterRequested":
                self.id, self.tenant, self.name, self.template = e.cluster_id, e.tenant, e.name, e.template
                self.provider, self.config, self.job_id = e.provider, dict(e.config), e.job_id
            case "ClusterLayoutChanged":
                self.nodes = {n.id: n for n in e.nodes}
                self.observed = {k: v for k, v in self.observed.items() if k[0] in self.nodes}
                lifecycle.keep_layout(self.services_state, self.nodes)
            case "ClusterConfigChanged":
                self.config = dict(e.config)
            case "NodeResultsRecorded":
                for one in e.nodes:
                    shown = {k: str(one.result[k]) for k in MACHINE_RESULTS if one.result.get(k) not in (None, "")}
                    if shown:
                        self.machines[one.node_id] = {**self.machines.get(one.node_id, {}), **shown}
                    if one.ipaddresses:
                        self.ipaddresses[one.node_id] = dict(one.ipaddresses)
                    if one.hostname:
                        self.hostnames[one.node_id] = one.hostname
            case "ClusterStatusChanged":
                self.status, self.status_reason, self.job_id = e.status, e.reason, e.job_id
            case "ClusterLeaseChanged":
                self.expires_at = e.expires_at
            case "ServiceStateObserved":
                self.observed[(e.node_id, e.service)] = {"state": e.state, "job_id": e.job_id, "task_id": e.task_id,
                                                         "detail": e.detail}
                lifecycle.observed(self.services_state, e.node_id, e.service, e.state)
            case "ServicesMoved":
                lifecycle.apply_moves(self.services_state, e.changes, self.nodes)
            case "ServicesDesired":
                self.stopped = list(e.stopped)
                self.stopped_on = {s: list(on) for s, on in e.stopped_on.items()}

    def layout(self) -> list[dict[str, Any]]:
        """Node groups: how many nodes share hardware, image and services."""
        groups: dict[tuple[str, str, tuple[str, ...]], int] = {}
        for n in self.nodes.values():
            key = (n.hardwaretype, n.imagetype, tuple(sorted(n.services)))
            groups[key] = groups.get(key, 0) + 1
        return [{"hardwaretype": h, "imagetype": i, "services": list(s), "count": c} for (h, i, s), c in sorted(groups.items())]

    def drift(self, catalog: Catalog | None = None) -> list[Drift]:
        """`catalog`: the tenant's services, which say what the repair does about a failed one
        (None: each pair's own repair; the planner's aggregate has no catalog either)."""
        layout = self.layout_map()
        found = drift(layout, self.stopped_pairs(), {k: v["state"] for k, v in self.observed.items()},
                      lifecycle.outdated(self.services_state, self.config, layout), lifecycle.stale(self.services_state, self.config, layout))
        return as_repaired(found, catalog, self.services()) if catalog is not None else found

    def services(self) -> set[str]:
        return {s for n in self.nodes.values() for s in n.services}

    def layout_map(self) -> dict[str, list[str]]:
        return {n: spec.services for n, spec in self.nodes.items()}

    def stopped_pairs(self) -> set[desired.Pair]:
        return desired.stopped_pairs(self.layout_map(), self.stopped, self.stopped_on)

    def node_views(self) -> list[dict[str, Any]]:
        off = self.stopped_pairs()
        old = lifecycle.outdated(self.services_state, self.config, self.layout_map())  # once, not once per node
        return [
            {
                "id": n.id, "hostname": self.hostnames.get(n.id) or n.hostname, "hardwaretype": n.hardwaretype,
                "imagetype": n.imagetype, "services": sorted(n.services),
                "ipaddresses": dict(sorted(self.ipaddresses.get(n.id, {}).items())),
                "desired": desired.per_node(n.id, n.services, off),
                "observed": {s: self.observed[(n.id, s)]["state"] for s in sorted(n.services) if (n.id, s) in self.observed},
                "lifecycle": lifecycle.view(self.services_state, n.id, n.services, old),
                "machine": self.machines.get(n.id, {}),
            }
            for n in sorted(self.nodes.values(), key=lambda n: n.id)
        ]


MACHINE_RESULTS = ("providerid", "ssh_host_key_fingerprint")
"""The node results a person looks for first: which machine, and which host key it must present."""


def fold_cluster(history: Iterable[Recorded]) -> ClusterState | None:
    """The cluster after these (its own) events; None without a ClusterRequested."""
    state = ClusterState()
    for r in history:
        state.apply(r.event)
    return state if state.id else None


def cluster_view(history: Sequence[Recorded], catalog: Catalog | None = None) -> dict[str, Any] | None:
    """`GET /v1/clusters/{id}` and `muster replay`: the cluster after these events."""
    c = fold_cluster(history)
    if c is None:
        return None
    return cluster_view_of(c, history[0].time, history[-1].time, history[-1].seq, catalog)


def cluster_view_of(c: ClusterState, first: datetime, last: datetime, last_seq: int,
                    catalog: Catalog | None = None) -> dict[str, Any] | None:
    """The view of a folded cluster whose first and last events were at these times; `catalog`
    as for `ClusterState.drift`."""
    if not c.id:
        return None
    return {
        "id": c.id, "tenant": c.tenant, "name": c.name, "template": c.template, "provider": c.provider,
        "status": c.status, "status_reason": c.status_reason or None, "job_id": c.job_id, "version": c.version,
        "expires_at": c.expires_at.isoformat() if c.expires_at else None, "layout": c.layout(),
        "stopped": c.stopped, "stopped_on": c.stopped_on, "drift": [d.to_json() for d in c.drift(catalog)],
        "nodes": c.node_views(),
        "created_at": first.isoformat(), "updated_at": last.isoformat(), "seq": last_seq,
    }


@dataclass(frozen=True)
class ClusterInfo:
    """A cluster as the log tells it, for the Python client and `muster cluster list|show`."""

    id: str
    name: str
    tenant: str
    template: str
    provider: str
    status: str
    status_reason: str
    job_id: str
    config: dict[str, Any]
    nodes: list[NodeSpec]
    ipaddresses: dict[str, dict[str, str]] = field(default_factory=dict)
    hostnames: dict[str, str] = field(default_factory=dict)
    updated: str = ""
    version: int = 0
    expires_at: datetime | None = None
    observed: dict[tuple[str, str], str] = field(default_factory=dict)
    """(node, service) -> the state its last `status` task found."""
    observed_detail: dict[tuple[str, str], str] = field(default_factory=dict)
    """(node, service) -> the words of its last `status` task: the plugin's, or why it could not
    ask (an unknown state: the node's ssh refused, ...)."""
    drift: list[Drift] = field(default_factory=list)
    stopped: frozenset[desired.Pair] = frozenset()
    """(node, service) pairs meant to be stopped; every other one of the layout is meant to run."""

    @classmethod
    def from_history(cls, history: Sequence[Recorded], catalog: Catalog | None = None) -> ClusterInfo | None:
        """`catalog` as for `ClusterState.drift`."""
        c = fold_cluster(history)
        if c is None:
            return None
        return cls(id=c.id, name=c.name, tenant=c.tenant, template=c.template, provider=c.provider, status=c.status,
                   status_reason=c.status_reason, job_id=c.job_id, config=dict(c.config), nodes=list(c.nodes.values()),
                   ipaddresses=dict(c.ipaddresses), hostnames=dict(c.hostnames), updated=history[-1].time.isoformat(),
                   version=c.version, expires_at=c.expires_at,
                   observed={k: v["state"] for k, v in c.observed.items()},
                   observed_detail={k: v["detail"] for k, v in c.observed.items() if v.get("detail")}, drift=c.drift(catalog), stopped=frozenset(c.stopped_pairs()))

    @property
    def services(self) -> list[str]:
        return sorted({s for n in self.nodes for s in n.services})

    def with_catalog(self, catalog: Catalog) -> ClusterInfo:
        """The drift with what a repair does about it with this catalog (`observed.as_repaired`)."""
        own = [replace(d, after=()) for d in self.drift]
        return replace(self, drift=as_repaired(own, catalog, self.services))

    def with_drift(self, found: Iterable[Drift]) -> ClusterInfo:
        """The drift as a reader that has the catalog (the tracker) said it."""
        return replace(self, drift=list(found))

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "name": self.name, "tenant": self.tenant, "template": self.template, "provider": self.provider,
            "status": self.status, "status_reason": self.status_reason, "job_id": self.job_id, "updated": self.updated,
            "version": self.version, "expires_at": self.expires_at.isoformat() if self.expires_at else None,
            "drift": [d.to_json() for d in self.drift],
            "services": self.services, "config": self.config,
            "nodes": [
                {**n.model_dump(mode="json"), "hostname": self.hostnames.get(n.id) or n.hostname,
                 "ipaddresses": self.ipaddresses.get(n.id, {}), "desired": desired.per_node(n.id, n.services, set(self.stopped)),
                 "observed": {s: self.observed[(n.id, s)] for s in n.services if (n.id, s) in self.observed}}
                for n in self.nodes
            ],
        }


def job_ids(history: Iterable[Recorded]) -> list[str]:
    """The jobs a cluster's events name, in the order they first appear."""
    seen: dict[str, None] = {}
    for r in history:
        job = getattr(r.event, "job_id", None)
        if job:
            seen.setdefault(str(job), None)
    return list(seen)


def prefix(history: Sequence[Recorded], seq: int | None = None, at: datetime | None = None) -> list[Recorded]:
    """The events that make the state at a point: up to sequence `seq`, or every event up to
    the first one recorded after time `at` (a prefix, so the aggregate's versions stay whole)."""
    out = []
    for r in history:
        if (seq is not None and r.seq > seq) or (at is not None and r.time > at):
            break
        out.append(r)
    return out
