"""A cluster as the tracker shows it, and the cluster as it was at a point of the log (pure).

The state is the planner's own Cluster aggregate rebuilt from the cluster's events, so a
replay shows what the planner knew then. Nothing here reads a clock: the same events give the
same output, byte for byte.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from muster.bus.eventstore import Recorded
from muster.bus.repository import rebuild
from services.planner.domain.cluster import Cluster


def cluster_view(history: Sequence[Recorded]) -> dict[str, Any] | None:
    """The cluster after these (its own) events, or None if there are none."""
    cluster = rebuild(Cluster, history)
    if cluster is None:
        return None
    summary = cluster.summary()
    nodes = [
        {
            "id": n.id, "hostname": cluster.hostnames.get(n.id) or n.hostname, "hardwaretype": n.hardwaretype,
            "imagetype": n.imagetype, "services": sorted(n.services), "ipaddresses": dict(sorted(cluster.ipaddresses.get(n.id, {}).items())),
        }
        for n in sorted(cluster.nodes.values(), key=lambda n: n.id)
    ]
    return {
        "id": summary["id"], "tenant": summary["tenant"], "name": summary["name"], "template": summary["template"],
        "provider": cluster.provider, "status": summary["status"], "status_reason": cluster.status_reason or None,
        "job_id": summary["job_id"], "layout": summary["layout"], "nodes": nodes,
        "created_at": history[0].time.isoformat(), "updated_at": history[-1].time.isoformat(), "seq": history[-1].seq,
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
