"""A cluster's page, told when the cluster changes after it was rendered (docs/ui.md, "Live
updates"): `/ui/clusters/{id}/stream?after=N`, server-sent events.

The page is rendered as of log sequence N and stays as rendered (a change form being typed is
not swept away): what this stream says is that it is no longer the cluster now. It follows the
cluster's own subject and the subjects of its jobs that had not ended when the stream opened
(an ordered consumer from N+1: nothing polls, nothing in between is missed), and sends one
`changed` per event, its type and line of history only; the page shows a notice with a link
that reloads it, and drops "busy with its job" once that job's final event comes. Like the job
page's stream it takes the tenant from the viewer's session and answers 404 for a cluster the
viewer may not read, and ends once the viewer may no longer read it (still.py).
"""

from __future__ import annotations

from aiohttp import web

from contracts import subjects
from contracts.events import FINAL_JOB_EVENTS, FINAL_JOB_STATES
from contracts.records import Undecodable
from muster.bus.bodies import Bodies
from muster.bus.eventstore import inflate, lenient_from_msg
from muster.readmodel.timeline import describe

from ..params import not_found
from ..sse import deliveries, sse, stream_response
from ..still import Still, end_if_lost
from .batches import following
from .kit import tracker_of
from .live import after_of, reader
from .session import NeedsSignIn, viewer_of


async def stream(request: web.Request) -> web.StreamResponse:
    read = await reader(request, "cluster")
    if isinstance(read, web.Response):
        return read
    viewer, cluster_id = read
    tracker = tracker_of(request)
    own = subjects.cluster_events(viewer.tenant, cluster_id)
    if not viewer.may_cluster("read", cluster_id) or await tracker.store.last_seq(own) == 0:
        return not_found("cluster", cluster_id, viewer.tenant)  # the answer for an unknown cluster
    after = after_of(request)
    jobs = tracker.list_jobs(viewer.tenant, cluster_id, None, 0, 10_000).items if tracker.index is not None else []
    filters = [own, *(subjects.job_events(viewer.tenant, j["id"]) for j in jobs if j["state"] not in FINAL_JOB_STATES)]

    async def still() -> str | None:
        try:
            now = await viewer_of(request)
        except NeedsSignIn as need:
            return need.reason
        return None if now.may_cluster("read", cluster_id) else f"{now.name} may no longer read cluster {cluster_id}"

    return await _follow(request, filters, after, still)


async def _follow(request: web.Request, filters: list[str], after: int, still: Still) -> web.StreamResponse:
    response = stream_response(request)
    await response.prepare(request)
    js = tracker_of(request).nc.jetstream()
    bodies = Bodies(js)
    async with following(js, filters, after) as queue:
        async for msg in deliveries(queue, response):
            if await end_if_lost(response, still):
                return response
            r = await inflate(bodies, lenient_from_msg(msg))
            if isinstance(r.event, Undecodable):
                continue  # (the page reloaded shows what the log holds)
            job_id = getattr(r.event, "job_id", None) if r.subject != filters[0] else None
            await response.write(sse("changed", r.seq, {"seq": r.seq, "time": r.time.isoformat(), "type": r.type,
                                                        "text": describe(r.event), "job_id": job_id,
                                                        "final": r.type in FINAL_JOB_EVENTS}))
    return response
