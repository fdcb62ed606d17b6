"""`GET /v1/events`: a tenant's log as server-sent events, for people (decision 0016).

One route serves every command that reads raw events: `muster events` (a subject pattern),
`history JOB` and the follows of `--wait`, `job wait` and `watch` (a job's story), `history
--cluster`, `events --cluster`, `cluster list|show` (a cluster's own events, or every
cluster's). What was recorded up to the moment of the request is read from the log and sent,
then `end`; with `follow`, an ordered consumer takes over from there (no polling), and a job's
story ends with the job as `/v1/jobs/{id}/stream` does. A cluster's story with its jobs picks
up the cluster's new jobs as they start (their `JobRequested` names the cluster). A message
on a log subject that is not a valid event is sent as `skipped` (its seq, subject and why),
and the read goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import structlog
from aiohttp import web
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, DeliverPolicy

from contracts import subjects
from contracts.events import FINAL_JOB_EVENTS
from contracts.identity import Scope
from contracts.records import Recorded, Undecodable
from muster.bus.eventstore import EventStore, inflate, lenient_from_msg
from muster.bus.wire import close_push
from muster.ports.eventlog import EventLog
from muster.readmodel.story import job_of

from . import auth as auth_
from . import planner_view, priced
from .app import event_json, skipped_json
from .params import TRACKER, UUID_RE, BadParameter, int_query, last_event_id, not_an_id, shown, tenant_of
from .people import flag, needs_query, resolve_cluster, time_query
from .people_api import MAX_SEQ, RELATIVE_SUBJECT
from .provisioner_view import event_for
from .sse import deliveries, sse, stream_response
from .still import Still, end_if_lost
from .story import cluster_history

log = structlog.get_logger("muster.tracker")

JETSTREAM_LOG = web.AppKey("jetstream_log", EventStore)
Priced = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
"""An event as served, with the plan cost it records as the reader is shown it (priced.py)."""
"""The log as JetStream, for the live tail (an ordered consumer): set by `http.make_app`; every
other read goes through the tracker's event log port."""

_RELATIVE = re.compile(RELATIVE_SUBJECT)


@dataclass
class Selection:
    """Which events of the tenant a request gets."""

    tenant: str
    filters: list[str]
    job: str | None = None
    """A job's story: it ends when the job does."""
    cluster: str | None = None
    """A cluster's story with its jobs': `jobs` grows as its jobs start."""
    jobs: set[str] = field(default_factory=set)
    scope: Scope | None = None
    """What reading it needs, checked again before each event sent (still.py)."""

    def keeps(self, r: Recorded) -> bool:
        if self.cluster is None or r.subject == subjects.cluster_events(self.tenant, self.cluster):
            return True
        job = job_of(r.subject)
        if job is not None and r.type == "JobRequested" and getattr(r.event, "cluster_id", None) == self.cluster:
            self.jobs.add(job)
        return job in self.jobs

    async def read(self, store: EventLog, after: int, end: int) -> list[Recorded]:
        """What the log holds up to `end`, after `after`."""
        if self.cluster is not None:
            history = await cluster_history(store, self.tenant, self.cluster, up_to_seq=end)
            self.jobs.update(j for j in map(job_of, (r.subject for r in history)) if j)
            return [r for r in history if after < r.seq <= end]
        merged: dict[int, Recorded] = {}
        for f in self.filters:
            for r in await store.read(f, start_seq=after + 1, up_to_seq=end):
                merged[r.seq] = r
        return [merged[s] for s in sorted(merged) if s <= end]


async def _selection(request: web.Request, tenant: str) -> Selection:
    q = request.query  # one of job, cluster and subject; given several, the first of these
    with_jobs = flag(request, "jobs", True)
    needs_query(request)  # checked whatever it goes with: `?needs=AAA` without a cluster was a 200 (the OpenAPI fuzz)
    if "job" in q:
        job = q["job"]
        if not UUID_RE.fullmatch(job):
            raise BadParameter("job", not_an_id("job", job))
        job = job.lower()
        tracker = request.app[TRACKER]
        await auth_.may_read_job(request, tenant, job, tracker)
        if not await tracker.job_exists(tenant, job):
            raise web.HTTPNotFound(reason=f"no job {job} in tenant {tenant}")
        return Selection(tenant, subjects.job_history_filters(tenant, job), job=job,
                         scope=await auth_.job_scope(tenant, job, tracker))
    if "cluster" in q:
        if q["cluster"] == "*":
            every = Scope(tenant=tenant, kind="cluster", id="*")
            request[auth_.AUTHZ].require(needs_query(request), every)
            return Selection(tenant, [f"{subjects.EVT}.{tenant}.cluster.*"], scope=every)
        cluster_id, _ = await resolve_cluster(request, tenant, q["cluster"], needs=needs_query(request))
        own, scope = subjects.cluster_events(tenant, cluster_id), Scope(tenant=tenant, kind="cluster", id=cluster_id)
        if not with_jobs:
            return Selection(tenant, [own], scope=scope)
        return Selection(tenant, [own, *(f"{subjects.EVT}.{tenant}.{kind}.>" for kind in ("job", "layout", "task"))],
                         cluster=cluster_id, scope=scope)
    pattern = _under_tenant(q.get("subject", ">"), tenant)
    if len(pattern) > 1000 or not _RELATIVE.fullmatch(pattern):
        raise BadParameter("subject", f"subject {shown(pattern)} is not a subject pattern under muster.evt.<tenant>. "
                           "(tokens or *, separated by dots, with an optional > last)")
    auth_.may_read(request, Scope(tenant=tenant))
    return Selection(tenant, [f"{subjects.EVT}.{tenant}.{pattern}"], scope=Scope(tenant=tenant))


def _under_tenant(pattern: str, tenant: str) -> str:
    """A whole subject of the tenant's log (`muster.evt.acme.job.>`, as every event's `subject`
    reads) as the pattern under it, as `muster events --subject` takes it: it was read as
    `muster.evt.acme.muster.evt.acme.job.>`, and the stream said nothing, as for a quiet log. No
    relative pattern starts with `muster` (its first token is a kind: job, cluster, task, ...)."""
    if pattern != "muster" and not pattern.startswith("muster."):
        return pattern
    own = f"{subjects.EVT}.{tenant}."
    if pattern.startswith(own) and len(pattern) > len(own):
        return pattern[len(own):]
    named = pattern.removeprefix(f"{subjects.EVT}.").partition(".")[0] if pattern.startswith(f"{subjects.EVT}.") else ""
    where = ("no pattern: nothing follows the tenant" if named == tenant
             else f"in tenant {shown(named)}, not {tenant}" if named not in ("", "*", ">")
             else f"not in the log of tenant {tenant} ({own}>)")
    raise BadParameter("subject", f"subject {shown(pattern)} is {where}: give a pattern under {own} (job.*, "
                       f"task.<job>.>), or a whole subject starting with {own}")


async def stream_events(request: web.Request) -> web.StreamResponse:
    tenant = tenant_of(request)
    # A client opening the stream again (EventSource does, by itself) goes on after its last event,
    # as a job's progress stream does: it was sent the whole story again.
    after = max(int_query(request, "after", 0, 0, MAX_SEQ), last_event_id(request))
    since = time_query(request, "since")
    follow = flag(request, "follow", False)
    selection = await _selection(request, tenant)
    principal = request[auth_.PRINCIPAL]
    # A tenant's people see a provisioner's registration as they see the provisioner (no other
    # tenant named), and a planner as "a planner" (planner_view.py).
    viewer = None if planner_view.sees_deployment(principal) else tenant
    store = request.app[JETSTREAM_LOG]
    hidden, plans = priced.hidden_by(request[auth_.AUTHZ].may, tenant), request.app[TRACKER].plans

    async def priced_as(data: dict[str, Any]) -> dict[str, Any]:
        """An event's plan cost with the prices the reader may read (priced.py)."""
        return (await priced.events_shown(plans, tenant, str(data["event"].get("job_id")), [data], hidden))[0]

    end = (await store.js.stream_info(store.stream)).state.last_seq  # pinned: every filter is read up to it
    history = await selection.read(store, after, end)
    response = stream_response(request)
    await response.prepare(request)
    try:
        for r in history:
            await _send(response, r, since, viewer, priced_as)
        if follow and not await _job_over(store, selection, end):
            if not await _follow(response, store, selection, max(after, end), since, viewer, priced_as,
                                 auth_.still_reading(request, selection.scope)):
                return response  # the reader lost its right to it: the stream ended saying so
        await response.write(sse("end", None, {"seq": end}))
    except ConnectionError:
        pass  # the client went away
    except Exception:  # the response has started: all that is left is to end it
        log.exception("event stream failed", tenant=tenant)
    return response


async def _job_over(store: EventLog, selection: Selection, end: int) -> bool:
    """A job's story that has ended by `end`: its own subject's last event is a final one (a retry
    reopens it). It was judged by the last event sent, so a story followed from after its end
    (`after`, `Last-Event-ID`: a reconnect, `muster job cancel J --wait` repeated) was followed
    for ever, nothing to come."""
    if selection.job is None:
        return False
    own = [r for r in await store.read(subjects.job_events(selection.tenant, selection.job), up_to_seq=end)
           if not isinstance(r.event, Undecodable)]  # (a mark after the end does not reopen it)
    return bool(own) and own[-1].type in FINAL_JOB_EVENTS


async def _send(response: web.StreamResponse, r: Recorded, since: datetime | None, viewer: str | None,
                priced_as: Priced) -> None:
    if since is not None and r.time < since:
        return
    if isinstance(r.event, Undecodable):
        log.warning("undecodable message skipped", seq=r.seq, subject=r.subject)
        await response.write(sse("skipped", r.seq, skipped_json(r)))
    else:
        data = event_json(r)
        if r.type in priced.PRICED_EVENTS:  # a plan's cost: the prices the reader may read (priced.py)
            data = await priced_as(data)
        await response.write(sse("event", r.seq, data if viewer is None else planner_view.event_for(event_for(data, viewer))))


async def _follow(response: web.StreamResponse, store: EventStore, selection: Selection, after: int,
                  since: datetime | None, viewer: str | None, priced_as: Priced, still: Still) -> bool:
    """From just after `after`, live: a job's story until its last final event. False when the
    reader lost its right to the stream on the way (`still`, asked before each event)."""
    queue: asyncio.Queue[Msg] = asyncio.Queue()
    filters = selection.filters
    config = ConsumerConfig(filter_subjects=filters if len(filters) > 1 else None,
                            deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=after + 1)
    sub = await store.js.subscribe(filters[0], stream=subjects.EVENTS_STREAM, ordered_consumer=True, config=config,
                                   cb=queue.put, idle_heartbeat=2.0)
    try:
        async for msg in deliveries(queue, response):
            r = await inflate(store.bodies, lenient_from_msg(msg))
            if not selection.keeps(r):
                continue
            if await end_if_lost(response, still):
                return False
            await _send(response, r, since, viewer, priced_as)
            if selection.job is not None and r.type in FINAL_JOB_EVENTS and msg.metadata.num_pending == 0:
                return True
        return True
    finally:
        with contextlib.suppress(Exception):
            await close_push(sub)
