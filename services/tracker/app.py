"""The tracker's use cases: status, locations, history and progress of jobs; clusters.

Status comes from the job's owner (a request on `muster.q.<tenant>.<principal>.job.<id>` with a short
timeout; only the owning planner answers) or, when nobody answers, from the job's events in
the log. Jobs' and clusters' locations come from the shared index (KV `locations`); where each
task runs is derived from the job's task events in the log when asked (`tasks.py`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import nats.errors
import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, DeliverPolicy

from contracts import subjects
from contracts.events import FINAL_JOB_EVENTS, FINAL_JOB_STATES
from contracts.records import Recorded, Undecodable
from muster.bus.bodies import Bodies
from muster.bus.connect import principal_of
from muster.bus.eventstore import inflate, lenient_from_msg
from muster.bus.repository import rebuild
from muster.bus.wire import close_push
from muster.cancels import next_item
from muster.ports.eventlog import EventLog
from muster.readmodel.clusters import cluster_view_of, fold_cluster
from muster.readmodel.locations import TASK, Record, cluster_key, job_key, task_location, updates_from
from muster.readmodel.observed import needs_catalog
from muster.readmodel.status import compose, layout_of, split_history, status_from_log, task_records
from muster.scaling import unserved_warning
from services.pool.domain.pool import Pool

from .adapters.kv import LocationIndex
from .answers import Answer, Answers
from .priced import Plans, has_cost
from .story import catalog_at
from .tasks import TaskLocations

log = structlog.get_logger("muster.tracker")



@dataclass(frozen=True)
class Page:
    items: list[dict[str, Any]]
    next_after: int | None


def event_json(r: Recorded) -> dict[str, Any]:
    """An event as the API answers it; a message that is not a valid event as its mark (type
    `Undecodable`, the event its `reason`)."""
    event = {"reason": r.event.reason} if isinstance(r.event, Undecodable) else r.event.model_dump(mode="json")
    return {"seq": r.seq, "subject": r.subject, "time": r.time.isoformat(), "type": r.type,
            "aggregate_id": r.aggregate_id, "version": r.version, "event": event}


def skipped_json(r: Recorded) -> dict[str, Any]:
    """A message that is not a valid event, named for a reader that skips it."""
    return {"seq": r.seq, "subject": r.subject, "reason": getattr(r.event, "reason", "")}


def skipped_warning(r: Recorded) -> str:
    return f"skipped #{r.seq} on {r.subject}: not a valid event ({getattr(r.event, 'reason', '')})"


def job_summary(record: Record) -> dict[str, Any]:
    state = record.get("state", "running")
    if record.get("paused") and state not in FINAL_JOB_STATES:
        state = "paused"
    elif record.get("approving") and state == "running":
        state = "waiting_for_approval"
    elif record.get("waiting") and state == "running":
        state = "waiting_for_resources"
    return {
        "id": record.ident["job_id"], "cluster_id": record.get("cluster_id"), "operation": record.get("operation"),
        "state": state, "owner": record.get("owner"), "requested_by": record.get("requested_by"),
        "started_at": record.get("started_at"), "finished_at": record.get("finished_at"), "error": record.get("error"),
        "tasks_total": record.get("tasks_total", 0), "seq": record.get("requested_seq", 0),
    }


def _page(items: Sequence[dict[str, Any]], after: int, limit: int, key: str = "seq") -> Page:
    rest = [i for i in items if i[key] > after]
    page = list(rest[:limit])
    return Page(page, page[-1][key] if len(rest) > limit else None)


@dataclass
class Tracker:
    store: EventLog
    index: LocationIndex | None = None
    owner_timeout: float = 0.25
    max_age: float = 0.05
    """How long an answer for a running job may be served again (while none of the job's
    locations changed): many clients polling one job cost its owner one request per window.
    A final job's answer is kept until its locations change, however old."""
    on_answer: Callable[[str], None] | None = None
    """Told the source ("owner" or "log") of every status it computes (for metrics)."""
    position_of: Callable[[str, str], int | None] | None = None
    """(pool, request id) -> place in the pool's line, from a live fold of the pools; without
    it a waiting job's place is folded from the pool's events."""
    stories: Any = None
    """Story snapshots (`muster.bus.snapshotstore.SnapshotStore`) a replay may start from."""
    nc: Client = field(kw_only=True)
    """For the live story of a job (an ordered consumer) and requests to a job's owner."""
    _answers: Answers = field(default_factory=Answers)
    _asking: dict[tuple[str, str], asyncio.Future[dict[str, Any] | None]] = field(default_factory=dict)
    _classes: dict[tuple[str, str], str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.tasks = TaskLocations(self.store)
        self.plans = Plans(self.store)
        """The jobs' first plans' nodes, for the costs of their answers (`priced.py`)."""

    # -- feeding the index from the log ----------------------------------------------------

    async def on_event(self, recorded: Recorded) -> tuple[int, int]:
        """Apply the location updates of one event to the jobs' and clusters' records: (how
        many it makes, how many changed the index; the others were repeats or superseded).
        Tasks have no record in the index (`tasks.py`)."""
        assert self.index is not None
        updates = [u for u in updates_from(recorded.seq, recorded.subject, recorded.time.isoformat(), recorded.event)
                   if u.kind != TASK]
        changed = 0
        for update in updates:
            changed += await self.index.apply(update)
        return len(updates), changed

    # -- jobs --------------------------------------------------------------------------------

    async def job_exists(self, tenant: str, job_id: str) -> bool:
        if self.index is not None and self.index.mirror.get(job_key(tenant, job_id)) is not None:
            return True
        return await self.store.last_seq(subjects.job_events(tenant, job_id)) > 0

    async def ask_owner(self, tenant: str, job_id: str) -> dict[str, Any] | None:
        """The owner's view of the job. Requests for one job that arrive while one is in
        flight share its answer (the answer is at most one round trip older)."""
        key = (tenant, job_id)
        pending = self._asking.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._ask_owner(tenant, job_id))
            self._asking[key] = pending
            pending.add_done_callback(lambda _: self._asking.pop(key, None))
        return await asyncio.shield(pending)

    async def with_cost_now(self, tenant: str, job_id: str, status: dict[str, Any]) -> dict[str, Any]:
        """A job that waits for approval, read from the log (the console's pages), with its
        cost at today's prices as its planner gives it (`approval.cost_now`); as it was when no
        planner answers."""
        approval = status.get("approval")
        if status.get("state") != "waiting_for_approval" or not approval or approval.get("cost_now"):
            return status
        view = await self.ask_owner(tenant, job_id)
        now = ((view or {}).get("approval") or {}).get("cost_now")
        return {**status, "approval": {**approval, "cost_now": now}} if now else status

    async def _ask_owner(self, tenant: str, job_id: str) -> dict[str, Any] | None:
        try:
            msg = await self.nc.request(subjects.job_query(tenant, principal_of(self.nc), job_id), b"", timeout=self.owner_timeout)
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
            return None
        try:
            view = json.loads(msg.data)
        except ValueError:
            return None
        if not isinstance(view, dict) or view.get("id") != job_id or view.get("tenant") != tenant:
            return None
        return view

    async def job_status_json(self, tenant: str, job_id: str) -> bytes | None:
        """`GET /v1/jobs/{id}` as JSON bytes, served again while the job's locations in the
        index do not change: a final job's answer for as long as that holds (a retried job
        changes them), a running job's for `max_age` seconds at most."""
        key = (tenant, job_id)
        version = self.index.mirror.job_version(tenant, job_id) if self.index is not None else -1
        cached = self._answers.get(key)
        now = time.monotonic()
        if cached is not None and version >= 0 and cached.version == version and (cached.final or now - cached.at < self.max_age):
            return cached.body
        status = await self.job_status(tenant, job_id)
        if status is None:
            return None
        body = json.dumps(status).encode()
        if version >= 0 and (self.max_age > 0 or status["state"] in FINAL_JOB_STATES):
            self._answers.put(key, Answer(now, version, status["state"] in FINAL_JOB_STATES, body))
        return body

    def written(self, tenant: str, job_id: str) -> None:
        """A write to the job went through this tracker: its next read is computed again. The
        index may not have applied what the write recorded yet (its version unchanged), and a
        client reads its own write (an approval refused by a policy, then a `GET`: the job is
        failed, not still waiting, docs/tracker.md)."""
        self._answers.forget((tenant, job_id))

    async def job_status(self, tenant: str, job_id: str) -> dict[str, Any] | None:
        if not await self.job_exists(tenant, job_id):
            return None
        view = await self.ask_owner(tenant, job_id)
        if self.on_answer is not None:
            self.on_answer("owner" if view is not None else "log")
        skipped: list[Recorded] = []
        if view is None:
            history = await self.store.read_many(subjects.job_history_filters(tenant, job_id))
            skipped = [r for r in history if isinstance(r.event, Undecodable)]
            status = status_from_log([r for r in history if not isinstance(r.event, Undecodable)])
            if status is not None and has_cost(status):  # its answer masks the cost with the plan just read
                self.plans.seen(tenant, job_id, history)
        else:
            locations = await self.task_locations(tenant, job_id, view)
            status = compose(view, locations, await self.layout(tenant, job_id, view), "owner")
        if status is not None:
            status["warnings"] = [*map(skipped_warning, skipped), *await self.warnings(tenant, status)]
            status = await self.place_in_line(status)
        return status

    async def warnings(self, tenant: str, status: dict[str, Any]) -> list[str]:
        """Why a running job may not move: its tasks are queued and no live provisioner serves
        its tenant and the class they are queued on (read now, from the presence records);
        which could, and the command. A provisioner of the tenant of another class does not
        take them: checking the tenant alone said nothing while they waited (docs/tracker.md)."""
        queued = int(status.get("counts", {}).get("queued", 0))
        if status.get("state") != "running" or not queued:
            return []
        from services.provisioner.presence import live_provisioners

        try:
            live = await live_provisioners(self.nc, timeout=3.0)
        except Exception:  # noqa: BLE001 - no warning rather than no status
            return []
        klass = await self.queued_class(tenant, str(status.get("id")))
        said = unserved_warning(tenant, klass, live, f"{queued} queued task(s) wait until one registers")
        return [said] if said else []

    async def queued_class(self, tenant: str, job_id: str) -> str:
        """The provisioner class the job's tasks are queued for (the cluster's, the same for
        every task of it), from its first `TaskQueued`; kept, since it never changes."""
        key = (tenant, job_id)
        if key not in self._classes:
            history = await self.store.read_many(subjects.job_filters(tenant, job_id))
            found = next((r.event.provisioner_class for r in history if r.event.type == "TaskQueued"), None)
            if found is None:
                return "default"
            while len(self._classes) >= 1000:
                del self._classes[next(iter(self._classes))]
            self._classes[key] = found
        return self._classes[key]

    async def place_in_line(self, status: dict[str, Any]) -> dict[str, Any]:
        """A job waiting for pool hosts: where its request stands in the pool's line."""
        wanted = status.get("resources")
        if not wanted or wanted.get("granted") or status.get("state") in FINAL_JOB_STATES:
            return status
        if self.position_of is not None:
            position = self.position_of(wanted["pool"], wanted["request_id"])
        else:
            pool = rebuild(Pool, await self.store.read(subjects.pool_events(wanted["pool"])))
            position = pool.position(wanted["request_id"]) if pool is not None else None
        return {**status, "resources": {**wanted, "position": position}}

    async def layout(self, tenant: str, job_id: str, view: dict[str, Any]) -> Any:
        """The job's layout from the index; from the log if the index has none yet (a job
        planned without one, or an index that lags)."""
        record = self.index.mirror.get(job_key(tenant, job_id)) if self.index is not None else None
        if record is not None and record.stamp("layout") is not None:
            return record.get("layout")
        return layout_of(await self.store.read(subjects.layout_events(tenant, job_id)))

    async def task_locations(self, tenant: str, job_id: str, view: dict[str, Any] | None = None) -> dict[str, Record]:
        """Where each task of the job runs (by task id), from its claims and outcomes in the log."""
        return await self.tasks.of(tenant, job_id, with_queued=False)

    async def job_location(self, tenant: str, job_id: str) -> dict[str, Any] | None:
        record = self.index.mirror.get(job_key(tenant, job_id)) if self.index is not None else None
        if record is not None:
            tasks = await self.tasks.of(tenant, job_id)
            return {"job_id": job_id, "cluster_id": record.get("cluster_id"), "owner": record.get("owner"),
                    "owner_seq": _stamp_seq(record, "owner"), "source": "index",
                    "tasks": [task_location(r) for _, r in sorted(tasks.items())]}
        history = await self.store.read_many(subjects.job_history_filters(tenant, job_id))
        job, _, task_history = split_history(history)
        requested = next((r for r in job if r.type == "JobRequested"), None)
        if requested is None:
            return None
        owned = [r for r in job if r.type in ("JobRequested", "JobAdopted")][-1]  # a restarted planner adopts
        tasks = task_records(task_history)
        return {"job_id": job_id, "cluster_id": requested.event.cluster_id, "owner": owned.event.planner,
                "owner_seq": owned.seq, "source": "log", "tasks": [task_location(r) for _, r in sorted(tasks.items())]}

    async def job_events(self, tenant: str, job_id: str, after: int, limit: int) -> Page | None:
        merged: dict[int, Recorded] = {}
        for f in subjects.job_history_filters(tenant, job_id):
            for r in await self.store.read(f, start_seq=after + 1):
                merged[r.seq] = r
        if not merged and not await self.job_exists(tenant, job_id):
            return None
        return _page([event_json(merged[s]) for s in sorted(merged)], after, limit)

    def list_jobs(self, tenant: str, cluster: str | None, state: str | None, after: int, limit: int) -> Page:
        assert self.index is not None
        jobs = sorted((job_summary(r) for r in self.index.mirror.jobs(tenant)), key=lambda j: j["seq"])
        chosen = [j for j in jobs if (cluster is None or j["cluster_id"] == cluster) and (state is None or j["state"] == state)]
        return _page(chosen, after, limit)

    async def follow(self, tenant: str, job_id: str, idle: float | None = None) -> AsyncGenerator[Recorded | None, None]:
        """The job's story from its first event, live, until its final event; yields None
        after `idle` seconds without an event (for keep-alives). What the log holds is read a
        filter at a time and merged (a consumer of the story's filters, one a wildcard, is
        slow over stored events: decision 0035); an ordered consumer follows what comes
        after: nothing polls. A final event that more events follow (the job was retried
        since) does not end the story: only the last one does."""
        filters = subjects.job_history_filters(tenant, job_id)
        js = self.nc.jetstream()
        end = (await js.stream_info(subjects.EVENTS_STREAM)).state.last_seq
        history = await self.store.read_many(filters, up_to_seq=end)
        for recorded in history:
            yield recorded
        events = [r for r in history if not isinstance(r.event, Undecodable)]  # (a mark after the end does not reopen it)
        if events and events[-1].type in FINAL_JOB_EVENTS:
            return
        queue: asyncio.Queue[Msg] = asyncio.Queue()
        config = ConsumerConfig(filter_subjects=filters, deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=end + 1)
        sub = await js.subscribe(subjects.job_events(tenant, job_id), stream=subjects.EVENTS_STREAM, ordered_consumer=True,
                                 config=config, cb=queue.put, idle_heartbeat=2.0)
        try:
            while True:
                try:
                    msg = await next_item(queue, idle)
                except TimeoutError:
                    yield None
                    continue
                recorded = await inflate(Bodies(js), lenient_from_msg(msg))
                yield recorded
                if recorded.type in FINAL_JOB_EVENTS and msg.metadata.num_pending == 0:
                    return
        finally:
            await close_push(sub)

    # -- clusters ------------------------------------------------------------------------------

    async def not_yet(self, seq: int | None, at: datetime | None) -> str | None:
        """Why a point asked of a replay is not a point of the log yet (None: it is): past
        its last event, or later than now. What is there is not known: answered as of the
        log's end, it would change as the log grows, and a point always gives the same answer.
        Given both, the earlier counts (as a replay cuts at it): either one in the past will do."""
        if seq is not None and at is not None:
            seq_later, at_later = await self.not_yet(seq, None), await self.not_yet(None, at)
            return seq_later if seq_later is not None and at_later is not None else None
        if seq is not None:
            end = (await self.nc.jetstream().stream_info(subjects.EVENTS_STREAM)).state.last_seq
            if seq > end:
                return f"seq {seq} is past the end of the log (its last event is #{end}): nothing is known there yet"
        now = datetime.now(UTC)
        if at is not None and at > now:
            return (f"at {at.isoformat()} is later than now ({now.isoformat(timespec='seconds')} by the "
                    "tracker's clock): nothing is known there yet")
        return None

    async def cluster(self, tenant: str, cluster_id: str) -> dict[str, Any] | None:
        history = await self.store.read(subjects.cluster_events(tenant, cluster_id))
        c = fold_cluster(history)
        if c is None:
            return None
        catalog = await catalog_at(self.store, tenant) if needs_catalog(c.drift()) else None  # what a repair now would do
        view = cluster_view_of(c, history[0].time, history[-1].time, history[-1].seq, catalog)
        if view is None:
            return None
        record = self.index.mirror.get(cluster_key(tenant, cluster_id)) if self.index is not None else None
        if record is not None and _stamp_seq(record, "job_id") > view["seq"]:
            view["job_id"] = record.get("job_id")  # a newer job started on it than its own events say
        return view

    def list_clusters(self, tenant: str, after: int, limit: int, name: str | None = None) -> Page:
        assert self.index is not None
        items = []
        for key in self.index.mirror.clusters_of_tenant.get(tenant, ()):
            r = self.index.mirror.get(key)
            if r is not None and (name is None or r.get("name") == name):
                items.append({"id": r.ident["cluster_id"], "name": r.get("name"), "template": r.get("template"), "status": r.get("status"),
                              "job_id": r.get("job_id"), "nodes": r.get("nodes", 0), "created_at": r.get("created_at"),
                              "expires_at": r.get("expires_at"),
                              "seq": _stamp_seq(r, "created_at") or r.seq})
        return _page(sorted(items, key=lambda c: c["seq"]), after, limit)

    async def cluster_jobs(self, tenant: str, cluster_id: str, after: int, limit: int) -> Page | None:
        known = self.index is not None and self.index.mirror.get(cluster_key(tenant, cluster_id)) is not None
        if not known and await self.store.last_seq(subjects.cluster_events(tenant, cluster_id)) == 0:
            return None
        return self.list_jobs(tenant, cluster_id, None, after, limit)


def _stamp_seq(record: Record, name: str) -> int:
    stamp = record.stamp(name)
    return stamp.seq if stamp is not None else 0
