"""The document policies are evaluated on (pure): one request, as admission knows it.

    {
      "tenant": {"name": "default", "clusters": 3, "nodes": 12, "per_hour": 1.2},   # before this request
      "operation": "create", "now": "2026-11-28T12:00:00+00:00", "now_ns": ...,
      "requester": {"id": "uma", "role": "user"},
      "request": {...the command as sent: nodes, template, services, config...},
      "cluster": {"id", "name", "template", "provider", "status", "nodes", "labels", "lease_expires_at", "config"} | null,
      "layout": [{"hardwaretype", "imagetype", "services", "count"}],   # the cluster once the job is done
      "nodes": {"before": 0, "after": 5},
      "plan": {"tasks": 40, "actions": {"create": 5, "install": 15, ...}},
      "cost": {"per_hour": 0.45, "before_per_hour": 0.0, "by_hardware": {...}, "before_by_hardware": {...}, "unknown": []}
    }

The layout is grouped (hardware, image, services, count), not one entry per node: a policy on
a 10,000-node create reads a few groups, not 10,000 nodes. `now` comes from the caller (the
planner's clock), so evaluating twice gives the same answer.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from contracts.approvals import PlanCost
from contracts.layout import NodeSpec


def layout_groups(nodes: Iterable[NodeSpec]) -> list[dict[str, Any]]:
    counts = Counter((n.hardwaretype, n.imagetype, tuple(sorted(n.services))) for n in nodes)
    return [{"hardwaretype": h, "imagetype": i, "services": list(s), "count": c} for (h, i, s), c in sorted(counts.items())]


def document(*, tenant: str, operation: str, now: datetime, requester: str, role: str, request: Mapping[str, Any],
             cluster: Mapping[str, Any] | None, before: Sequence[NodeSpec], after: Sequence[NodeSpec],
             actions: Iterable[str], cost: PlanCost | None, tenant_clusters: int = 0, tenant_nodes: int = 0,
             tenant_per_hour: float = 0.0) -> dict[str, Any]:
    """`tenant_per_hour`: what the tenant's clusters cost an hour before this request (a budget
    policy adds this request's `cost.per_hour - cost.before_per_hour`)."""
    acts = Counter(actions)
    return {
        "tenant": {"name": tenant, "clusters": tenant_clusters, "nodes": tenant_nodes, "per_hour": round(tenant_per_hour, 6)},
        "operation": operation, "now": now.isoformat(), "now_ns": int(now.timestamp() * 1e9),
        "requester": {"id": requester, "role": role},
        "request": dict(request),
        "cluster": dict(cluster) if cluster is not None else None,
        "layout": layout_groups(after),
        "nodes": {"before": len(before), "after": len(after)},
        "plan": {"tasks": sum(acts.values()), "actions": dict(sorted(acts.items()))},
        "cost": cost.model_dump(mode="json", exclude={"per_node"}) if cost is not None else None,
    }
