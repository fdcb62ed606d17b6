"""Provisioner registration and presence, and the read API the planner and tracker use.

Presence is the JetStream KV bucket `presence` (file storage: it survives a nats-server restart,
as the provisioners do; and a writer that finds it gone creates it again). Key `provisioner.<id>` holds a
`ProvisionerPresence` record. Every write carries a per-message TTL (`Nats-TTL`), so each
provisioner chooses its own TTL; the bucket places a marker when an entry expires, so a watcher
sees a dead provisioner go (`expired`) as well as a clean one (`left`: the key is deleted). The
record is rewritten every `ttl / 3` seconds by a timer that waits on the stop event, and at once
when something a reader cares about changes (draining). Each acknowledged write renews the
provisioner's lease (`lease.py`): its workers stop the forward attempts they run when the record
may have expired (docs/decisions/0054). A session writes its first record unconditionally and
every later one only over its own last (`Nats-Expected-Last-Subject-Sequence`): a process started
again under the same id takes the record over, and the one before, if it still lives, can renew
it no more (`Replaced`, on evidence that the other record is newer: `takeback.py`), so its lease
lapses, and its process exits (`on_replaced`); it never deletes the other's record either.

The log gets the facts: `ProvisionerRegistered` when a provisioner starts and
`ProvisionerDeregistered` when it stops cleanly, on `muster.evt.<tenant>.provisioner.<id>` of
every tenant it serves. docs/provisioner.md.

Longer than most modules (~350 lines) on purpose: the record's writer (`Presence`), its watcher
(`PresenceWatch`) and the read API are one protocol over one bucket; the key scheme, the TTLs
and the expiry markers are written and read here alone.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import BadRequestError, BucketNotFoundError, NotFoundError
from nats.js.kv import KeyValue
from pydantic import ValidationError

from contracts import subjects
from contracts.events import ProvisionerDeregistered, ProvisionerRegistered
from contracts.tasks import ProvisionerInfo, ProvisionerPresence, TaskMessage
from muster.bus.replicas import ensure_replicas
from muster.bus.wire import stop_watch
from muster.ports.eventlog import Append, EventLog

from .lease import Lease
from .takeback import Read, leader_last, take_back

log = structlog.get_logger("muster.provisioner")

DEFAULT_TTL_S = 15
"""A provisioner that has not refreshed its record for this long is gone."""
MAX_TTL_S = 300
"""The bucket's max age: the upper bound of any record, and how long a clean leave's
tombstone stays."""
MARKER_TTL_S = 60
"""How long the marker of an expired record stays (a watcher sees it as `expired`)."""
RETRY_S = 1.0
"""After a failed write of the record, the next try (a stream just created in a cluster has no
leader yet for a moment)."""
REGISTER_TRIES = 6
"""Tries of the registration event before the start fails (0.25 s, doubling: about 8 s)."""
KEY_PREFIX = "provisioner."
KV_STREAM = f"KV_{subjects.PRESENCE_BUCKET}"
KV_SUBJECT_PREFIX = f"$KV.{subjects.PRESENCE_BUCKET}."
BUCKET_EXISTS = 10058  # the bucket's stream exists with other settings: use it as it is
WRONG_LAST_SEQUENCE = 10071  # the record is not this session's last one


class Replaced(Exception):
    """Another process of the same provisioner id took the presence record over."""


class StaleRead(Exception):
    """The presence record read is older than the leader's: a replica that lags (tried again)."""


def is_record(headers: dict[str, str] | None, data: bytes | None) -> bool:
    """A stored presence message that is a record, not a delete, purge or expiry marker."""
    headers = headers or {}
    return bool(data) and "KV-Operation" not in headers and "Nats-Marker-Reason" not in headers


def presence_key(provisioner_id: str) -> str:
    return KEY_PREFIX + subjects.token(provisioner_id, "provisioner id")


async def presence_bucket(js: JetStreamContext, replicas: int = 1) -> KeyValue:
    """Create the bucket (idempotent), or bind to it if it exists with other settings."""
    config = KeyValueConfig(
        bucket=subjects.PRESENCE_BUCKET,
        description="live provisioners: provisioner.<id> -> ProvisionerPresence, with a TTL per record",
        history=1,
        ttl=MAX_TTL_S,
        limit_marker_ttl=MARKER_TTL_S,
        storage=StorageType.FILE,
        replicas=replicas,
        direct=True,
    )
    try:
        return await js.create_key_value(config)
    except BadRequestError as err:
        if err.err_code != BUCKET_EXISTS:
            raise
        # Made by an older version, maybe with one replica on a cluster: a node's loss then stops
        # every provisioner (their records unrenewable, decision 54's lease). Given the deployment's.
        await ensure_replicas(js, KV_STREAM, replicas)
        return await js.key_value(subjects.PRESENCE_BUCKET)


async def watched_bucket(js: JetStreamContext) -> KeyValue:
    """The bucket for a reader: bound to as it is, created only where nobody made it yet. An
    operator's connection (`muster provisioners drain`) may look a stream up but not create one:
    asking to create it went unanswered and read as a timeout."""
    from muster.bus.streams import replicas_from_env

    try:
        kv = await js.key_value(subjects.PRESENCE_BUCKET)
    except BucketNotFoundError:
        # With the deployment's replicas, as a provisioner makes it: a planner or tracker started
        # first made it with one replica on a cluster, on a node whose loss then stopped every
        # provisioner (their presence unrenewable: decision 54's lease) until it came back.
        return await presence_bucket(js, replicas_from_env())
    if replicas_from_env() > 1:  # (made with fewer by an older version: given them, as by a provisioner)
        await ensure_replicas(js, KV_STREAM, replicas_from_env())
    return kv


def serves(p: ProvisionerPresence, tenant: str | None, provisioner_class: str | None) -> bool:
    return (tenant is None or tenant in p.info.tenants) and (
        provisioner_class is None or p.info.provisioner_class == provisioner_class
    )


def _parse(data: bytes, key: str) -> ProvisionerPresence | None:
    try:
        return ProvisionerPresence.model_validate_json(data)
    except ValidationError as err:
        log.warning("unreadable presence record ignored", key=key, error=str(err)[:300])
        return None


# -- reading -----------------------------------------------------------------------------------


async def live_provisioners(
    nc: Client, tenant: str | None = None, provisioner_class: str | None = None, timeout: float = 5.0
) -> list[ProvisionerPresence]:
    """The provisioners alive now (optionally: serving this tenant / class), by id. One batch
    direct get of the last record of every key: no consumer is created."""
    inbox = nc.new_inbox()
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    found: list[ProvisionerPresence] = []
    failure: list[str] = []

    async def on_msg(msg: Msg) -> None:
        headers = msg.headers or {}
        status = headers.get("Status")
        if status:
            if status not in ("204", "404"):
                failure.append(f"{status} {headers.get('Description', '')}")
            if not done.done():
                done.set_result(None)
            return
        if not is_record(headers, msg.data):
            return  # a deleted or expired record
        record = _parse(msg.data, headers.get("Nats-Subject", "?"))
        if record is not None:
            found.append(record)

    sub = await nc.subscribe(inbox, cb=on_msg)
    try:
        request = {"multi_last": [f"{KV_SUBJECT_PREFIX}{KEY_PREFIX}*"]}
        await nc.publish(f"$JS.API.DIRECT.GET.{KV_STREAM}", json.dumps(request).encode(), reply=inbox)
        await asyncio.wait_for(done, timeout)
    finally:
        await sub.unsubscribe()
    if failure:
        if failure[0].startswith("503"):  # no such stream: nobody ever registered
            return []
        raise RuntimeError(f"reading provisioner presence failed: {failure[0]}")
    return sorted((p for p in found if serves(p, tenant, provisioner_class)), key=lambda p: p.info.id)


async def untried_elsewhere(nc: Client, me: str, task: TaskMessage) -> bool:
    """Whether a live provisioner other than `me`, not draining and not in the task's `avoid`
    (those ran its earlier attempts), serves the task's tenant and class: where a retry may go."""
    tried = {me, *task.avoid}
    return any(p.info.id not in tried and not p.draining
               for p in await live_provisioners(nc, task.tenant, task.provisioner_class))


Change = Literal["seen", "left", "expired"]


@dataclass
class PresenceWatch:
    """A live view of the provisioners, pushed by the bucket (a KV watcher; nothing polls).

    `live` maps id -> record. `on_change(id, record or None, change)` is called for every
    change: `seen` (registered or refreshed), `left` (deregistered), `expired` (its TTL ran
    out: it died or lost the bus). Use `async with PresenceWatch(js) as view:`."""

    js: JetStreamContext
    on_change: Callable[[str, ProvisionerPresence | None, Change], None] | None = None
    live: dict[str, ProvisionerPresence] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self._watcher: KeyValue.KeyWatcher | None = None

    async def start(self) -> PresenceWatch:
        kv = await watched_bucket(self.js)
        self._watcher = await kv.watch(f"{KEY_PREFIX}*")
        ready = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._follow(self._watcher, ready))
        await ready
        return self

    async def stop(self) -> None:
        if self._watcher is not None:
            await stop_watch(self._watcher)  # (closed with the connection, too)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def __aenter__(self) -> PresenceWatch:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _follow(self, watcher: KeyValue.KeyWatcher, ready: asyncio.Future[None]) -> None:
        async for entry in watcher:
            if entry is None:  # the current values are in
                if not ready.done():
                    ready.set_result(None)
                continue
            pid = entry.key.removeprefix(KEY_PREFIX)
            record: ProvisionerPresence | None = None
            change: Change
            if entry.operation == "DEL":
                change = "left"
            elif entry.operation == "PURGE":
                change = "expired"
            else:
                record = _parse(entry.value, entry.key)
                if record is None:
                    continue
                change = "seen"
            if record is None and pid not in self.live:
                continue  # a tombstone of one that went before we looked
            if record is None:
                self.live.pop(pid, None)
            else:
                self.live[pid] = record
            if self.on_change is not None:
                self.on_change(pid, record, change)
            async with self._changed:
                self._changed.notify_all()

    def serving(self, tenant: str | None = None, provisioner_class: str | None = None) -> list[ProvisionerPresence]:
        return sorted((p for p in self.live.values() if serves(p, tenant, provisioner_class)), key=lambda p: p.info.id)

    async def wait_until(self, predicate: Callable[[dict[str, ProvisionerPresence]], bool], timeout: float) -> None:
        """Return when `predicate(live)` holds; TimeoutError after `timeout` seconds."""
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: predicate(self.live)), timeout)


# -- writing -----------------------------------------------------------------------------------


class Presence:
    """One provisioner's registration: the log events and the refreshed presence record."""

    def __init__(
        self,
        nc: Client,
        log: EventLog,
        info: ProvisionerInfo,
        state: Callable[[], tuple[int, int, bool]],
        ttl_s: int = DEFAULT_TTL_S,
        replicas: int = 1,
    ) -> None:
        """`state()` gives (in_flight, completed, draining) for each refresh."""
        if not 1 <= ttl_s <= MAX_TTL_S:
            raise ValueError(f"presence TTL must be 1..{MAX_TTL_S} s, got {ttl_s}")
        self.nc = nc
        self.js = nc.jetstream()
        self.store = log
        self.info = info
        self.state = state
        self.ttl_s = int(ttl_s)
        self.replicas = replicas
        self.subject = KV_SUBJECT_PREFIX + presence_key(info.id)
        self._stop = asyncio.Event()
        self._refresher: asyncio.Task[None] | None = None
        self._bucket_ready = False
        self.lease = Lease(self.ttl_s)
        self._last_seq: int | None = None
        """The subject sequence of this session's last record (None: none written yet)."""
        self.replaced = False
        self.on_replaced: Callable[[ProvisionerInfo], None] | None = None
        """Called once, with the other process's info, when another process took the id over."""

    async def register(self) -> None:
        """Record the registration on every tenant's log, publish the record, start refreshing.
        A record that cannot be written yet is retried every second by the refresher."""
        await self._retrying("registration", lambda: self._record(self._registered(self.info), "registered"))
        written = await self._write()
        self._refresher = asyncio.create_task(self._refresh_until_stopped(written), name=f"presence-{self.info.id}")
        log.info("provisioner registered", provisioner=self.info.id, ttl_s=self.ttl_s,
                 tenants=self.info.tenants, capacity=self.info.capacity)

    async def refresh(self) -> None:
        in_flight, completed, draining = self.state()
        record = ProvisionerPresence(
            info=self.info, in_flight=in_flight, completed=completed, draining=draining,
            ttl_s=self.ttl_s, refreshed_at=datetime.now(UTC),
        )
        if self.replaced:
            raise Replaced(self.info.id)
        data, loop = record.model_dump_json().encode(), asyncio.get_running_loop()
        sent_at = loop.time()
        try:
            ack = await self.js.publish(self.subject, data, msg_ttl=self.ttl_s, headers=self._over_own())
        except BadRequestError as err:
            if err.err_code != WRONG_LAST_SEQUENCE:
                raise
            self._last_seq = await self._take_back(leader_last(err.description))  # (our record expired, or the bucket is new)
            sent_at = loop.time()
            ack = await self.js.publish(self.subject, data, msg_ttl=self.ttl_s, headers=self._over_own())
        self._last_seq = ack.seq
        if not self._stop.is_set():
            self.lease.renewed(sent_at)

    def _over_own(self) -> dict[str, str] | None:
        return None if self._last_seq is None else {"Nats-Expected-Last-Subject-Sequence": str(self._last_seq)}

    async def _take_back(self, leader: int | None) -> int | None:
        """The sequence to write over, when the record is not this session's last one (`leader`:
        the key's last sequence at the stream's leader, as the refusal named it): an expiry
        marker's or a delete's, or none. Another session's newer record: `Replaced` for good
        (`takeback.py`: a lagging replica's older record is no evidence, and is read again)."""
        try:
            # A direct get: a provisioner may not use the stream's message get (session 23's
            # compose topology: every take-back was a permission violation, the lease never renewed).
            last = await self.js.get_last_msg(KV_STREAM, self.subject, direct=True)
        except NotFoundError:
            last = None
        record = None if last is None or not is_record(last.headers, last.data) else _parse(last.data or b"", self.subject)
        read = Read(None if last is None else last.seq, None if record is None else record.info.session)
        verdict = take_back(self.info.session, self._last_seq, leader, read)
        if verdict == "stale":
            raise StaleRead(f"the presence record read (sequence {read.seq}) is older than the leader's last ({leader}): "
                            "a replica that lags; read again")
        if verdict == "replaced":
            assert record is not None
            self.replaced = True
            log.error(f"another process took provisioner id {self.info.id} over: this one renews its presence no more "
                      "and stops its forward attempts", provisioner=self.info.id, session=self.info.session,
                      by=record.info.session, host=record.info.host, pid=record.info.pid)
            if self.on_replaced is not None:
                self.on_replaced(record.info)
            raise Replaced(self.info.id)
        return verdict

    async def _write(self) -> bool:
        try:
            if not self._bucket_ready:
                await presence_bucket(self.js, self.replicas)
                self._bucket_ready = True
            await self.refresh()
            return True
        except Replaced:
            return False
        except StaleRead as err:  # (the bucket is there: not declared again)
            log.warning("presence refresh failed", error=str(err), retry_in_s=RETRY_S)
            return False
        except Exception as err:  # noqa: BLE001 - the bus is away; the refresher tries again
            # The bucket may be what is gone (a server that lost its store, a memory bucket
            # of an older deployment after a restart): the next try declares it again.
            self._bucket_ready = False
            log.warning("presence refresh failed", error=str(err) or type(err).__name__, retry_in_s=RETRY_S)
            return False

    async def _refresh_until_stopped(self, written: bool) -> None:
        interval = self.ttl_s / 3
        while not self.replaced:
            try:
                await asyncio.wait_for(self._stop.wait(), interval if written else min(RETRY_S, interval))
                return
            except TimeoutError:
                pass
            written = await self._write()

    async def _retrying(self, what: str, attempt: Callable[[], Awaitable[None]]) -> None:
        delay = 0.25
        for tries in range(1, REGISTER_TRIES + 1):
            try:
                await attempt()
                return
            except Exception as err:
                if tries == REGISTER_TRIES or self._stop.is_set():
                    raise
                log.warning(f"{what} failed; trying again", error=str(err) or type(err).__name__, retry_in_s=delay)
            try:
                await asyncio.wait_for(self._stop.wait(), delay)
            except TimeoutError:
                pass
            delay *= 2

    async def deregister(self, reason: Literal["drained", "stopped"], completed: int) -> None:
        """Stop refreshing, delete the record (watchers see `left`), record the leave."""
        await self.halt()
        if self._last_seq is not None and not self.replaced:  # (only its own record: never another session's)
            kv = await self.js.key_value(subjects.PRESENCE_BUCKET)
            try:
                await kv.delete(presence_key(self.info.id), last=self._last_seq)
            except BadRequestError as err:
                if err.err_code != WRONG_LAST_SEQUENCE:
                    raise
                log.info("presence record not deleted: it is no longer this session's", provisioner=self.info.id)
        await self._record(
            ProvisionerDeregistered(provisioner_id=self.info.id, session=self.info.session, reason=reason,
                                    completed=completed),
            "deregistered",
        )
        log.info("provisioner deregistered", provisioner=self.info.id, reason=reason, completed=completed)

    async def halt(self) -> None:
        """Stop refreshing and leave the record to expire (what a crash looks like)."""
        self._stop.set()
        self.lease.stop()
        if self._refresher is not None:
            await self._refresher

    async def serve(self, info: ProvisionerInfo) -> None:
        """The tenants served changed (a grant): registered on the log of each new one, and the
        record says so at once."""
        new = [t for t in info.tenants if t not in self.info.tenants]
        self.info = info
        await self._record(self._registered(info), "registered", new)
        await self._write()

    def _registered(self, info: ProvisionerInfo) -> ProvisionerRegistered:
        # The TTL tells a planner that never saw this session's record how long the session may
        # run on once another process of the id replaced it (decision 54).
        return ProvisionerRegistered(provisioner=info, ttl_s=self.ttl_s)

    async def _record(self, event: ProvisionerRegistered | ProvisionerDeregistered, what: str,
                      tenants: list[str] | None = None) -> None:
        for tenant in self.info.tenants if tenants is None else tenants:
            # (The key names the tenant: keys are unique across the whole log, not per subject.)
            await self.store.append(
                subjects.provisioner_events(tenant, self.info.id),
                [Append(event, msg_id=f"{self.info.id}.{self.info.session}.{what}.{tenant}", aggregate_id=self.info.id)],
            )


async def wait_gone(js: JetStreamContext, provisioner_id: str, timeout: float) -> Change:
    """Wait until a provisioner's record is deleted or expires; returns how it went."""
    gone: asyncio.Future[Change] = asyncio.get_running_loop().create_future()

    def on_change(pid: str, record: ProvisionerPresence | None, change: Change) -> None:
        if pid == provisioner_id and record is None and not gone.done():
            gone.set_result(change)

    async with PresenceWatch(js, on_change=on_change) as view:
        if provisioner_id not in view.live and not gone.done():
            return "left"
        return await asyncio.wait_for(gone, timeout)


__all__ = [
    "DEFAULT_TTL_S", "Presence", "PresenceWatch", "live_provisioners", "presence_bucket", "presence_key",
    "serves", "wait_gone",
]
