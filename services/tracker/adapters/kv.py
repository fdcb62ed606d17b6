"""The location index in the JetStream KV bucket `locations`, shared by every tracker.

Writes are compare-and-set (`update(last=revision)`): a tracker merges an update into the
record it knows and writes it only if nobody wrote the key since; otherwise it re-reads and
merges again. Because merging is a per-field maximum (domain/locations.py), trackers that
race on a key, or see events out of order, still converge.

Each tracker mirrors the whole bucket in memory through an ordered consumer on the bucket's
stream (last value per key, then every change), so reads never leave the process; a restarted
tracker loads the mirror before it serves.

A mirror whose consumer is lost (a server that restarted, or died with it in a cluster) would
serve stale locations: it is re-created from the last change it delivered when the connection
comes back (the server may have restarted), and when a write of this tracker's is not delivered
back while nothing else is (`ECHO_S`). The consumer's idle heartbeat (`IDLE_HEARTBEAT_S`), which
nats-py re-creates it on when two do not come, is the rare net under those: a consumer lost on
another server of a cluster while this tracker writes nothing. It was 1 s, which woke an idle
tracker 1.5 times a second (docs/benchmarks.md, "Idle").
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import structlog
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy, KeyValueConfig, StorageType
from nats.js.errors import (
    BucketNotFoundError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NoStreamResponseError,
    ServiceUnavailableError,
)
from nats.js.kv import KV_DEL, KV_OP, KV_PURGE, KeyValue

from contracts import subjects
from muster.bus import wire
from muster.bus.connect import on_reconnect
from muster.bus.replicas import ensure_replicas, kv_stream
from muster.bus.wire import close_push
from muster.readmodel.locations import CLUSTER, JOB, TASK, Record, Update, merge

log = structlog.get_logger("muster.tracker")

MAX_CAS_TRIES = 50
OPEN_RETRIES = 6
"""Tries of opening the bucket after the first (0.2 s doubling: ~12 s): on a young cluster a
bucket another tracker is creating answers once its stream has a leader."""


IDLE_HEARTBEAT_S = 30.0
"""The mirror's consumer's idle heartbeat: a consumer lost while the connection stays and this
tracker writes nothing is re-created within two of them."""
ECHO_S = 5.0
"""A write of ours the mirror has not delivered back this long after, while it delivered nothing
else meanwhile: its consumer is taken as lost and re-created."""


class IndexConflict(Exception):
    """A key kept changing under us: the update is retried later (redelivery)."""


class Mirror:
    """The bucket's records by key, with the secondary indexes the API needs."""

    def __init__(self) -> None:
        self.records: dict[str, tuple[int, Record]] = {}
        self.tasks_of: dict[tuple[str, str], set[str]] = defaultdict(set)
        self.jobs_of_tenant: dict[str, set[str]] = defaultdict(set)
        self.clusters_of_tenant: dict[str, set[str]] = defaultdict(set)
        self.versions: dict[tuple[str, str], int] = {}
        self.changed = asyncio.Condition()
        self.listeners: list[Callable[[str, Record], None]] = []

    def offer(self, key: str, revision: int, record: Record) -> bool:
        """Take a record at a revision, unless we already have that revision or a newer one."""
        held = self.records.get(key)
        if held is not None and held[0] >= revision:
            return False
        self.records[key] = (revision, record)
        ident = record.ident
        tenant = ident.get("tenant", "")
        if record.kind == TASK:
            self.tasks_of[(tenant, ident["job_id"])].add(key)
        elif record.kind == JOB:
            self.jobs_of_tenant[tenant].add(key)
        elif record.kind == CLUSTER:
            self.clusters_of_tenant[tenant].add(key)
        if "job_id" in ident:
            job = (tenant, ident["job_id"])
            self.versions[job] = self.versions.get(job, 0) + 1
        for listener in self.listeners:
            listener(key, record)
        return True

    def get(self, key: str) -> Record | None:
        held = self.records.get(key)
        return held[1] if held is not None else None

    def revision(self, key: str) -> int:
        held = self.records.get(key)
        return held[0] if held is not None else 0

    def job_version(self, tenant: str, job_id: str) -> int:
        """Changes whenever any record of the job changes (a cache key)."""
        return self.versions.get((tenant, job_id), 0)

    def tasks(self, tenant: str, job_id: str) -> list[Record]:
        return [self.records[k][1] for k in sorted(self.tasks_of.get((tenant, job_id), ()))]

    def jobs(self, tenant: str) -> list[Record]:
        return [self.records[k][1] for k in self.jobs_of_tenant.get(tenant, ())]

    async def notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    async def wait_for(self, predicate: Callable[[], bool], timeout: float) -> None:
        """Until `predicate()` holds (checked after every change); TimeoutError past the deadline."""
        async with asyncio.timeout(timeout):
            async with self.changed:
                await self.changed.wait_for(predicate)


async def _bucket(js: JetStreamContext, bucket: str, replicas: int) -> KeyValue:
    try:
        kv = await js.key_value(bucket)
    except BucketNotFoundError:
        return await js.create_key_value(
            KeyValueConfig(bucket=bucket, history=1, storage=StorageType.FILE, replicas=replicas,
                           description="muster tracker: job, task and cluster locations (docs/tracker.md)")
        )
    if replicas > 1:  # (made with fewer by an older version: given them)
        await ensure_replicas(js, kv_stream(bucket), replicas)
    return kv


class LocationIndex:
    def __init__(self, js: JetStreamContext, kv: KeyValue, bucket: str = subjects.LOCATIONS_BUCKET) -> None:
        self.js = js
        self.kv = kv
        self.bucket = bucket
        self.mirror = Mirror()
        self.ready = asyncio.Event()
        self._sub: Any = None
        self._prefix = f"$KV.{bucket}."
        self._delivered = 0
        """The bucket's stream sequence of the last change the mirror's consumer delivered."""
        self._written = 0
        """The latest revision this tracker wrote, waited for back from the consumer."""
        self._echo: asyncio.TimerHandle | None = None
        self._restarts: set[asyncio.Task[Any]] = set()

    @classmethod
    async def open(cls, js: JetStreamContext, bucket: str = subjects.LOCATIONS_BUCKET, replicas: int = 1) -> LocationIndex:
        """The bucket, made if missing. Two trackers started together on a young cluster: one
        makes the 3-replica bucket, and the other's look-up can time out (or be refused, 503)
        until its stream has a leader; it asks again a few times before it gives up (seen as a
        tracker that exited during its start, in the partition soak on a loaded machine)."""
        for attempt in range(OPEN_RETRIES + 1):
            try:
                return cls(js, await _bucket(js, bucket, replicas), bucket)
            except (NatsTimeout, NoStreamResponseError, ServiceUnavailableError) as err:
                if attempt == OPEN_RETRIES:
                    raise
                log.info("locations bucket not ready; asking again", error=str(err) or type(err).__name__)
                await asyncio.sleep(0.2 * 2**attempt)  # a bounded retry of one request, not a poll
        raise AssertionError("unreachable")

    # -- the mirror -------------------------------------------------------------------------

    async def start(self, timeout: float = 30.0) -> None:
        """Follow the bucket; returns once the mirror holds every key that existed at start."""
        stream = f"KV_{self.bucket}"
        if (await self.js.stream_info(stream)).state.messages == 0:
            self.ready.set()
        self._sub = await self.js.subscribe(
            f"{self._prefix}>", stream=stream, ordered_consumer=True, deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
            cb=self._on_msg, idle_heartbeat=IDLE_HEARTBEAT_S,
        )
        on_reconnect(wire.connection_of(self.js), self._reconnected)
        try:
            await asyncio.wait_for(self.ready.wait(), timeout)
        except TimeoutError:
            log.warning("location mirror still loading; serving what it has", keys=len(self.mirror.records))

    async def stop(self) -> None:
        if self._echo is not None:
            self._echo.cancel()
            self._echo = None
        for task in list(self._restarts):
            task.cancel()
        await asyncio.gather(*self._restarts, return_exceptions=True)
        if self._sub is not None:
            await close_push(self._sub)
            self._sub = None

    async def _reconnected(self) -> None:
        """The connection came back, perhaps to a server that restarted and lost the consumer."""
        await self._restart("reconnected")

    async def _restart(self, why: str) -> None:
        if self._sub is not None and await wire.restart_ordered(self._sub):
            log.info("location mirror's consumer re-created", why=why, after_seq=self._delivered)

    def _expect(self, revision: int) -> None:
        """A write of ours at `revision`: the mirror should deliver it back."""
        self._written = max(self._written, revision)
        if self._echo is None and self._sub is not None:
            self._echo = asyncio.get_running_loop().call_later(ECHO_S, self._check_echo, self._delivered)

    def _check_echo(self, delivered_then: int) -> None:
        self._echo = None
        if self._delivered >= self._written or self._sub is None:
            return
        if self._delivered > delivered_then:  # delivering, only behind (a burst): alive
            self._echo = asyncio.get_running_loop().call_later(ECHO_S, self._check_echo, self._delivered)
            return
        task = asyncio.create_task(self._restart(f"write {self._written} not delivered back in {ECHO_S:g} s"))
        self._restarts.add(task)
        task.add_done_callback(self._restarts.discard)

    async def _on_msg(self, msg: Msg) -> None:
        key = msg.subject[len(self._prefix):]
        meta = msg.metadata
        self._delivered = max(self._delivered, meta.sequence.stream)
        if msg.headers and msg.headers.get(KV_OP) in (KV_DEL, KV_PURGE):
            self.mirror.records.pop(key, None)
        else:
            try:
                record = Record.from_json(json.loads(msg.data))
            except (ValueError, KeyError, TypeError, IndexError) as err:
                log.warning("unreadable location record ignored", key=key, error=str(err))
            else:
                if self.mirror.offer(key, meta.sequence.stream, record):
                    await self.mirror.notify()
        if meta.num_pending == 0:
            self.ready.set()

    # -- writing ------------------------------------------------------------------------------

    async def apply(self, update: Update) -> bool:
        """Merge one update into the bucket; False if it changed nothing (a repeat, or
        superseded by newer updates already there)."""
        for _ in range(MAX_CAS_TRIES):
            revision, current = self.mirror.revision(update.key), self.mirror.get(update.key)
            merged = merge(current, update)
            if merged is None:
                return False
            data = json.dumps(merged.to_json(), separators=(",", ":")).encode()
            try:
                if revision:
                    new = await self.kv.update(update.key, data, last=revision)
                else:
                    new = await self.kv.create(update.key, data)
            except KeyWrongLastSequenceError:
                await self._refresh(update.key)
                continue
            self._expect(new)
            if self.mirror.offer(update.key, new, merged):
                await self.mirror.notify()
            return True
        raise IndexConflict(f"location {update.key} kept changing; retrying later")

    async def _refresh(self, key: str) -> None:
        try:
            entry = await self.kv.get(key)
        except KeyNotFoundError:
            return
        if entry.value is not None and entry.revision is not None:
            self.mirror.offer(key, entry.revision, Record.from_json(json.loads(entry.value)))
