"""The Cluster aggregate: its layout, the results its nodes accumulated, and its status.

Every layout change is an event, so the cluster as it was before any job can be rebuilt
from the log (`muster replay`) and used as a rollback target.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate, event

from contracts.events import (
    ClusterConfigChanged,
    ClusterLayoutChanged,
    ClusterRequested,
    ClusterStatusChanged,
    NodeResultsRecorded,
)
from contracts.layout import NodeSpec


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
        # Shallow merge, as Coopr does: a later task's key replaces an earlier one.
        self.results.setdefault(payload.node_id, {}).update(payload.result)
        if payload.ipaddresses:
            self.ipaddresses[payload.node_id] = dict(payload.ipaddresses)
        if payload.hostname:
            self.hostnames[payload.node_id] = payload.hostname
        if payload.ipaddresses or payload.hostname:
            self.touched.append(payload.node_id)

    def record_results(self, node_id: str, task_id: str, result: dict[str, Any], ipaddresses: dict[str, str], hostname: str) -> bool:
        if not (result or ipaddresses or hostname):
            return False
        known = self.results.get(node_id, {})
        if (all(known.get(k) == v for k, v in result.items()) and (not ipaddresses or self.ipaddresses.get(node_id) == ipaddresses)
                and (not hostname or self.hostnames.get(node_id) == hostname)):
            return False  # taken in already (a redelivered outcome)
        self._results(
            NodeResultsRecorded(
                cluster_id=str(self.id), node_id=node_id, task_id=task_id,
                result=result, ipaddresses=ipaddresses, hostname=hostname,
            )
        )
        return True

    @event("ClusterStatusChanged")
    def _status(self, payload: ClusterStatusChanged) -> None:
        self.status = payload.status
        self.status_reason = payload.reason
        self.job_id = payload.job_id

    def set_status(self, status: str, job_id: str, reason: str = "") -> bool:
        if status == self.status and job_id == self.job_id:
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
            "nodes": len(self.nodes),
            "layout": [
                {"hardwaretype": h, "imagetype": i, "services": list(s), "count": c}
                for (h, i, s), c in sorted(groups.items())
            ],
        }
