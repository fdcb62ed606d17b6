"""The Cluster aggregate: its layout, the results its nodes accumulated, and its status.

Every layout change is an event, so the cluster as it was before any job can be rebuilt
from the log (`muster replay`) and used as a rollback target.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate, event

from contracts.events import (
    ClusterConfigChanged,
    ClusterLayoutChanged,
    ClusterLeaseChanged,
    ClusterRequested,
    ClusterStatusChanged,
    NodeResult,
    NodeResultsRecorded,
    ServiceChange,
    ServicesDesired,
    ServicesMoved,
    ServiceState,
    ServiceStateObserved,
)
from contracts.layout import NodeSpec
from muster.readmodel import desired, lifecycle
from muster.readmodel.observed import Drift, drift

RESULTS_BYTES = 16 * 1024
"""About the most JSON of node results to put in one event: a wave's results go in a few
events, each well under the size that would move its body out of the message
(`muster/bus/bodies.py`, 32 KiB)."""


class Cluster(Aggregate):
    @staticmethod
    def create_id(payload: ClusterRequested) -> UUID:
        return UUID(payload.cluster_id)

    @event("ClusterRequested")
    def __init__(self, payload: ClusterRequested) -> None:
        self.tenant = payload.tenant
        self.name = payload.name
        self.template = payload.template
        self.provider = payload.provider
        self.config: dict[str, Any] = dict(payload.config)
        self.status = "pending"
        self.status_reason = ""
        self.job_id = payload.job_id
        self.provisioner_class = payload.provisioner_class
        self.owner = payload.owner
        self.expires_at: datetime | None = None
        """The lease's end (None: forever); `ClusterLeaseChanged`."""
        self.lease_max_at: datetime | None = None
        self.lease_step_s = 0.0
        self.lease_requests: set[str] = set()
        """Extensions taken (their request ids): a retried one changes nothing."""
        self.observed: dict[tuple[str, str], tuple[str, str]] = {}
        """(node, service) -> (state, job) its last `status` task found."""
        self.stopped: list[str] = []
        """Services meant to be stopped on every node that has them (a stop job); with
        `stopped_on`, every other (node, service) of the layout should run (`readmodel.desired`)."""
        self.stopped_on: dict[str, list[str]] = {}
        """service -> the nodes it is meant to be stopped on, when not all of them."""
        self.services_state: dict[lifecycle.Pair, lifecycle.State] = {}
        """(node, service) -> (state, configured with, runs with): each service on each node as
        a state machine (`muster.readmodel.lifecycle`)."""
        self.nodes: dict[str, NodeSpec] = {}
        self.results: dict[str, dict[str, Any]] = {}
        self.ipaddresses: dict[str, dict[str, str]] = {}
        self.hostnames: dict[str, str] = {}
        # What changed a node's entry in the nodes map, so the map is rewritten where it
        # changed, not whole (services/planner/nodemaps.py): a layout change counts up the
        # epoch; address and host name results since then are listed in order.
        self.layout_epoch = 0
        self.touched: list[str] = []

    @event("ClusterLayoutChanged")
    def _layout_changed(self, payload: ClusterLayoutChanged) -> None:
        self.nodes = {n.id: n for n in payload.nodes}
        self.layout_epoch += 1
        self.touched = []
        for gone in set(self.results) - set(self.nodes):
            self.results.pop(gone, None)
        for key in [k for k in self.observed if k[0] not in self.nodes]:
            del self.observed[key]
        lifecycle.keep_layout(self.services_state, self.nodes)

    def change_layout(self, job_id: str, nodes: list[NodeSpec]) -> bool:
        if [n.model_dump() for n in nodes] == [n.model_dump() for n in self.nodes.values()]:
            return False
        self._layout_changed(ClusterLayoutChanged(cluster_id=str(self.id), job_id=job_id, nodes=list(nodes)))
        return True

    @event("ClusterConfigChanged")
    def _config_changed(self, payload: ClusterConfigChanged) -> None:
        self.config = dict(payload.config)

    def change_config(self, job_id: str, config: dict[str, Any]) -> bool:
        if config == self.config:
            return False
        self._config_changed(ClusterConfigChanged(cluster_id=str(self.id), job_id=job_id, config=config))
        return True

    @event("NodeResultsRecorded")
    def _results(self, payload: NodeResultsRecorded) -> None:
        for one in payload.nodes:
            # Shallow merge, as Coopr does: a later task's key replaces an earlier one.
            self.results.setdefault(one.node_id, {}).update(one.result)
            if one.ipaddresses:
                self.ipaddresses[one.node_id] = dict(one.ipaddresses)
            if one.hostname:
                self.hostnames[one.node_id] = one.hostname
            if one.ipaddresses or one.hostname:
                self.touched.append(one.node_id)

    def record_results(self, node_id: str, task_id: str, result: dict[str, Any], ipaddresses: dict[str, str], hostname: str) -> bool:
        return self.record_many([NodeResult(node_id=node_id, task_id=task_id, result=result, ipaddresses=ipaddresses,
                                            hostname=hostname)])

    def record_many(self, results: Sequence[NodeResult]) -> bool:
        """Record what is new in these results (a redelivered outcome's are not), a bounded
        number to an event; False if nothing was new."""
        fresh: list[NodeResult] = []
        seen: dict[str, tuple[dict[str, Any], dict[str, str] | None, str | None]] = {}
        for one in results:
            if not (one.result or one.ipaddresses or one.hostname):
                continue
            known, ips, host = seen.get(one.node_id) or (self.results.get(one.node_id, {}), self.ipaddresses.get(one.node_id),
                                                          self.hostnames.get(one.node_id))
            if (all(known.get(k) == v for k, v in one.result.items()) and (not one.ipaddresses or ips == one.ipaddresses)
                    and (not one.hostname or host == one.hostname)):
                continue  # taken in already (a redelivered outcome)
            fresh.append(one)
            seen[one.node_id] = ({**known, **one.result}, one.ipaddresses or ips, one.hostname or host)
        part: list[NodeResult] = []
        size = 0
        for one in fresh:
            weight = len(one.model_dump_json())
            if part and size + weight > RESULTS_BYTES:
                self._results(NodeResultsRecorded(cluster_id=str(self.id), nodes=part))
                part, size = [], 0
            part.append(one)
            size += weight
        if part:
            self._results(NodeResultsRecorded(cluster_id=str(self.id), nodes=part))
        return bool(fresh)

    @event("ClusterLeaseChanged")
    def _lease(self, payload: ClusterLeaseChanged) -> None:
        self.expires_at, self.lease_max_at, self.lease_step_s = payload.expires_at, payload.max_at, payload.step_s
        if payload.request_id:
            self.lease_requests.add(payload.request_id)

    def change_lease(self, expires_at: datetime | None, max_at: datetime | None, step_s: float, by: str,
                     request_id: str | None = None) -> bool:
        if (expires_at, max_at, step_s) == (self.expires_at, self.lease_max_at, self.lease_step_s):
            return False
        self._lease(ClusterLeaseChanged(cluster_id=str(self.id), expires_at=expires_at, max_at=max_at, step_s=step_s,
                                        by=by, request_id=request_id))
        return True

    @event("ServiceStateObserved")
    def _observed(self, payload: ServiceStateObserved) -> None:
        self.observed[(payload.node_id, payload.service)] = (payload.state, payload.job_id)
        lifecycle.observed(self.services_state, payload.node_id, payload.service, payload.state)

    def observe(self, job_id: str, task_id: str, node: str, service: str, state: ServiceState,
                expected: ServiceState | None = None, detail: str = "") -> bool:
        if self.observed.get((node, service)) == (state, job_id):
            return False  # taken in already (a redelivered outcome, another attempt saying the same)
        self._observed(ServiceStateObserved(cluster_id=str(self.id), job_id=job_id, task_id=task_id, node_id=node,
                                            service=service, state=state, expected=expected, detail=detail[:500]))
        return True

    @event("ServicesMoved")
    def _moved(self, payload: ServicesMoved) -> None:
        lifecycle.apply_moves(self.services_state, payload.changes, self.nodes)

    def services_moved(self, job_id: str, changes: list[ServiceChange]) -> bool:
        if not changes:
            return False
        self._moved(ServicesMoved(cluster_id=str(self.id), job_id=job_id, changes=changes))
        return True

    @event("ServicesDesired")
    def _desired(self, payload: ServicesDesired) -> None:
        self.stopped = list(payload.stopped)
        self.stopped_on = {s: list(on) for s, on in payload.stopped_on.items()}

    def desire(self, job_id: str, stopped: set[desired.Pair]) -> bool:
        """Record the (node, service) pairs meant to be stopped from now on, if they changed."""
        everywhere, some = desired.compact(self.layout(), stopped)
        if (everywhere, some) == (sorted(self.stopped), self.stopped_on):
            return False
        self._desired(ServicesDesired(cluster_id=str(self.id), job_id=job_id, stopped=everywhere, stopped_on=some))
        return True

    def layout(self) -> dict[str, list[str]]:
        """node -> its services."""
        return {n: spec.services for n, spec in self.nodes.items()}

    def stopped_pairs(self) -> set[desired.Pair]:
        """The (node, service) pairs meant to be stopped."""
        return desired.stopped_pairs(self.layout(), self.stopped, self.stopped_on)

    def drift(self) -> list[Drift]:
        layout = self.layout()
        return drift(layout, self.stopped_pairs(), {k: state for k, (state, _) in self.observed.items()},
                     lifecycle.outdated(self.services_state, self.config, layout), lifecycle.stale(self.services_state, self.config, layout))

    @event("ClusterStatusChanged")
    def _status(self, payload: ClusterStatusChanged) -> None:
        self.status = payload.status
        self.status_reason = payload.reason
        self.job_id = payload.job_id

    def set_status(self, status: str, job_id: str, reason: str = "") -> bool:
        if status == self.status and job_id == self.job_id and reason == self.status_reason:
            return False
        self._status(ClusterStatusChanged(cluster_id=str(self.id), status=status, job_id=job_id, reason=reason))  # type: ignore[arg-type]
        return True

    def hostname(self, node_id: str) -> str:
        return self.hostnames.get(node_id) or self.nodes[node_id].hostname

    def summary(self) -> dict[str, Any]:
        groups: dict[tuple[str, str, tuple[str, ...]], int] = {}
        for n in self.nodes.values():
            key = (n.hardwaretype, n.imagetype, tuple(sorted(n.services)))
            groups[key] = groups.get(key, 0) + 1
        return {
            "id": str(self.id),
            "name": self.name,
            "tenant": self.tenant,
            "template": self.template,
            "status": self.status,
            "job_id": self.job_id,
            "version": self.version,
            "expires_at": self.expires_at.isoformat() if self.expires_at else None,
            "nodes": len(self.nodes),
            "layout": [
                {"hardwaretype": h, "imagetype": i, "services": list(s), "count": c}
                for (h, i, s), c in sorted(groups.items())
            ],
        }
