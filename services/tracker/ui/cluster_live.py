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

import asyncio
import contextlib
import re

from aiohttp import web
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, DeliverPolicy

from contracts import subjects
from contracts.events import FINAL_JOB_EVENTS, FINAL_JOB_STATES
from contracts.records import Undecodable
from muster.bus.bodies import Bodies
from muster.bus.eventstore import inflate, lenient_from_msg
from muster.bus.wire import close_push
from muster.readmodel.timeline import describe

from ..params import not_found
from ..sse import deliveries, sse, stream_response
from ..still import Still, end_if_lost
from .kit import tracker_of
from .session import NeedsSignIn, viewer_of

_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"status": status, "message": message, "parameter": None}}, status=status)


async def stream(request: web.Request) -> web.StreamResponse:
    try:
        viewer = await viewer_of(request)
    except NeedsSignIn as need:
        return _error(401, need.reason)
    cluster_id = request.match_info["cluster_id"]
    if not _UUID.fullmatch(cluster_id):
        return _error(404, f"{cluster_id[:80]!r} is not a cluster id")
    cluster_id = cluster_id.lower()
    tracker = tracker_of(request)
    own = subjects.cluster_events(viewer.tenant, cluster_id)
    if not viewer.may_cluster("read", cluster_id) or await tracker.store.last_seq(own) == 0:
        return not_found("cluster", cluster_id, viewer.tenant)  # the answer for an unknown cluster
    after = 0
    for raw in (request.query.get("after"), request.headers.get("Last-Event-ID")):
        if raw and re.fullmatch(r"[0-9]{1,18}", raw):
            after = max(after, int(raw))
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
    queue: asyncio.Queue[Msg] = asyncio.Queue()
    js = tracker_of(request).nc.jetstream()
    config = ConsumerConfig(filter_subjects=filters if len(filters) > 1 else None, deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                            opt_start_seq=after + 1)
    sub = await js.subscribe(filters[0], stream=subjects.EVENTS_STREAM, ordered_consumer=True, config=config, cb=queue.put,
                             idle_heartbeat=2.0)
    bodies = Bodies(js)
    try:
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
    except ConnectionError:
        pass  # the page went away
    finally:
        with contextlib.suppress(Exception):
            await close_push(sub)
    return response
