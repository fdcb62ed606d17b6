"""Stories from the log that the operator commands and the console share: a cluster's whole
history (its events and its jobs'), and the cluster rebuilt as it was at a point of the log,
with each of its jobs as it stood then. Reads through the event store; folds with the read
model, so nothing depends on when it runs: the same point gives the same answer."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from contracts import subjects
from contracts.records import Recorded
from muster.bus.eventstore import EventStore
from muster.readmodel.clusters import cluster_view, job_ids, prefix
from muster.readmodel.status import status_from_log


async def cluster_history(store: EventStore, tenant: str, cluster_id: str, up_to_seq: int | None = None) -> list[Recorded]:
    """A cluster's whole story: its own events and all its jobs', in log order."""
    own = await store.read(subjects.cluster_events(tenant, cluster_id), up_to_seq=up_to_seq)
    merged = {r.seq: r for r in own}
    for job in job_ids(own):
        for r in await store.read_many(subjects.job_history_filters(tenant, job), up_to_seq=up_to_seq):
            merged[r.seq] = r
    return [merged[s] for s in sorted(merged)]



async def replay_cluster(store: EventStore, tenant: str, cluster_id: str, seq: int | None, at: datetime | None) -> dict[str, Any] | None:
    """The cluster and its jobs from the events up to log sequence `seq`, or up to time `at`."""
    own = prefix(await store.read(subjects.cluster_events(tenant, cluster_id), up_to_seq=seq), seq, at)
    if not own:
        return None
    included = own[-1].seq
    jobs = []
    for job in job_ids(own):
        history = prefix(await store.read_many(subjects.job_history_filters(tenant, job), up_to_seq=seq), seq, at)
        status = status_from_log(history)
        if status is not None:
            included = max(included, history[-1].seq)
            jobs.append({"id": job, "operation": status["operation"], "state": status["state"], "error": status["error"],
                         "counts": status["counts"], "tasks_total": status["tasks_total"]})
    view = cluster_view(own)
    assert view is not None
    return {"as_of": {"seq": seq if seq is not None else included, "at": at.isoformat() if at else None,
                      "cluster_event_seq": own[-1].seq, "cluster_event_time": own[-1].time.isoformat()},
            "cluster": view, "jobs": jobs}
