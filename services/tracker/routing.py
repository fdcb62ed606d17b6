"""The tracker's routing table: what it consumes from the log, and which handler takes it.

One durable consumer, `tracker-index`, shared by every tracker (a queue group), feeds the
location index of jobs and clusters, from the job, cluster and layout subjects only: the
claims and outcomes of tasks never reach it, nor the job's task records (a subject of their own,
docs/decisions/0033); where a task runs is read from the log when asked (`tasks.py`). `grep` an event's name here to see that the tracker consumes it; the fold itself
is `muster/readmodel/locations.py` (`updates_from`). Other event types on those subjects are
acknowledged and ignored. A plan or a cluster's layout stored apart (`SIZED`, thousands of
nodes) reaches the index as its stub, and its body is read for the sizes of its lists only. The tracker also *reads* the log live (ordered consumers, no
durable): a job's story for `GET /v1/jobs/{id}/stream` and `muster watch`, see app.py.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from contracts import subjects
from contracts.events import FINAL_JOB_EVENTS
from contracts.records import Recorded
from muster.bus.bodies import Bodies, Offloaded, tenant_of
from muster.readmodel.locations import SIZED, job_key, sized
from muster.routing import Route

from .app import Tracker
from .metrics import TrackerMetrics
from .story import StoryWriter

INDEX = "tracker-index"
OLD_DURABLES = ("tracker-locations",)
"""The index's consumers of earlier versions (every event): deleted at start."""

ROUTES = (
    Route(INDEX, subjects.ALL_JOB_EVENTS, {
        "JobRequested": "on_location_event",
        "LayoutSolved": "on_location_event",
        "JobPlanned": "on_location_event",
        "RollbackPlanned": "on_location_event",
        "JobSucceeded": "on_location_event",
        "JobFailed": "on_location_event",
        "JobRolledBack": "on_location_event",
        "JobNeedsAttention": "on_location_event",
        "JobRetried": "on_location_event",
        "JobLayoutRetried": "on_location_event",
        "JobPaused": "on_location_event",
        "JobResumed": "on_location_event",
        "JobAdopted": "on_location_event",
        "JobCancelRequested": "on_location_event",
        "JobResourcesRequested": "on_location_event",
        "JobResourcesGranted": "on_location_event",
        "JobApprovalRequested": "on_location_event",
        "JobApproved": "on_location_event",
        "JobRejected": "on_location_event",
        "JobApprovalExpired": "on_location_event",
        "ClusterRequested": "on_location_event",
        "ClusterStatusChanged": "on_location_event",
        "ClusterLayoutChanged": "on_location_event",
        "ClusterLeaseChanged": "on_location_event",
    }, queue=INDEX, also=(subjects.ALL_CLUSTER_EVENTS, subjects.ALL_LAYOUT_EVENTS), stubs=SIZED),
)


class IndexFeeder:
    """What the routing table (routing.py) hands location events to: the index, counted. A
    big plan or layout comes as its stub (`stubs`): its body is read here for its sizes only."""

    def __init__(self, tracker: Tracker, metrics: TrackerMetrics, stories: StoryWriter | None = None,
                 bodies: Bodies | None = None) -> None:
        self.tracker = tracker
        self.metrics = metrics
        self.stories = stories
        self.bodies = bodies

    async def on_location_event(self, recorded: Recorded) -> None:
        if isinstance(recorded.event, Offloaded):
            if self.bodies is None:
                raise RuntimeError(f"{recorded.type} at {recorded.seq} is stored apart and this index reads no bodies")
            data = await self.bodies.get(recorded.subject, recorded.event)
            recorded = replace(recorded, event=await asyncio.to_thread(sized, data))  # megabytes: off the loop
        total, changed = await self.tracker.on_event(recorded)
        if self.stories is not None and recorded.type == "ClusterRequested":
            self.stories.made(tenant_of(recorded.subject), recorded.event.cluster_id)
        if self.stories is not None and recorded.type in FINAL_JOB_EVENTS:
            # A job of the cluster ended: a point `muster replay` can start from, if enough ran
            # since the last one (services/tracker/story.py). One tracker of the queue group gets it.
            tenant = tenant_of(recorded.subject)
            job = self._job(tenant, recorded.event.job_id)
            if job is not None and job.get("cluster_id"):
                self.stories.due(tenant, str(job.get("cluster_id")), recorded.seq, tasks=int(job.get("tasks_total", 0) or 0))
        self.metrics.location_events.inc()
        if total:
            self.metrics.location_updates.labels("applied").inc(changed)
            self.metrics.location_updates.labels("superseded").inc(total - changed)

    def _job(self, tenant: str, job_id: str) -> Any:
        """The job's record in the index (its cluster and size), if it has one."""
        return self.tracker.index.mirror.get(job_key(tenant, job_id)) if self.tracker.index is not None and job_id else None
