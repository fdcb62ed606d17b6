"""Shards and their leases: which member (a planner) acts for which part of the clusters.

A fixed number of shards; a cluster belongs to shard `crc32(cluster id) % shards`. Each shard
is owned through a lease: the key `shard.<n>` of the KV bucket `leases`, written by its owner
with a per-message TTL and rewritten every `ttl / 3` with the revision it last wrote as the
expected last sequence (so a rewrite by anyone else fails). Members announce themselves the
same way (`member.<name>`). Everything reacts to a watch of the bucket; nothing polls.

- **Fair share on start.** With M live members, each one's share is `shards // M`, the first
  `shards % M` of them (by name) one more. A member under its share takes free shards (create
  with the key's last revision as the expected one: of two members taking one shard, one wins);
  a member over its share hands the extra ones over.
- **Hand-over at once.** A member that stops (or is over its share) first tells its owner
  that it lost the shards (`on_lost`, which returns when nothing acts for them any more), then
  deletes the keys; the others see the deletes on their watch and take the shards at once.
- **Takeover within the TTL.** A member that dies stops rewriting: its keys expire, the server
  writes a marker, the others see it on their watch and take the shards (`on_gained`).
- **No two owners.** Besides the server's expected-sequence check on every write, an owner
  stops acting for a shard on its own when the lease it holds is older than the TTL less a
  margin (a member cut off from the server cannot renew, and must assume it lost the shard
  before anyone else can take it). What an owner writes into the log is fenced too: appends
  carry the aggregate's expected last sequence.

docs/scaling.md has the story for operators.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog
from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import (
    APIError,
    BucketNotFoundError,
    KeyDeletedError,
    KeyNotFoundError,
    NoKeysError,
    NoStreamResponseError,
    ServiceUnavailableError,
)
from nats.js.kv import KeyValue

from . import streams
from .wire import stop_watch

log = structlog.get_logger("muster.shards")

BUCKET = "leases"
DEFAULT_SHARDS = 16
DEFAULT_TTL_S = 10.0
MARKER_TTL_S = 60
WRONG_LAST_SEQUENCE = (10071, 10164)
SAFETY = 0.2
JOIN_RETRIES = 7
"""A bucket just created on a cluster answers once its leader is elected (0.1 s doubling: ~13 s)."""
"""An owner stops acting for a shard when its lease is older than (1 - SAFETY) x TTL."""

Shards = set[int]
Callback = Callable[[Shards], Awaitable[None]]


def shard_of(cluster_id: str, shards: int = DEFAULT_SHARDS) -> int:
    return zlib.crc32(cluster_id.encode()) % shards


def fair_share(members: list[str], me: str, shards: int) -> int:
    ordered = sorted(set(members) | {me})
    base, extra = divmod(shards, len(ordered))
    return base + (1 if ordered.index(me) < extra else 0)


async def until(condition: asyncio.Condition, predicate: Callable[[], bool], timeout: float) -> bool:
    """Wait (with a deadline) until `predicate` holds, woken by `condition`; False at the deadline."""
    async with condition:
        try:
            await asyncio.wait_for(condition.wait_for(predicate), timeout)
        except TimeoutError:
            return False
    return True


async def _nothing(_: Shards) -> None:
    return None


def owners_after(owners: dict[int, str], entry: Any) -> dict[int, str]:
    """Shard -> owner once a leases bucket watch's `entry` is taken in (a new dict: another
    thread may be reading the old one); an entry that is not a shard's changes nothing."""
    kind, _, name = entry.key.partition(".")
    if kind != "shard" or not name.isdigit():
        return owners
    if entry.operation is not None or not entry.value:  # released, or lapsed
        return {k: v for k, v in owners.items() if k != int(name)}
    return {**owners, int(name): json.loads(entry.value).get("owner", "?")}


async def leases_bucket(js: JetStreamContext, replicas: int = 1) -> KeyValue:
    """The `leases` bucket, made if missing (a watcher may start before any member)."""
    return await streams.ensure_bucket(js, KeyValueConfig(
        bucket=BUCKET, history=1, ttl=MARKER_TTL_S * 10, limit_marker_ttl=MARKER_TTL_S, storage=StorageType.FILE,
        replicas=replicas, description="shard leases and members: shard.<n> / member.<name>, each with a TTL"))


@dataclass
class Lease:
    revision: int
    valid_until: float
    """Monotonic time after which this member no longer counts on it."""


@dataclass
class ShardLeases:
    js: JetStreamContext
    member: str
    shards: int = DEFAULT_SHARDS
    ttl_s: float = DEFAULT_TTL_S
    on_gained: Callback = _nothing
    on_lost: Callback = _nothing
    replicas: int = 1
    session: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    held: dict[int, Lease] = field(default_factory=dict)
    owners: dict[int, str] = field(default_factory=dict)
    members: dict[str, int] = field(default_factory=dict)
    """Live members, with their key's revision."""
    revisions: dict[str, int] = field(default_factory=dict)
    """The last revision seen of every key, deleted or not (a create expects it)."""
    on_change: Callable[[], None] | None = None
    """Called after the watch saw a change and when a lease is taken, renewed or dropped
    (`ThreadedLeases` wakes its own loop with it)."""

    def __post_init__(self) -> None:
        if self.ttl_s < 1 or self.shards < 1:
            raise ValueError("leases need a TTL of at least 1 s and at least one shard")
        self._lock = asyncio.Lock()
        """Decisions and the owner's callbacks, one at a time (renewals do not wait for them)."""
        self._io = asyncio.Lock()
        """One write of a key at a time: a renewal never races a release of the same key."""
        self._tasks: set[asyncio.Task[Any]] = set()
        self._renewal: asyncio.TimerHandle | None = None
        self._fences: dict[int, asyncio.TimerHandle] = {}
        self._member_rev = 0
        self._failed_takeups = 0
        self._pause_until = 0.0
        """No shard is taken before this (monotonic): a take-up failed, the bus is unwell."""
        self._stopped = False
        self._ready = asyncio.Event()
        self._changed = asyncio.Condition()

    # -- asking ----------------------------------------------------------------------------------

    def owns(self, shard: int) -> bool:
        lease = self.held.get(shard)
        return lease is not None and time.monotonic() < lease.valid_until

    def owns_cluster(self, cluster_id: str) -> bool:
        return self.owns(shard_of(cluster_id, self.shards))

    def owner_of(self, cluster_id: str) -> str | None:
        """Who holds the cluster's shard, as far as this member's watch knows."""
        return self.owners.get(shard_of(cluster_id, self.shards))

    def revision(self, shard: int) -> int:
        return self.revisions.get(f"shard.{shard}", 0)

    async def changed(self, shard: int, since: int, timeout: float) -> bool:
        """Wait (with a deadline) until the shard's key changes after revision `since` (a new
        owner took it, or the old one's lease ended); False if the deadline passed."""
        return await until(self._changed, lambda: self.revision(shard) > since, timeout)

    # -- life --------------------------------------------------------------------------------------

    async def start(self) -> None:
        self.kv = await leases_bucket(self.js, self.replicas)
        await self._join()
        watcher = await self.kv.watch(">")
        self._spawn(self._watch(watcher))
        await self._ready.wait()
        await self.rebalance()
        self._arm_renewal()

    async def _join(self) -> None:
        """The member key, first write to the bucket: on a cluster the bucket another member
        just created may have no leader yet ("no response from stream"), so a bounded retry."""
        for attempt in range(JOIN_RETRIES + 1):
            try:
                await self._write(f"member.{self.member}", {"member": self.member, "session": self.session, "shards": self.shards}, None)
                return
            except (NoStreamResponseError, ServiceUnavailableError, NatsTimeout) as err:
                if attempt == JOIN_RETRIES:
                    raise
                log.info("leases bucket not ready; joining again", member=self.member, error=str(err) or type(err).__name__)
                await asyncio.sleep(0.1 * 2**attempt)  # a bounded retry of one request, not a poll

    async def stop(self) -> None:
        """Hand every shard over at once: the owner stops acting, then the keys go."""
        self._stopped = True
        if self._renewal is not None:
            self._renewal.cancel()
        async with self._lock:
            await self._release(set(self.held))
            try:
                await self.kv.delete(f"member.{self.member}")
            except Exception as err:  # noqa: BLE001 - it expires anyway
                log.warning("leaving failed; the member key will expire", error=str(err) or type(err).__name__)
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def abort(self) -> None:
        """Die without a word (tests play a kill -9): no renewal, no release; the leases expire."""
        self._stopped = True
        if self._renewal is not None:
            self._renewal.cancel()
        for shard in list(self._fences):
            self._unfence(shard)
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _spawn(self, coro: Any) -> None:
        t = asyncio.ensure_future(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    # -- the watch ---------------------------------------------------------------------------------

    async def _watch(self, watcher: Any) -> None:
        try:
            async for entry in watcher:
                if entry is None:  # the bucket's current state has been delivered
                    self._ready.set()
                    continue
                self.revisions[entry.key] = entry.revision
                gone = entry.operation is not None or not entry.value
                kind, _, name = entry.key.partition(".")
                if kind == "member":
                    if gone:
                        self.members.pop(name, None)
                    else:
                        self.members[name] = entry.revision
                else:  # (a new dict each time, here and for `held`: another thread may be reading)
                    self.owners = owners_after(self.owners, entry)
                async with self._changed:
                    self._changed.notify_all()
                if self.on_change is not None:
                    self.on_change()
                if self._ready.is_set() and not self._stopped:
                    self._spawn(self.rebalance())
        finally:  # its consumer and nats-py's tasks for it end with the watch, not with the connection
            await stop_watch(watcher)

    # -- taking and giving -------------------------------------------------------------------------

    async def rebalance(self) -> None:
        async with self._lock:
            if self._stopped:
                return
            share = fair_share(list(self.members), self.member, self.shards)
            if len(self.held) > share:
                await self._release(set(sorted(self.held)[share:]))
            elif len(self.held) < share and time.monotonic() >= self._pause_until:
                gained = set()
                for shard in [s for s in range(self.shards) if s not in self.owners and s not in self.held]:
                    if len(self.held) >= share:
                        break
                    try:
                        if await self._acquire(shard):
                            gained.add(shard)
                    except Exception as err:  # noqa: BLE001 - the bus is away: what was taken is taken up below
                        log.warning("taking a shard failed", member=self.member, shard=shard, error=str(err) or type(err).__name__)
                        break
                if gained:
                    log.info("shards gained", member=self.member, shards=sorted(gained), held=len(self.held), share=share)
                    await self._take_up(gained)

    async def _take_up(self, gained: Shards) -> None:
        """The owner takes the shards up (rebuilds their clusters). If it cannot (the log is
        unreachable for a moment: a leader election after a partition heals), the shards are
        handed back at once rather than held with nothing acting for them: held, they would be
        renewed for ever and their open jobs never resumed. The others (or this member, at the
        next change of the bucket) take them again."""
        try:
            await self.on_gained(gained)
            self._failed_takeups = 0
        except Exception as err:  # noqa: BLE001 - whatever failed, the shards must not stay held idle
            # Taken again at once, they would fail again while the bus is unwell, members
            # passing them around as fast as the bucket changes: this member waits a moment
            # (0.5 s doubling, at most a TTL) before it takes any, then looks again.
            self._failed_takeups += 1
            pause = min(self.ttl_s, 0.5 * 2 ** (self._failed_takeups - 1))
            self._pause_until = time.monotonic() + pause
            log.warning("could not take up the shards gained; handing them back", member=self.member,
                        shards=sorted(gained), error=str(err) or type(err).__name__, pause_s=pause)
            await self._release(gained)
            asyncio.get_running_loop().call_later(pause, lambda: self._spawn(self.rebalance()))

    async def _acquire(self, shard: int) -> bool:
        key = f"shard.{shard}"
        if shard in self.owners:
            return False  # taken since the rebalance began (the revision we know is the new owner's)
        sent = time.monotonic()
        try:
            rev = await self._write(key, {"owner": self.member, "session": self.session}, self.revisions.get(key, 0))
        except APIError as err:
            if err.err_code in WRONG_LAST_SEQUENCE:
                return False  # someone else was quicker (our watch will say who)
            raise
        self.owners = {**self.owners, shard: self.member}
        self._hold(shard, rev, sent)
        return True

    async def _release(self, shards: Shards) -> None:
        if not shards:
            return
        for s in shards:
            self._unfence(s)
        await self.on_lost(shards)  # nothing acts for them any more...
        for s in sorted(shards):  # ...then the others may take them
            async with self._io:
                lease = self._drop(s)
                if lease is None:
                    continue  # lapsed meanwhile
                try:
                    await self.kv.delete(f"shard.{s}", last=lease.revision)
                except Exception as err:  # noqa: BLE001 - not ours any more, or it expires anyway
                    log.warning("lease release failed; it will expire", shard=s, error=str(err) or type(err).__name__)
        log.info("shards handed over", member=self.member, shards=sorted(shards))

    # -- keeping -------------------------------------------------------------------------------------

    async def _write(self, key: str, value: dict[str, Any], expect: int | None) -> int:
        headers = {"Nats-Expected-Last-Subject-Sequence": str(expect)} if expect is not None else None
        ack = await self.js.publish(f"$KV.{BUCKET}.{key}", json.dumps(value).encode(), headers=headers, msg_ttl=self.ttl_s)
        return int(ack.seq)

    def _drop(self, shard: int) -> Lease | None:
        lease = self.held.get(shard)
        self.held = {k: v for k, v in self.held.items() if k != shard}
        self._held_changed()
        return lease

    def _held_changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def _hold(self, shard: int, revision: int, sent: float) -> None:
        """The lease written at `revision` by a write sent at `sent` (monotonic). It is counted
        on from the send, not from the answer: the server's TTL runs from when it stored the
        write, which lies between the two, and an answer can come seconds late (a slow or
        partitioned link), long enough for the key to expire and another member to take it."""
        lease = Lease(revision, sent + self.ttl_s * (1 - SAFETY))
        self.held = {**self.held, shard: lease}
        self._held_changed()
        self._unfence(shard)
        self._fences[shard] = asyncio.get_running_loop().call_later(max(0.0, lease.valid_until - time.monotonic()),
                                                                    lambda: self._spawn(self._lapse(shard)))

    def _unfence(self, shard: int) -> None:
        handle = self._fences.pop(shard, None)
        if handle is not None:
            handle.cancel()

    async def _lapse(self, shard: int) -> None:
        """Not renewed in time: cut off from the server, or this process was too busy to renew
        (planning 10,000 nodes holds the loop for seconds). If the key is still exactly as this
        member last wrote it, nobody else can have taken the shard: keep it. Otherwise it is
        lost (and anything this member wrote meanwhile was fenced by expected sequences)."""
        async with self._lock:
            async with self._io:
                lease = self.held.get(shard)
                if lease is None or time.monotonic() < lease.valid_until:
                    return
                try:
                    sent = time.monotonic()
                    self._hold(shard, await self._write(f"shard.{shard}", {"owner": self.member, "session": self.session},
                                                        lease.revision), sent)
                    log.info("lease renewed late, still ours", member=self.member, shard=shard)
                    return
                except Exception as err:  # noqa: BLE001 - taken, expired or unreachable: lost
                    log.debug("late renewal refused", shard=shard, error=str(err) or type(err).__name__)
                self._drop(shard)
            log.warning("lease lapsed: no longer acting for the shard", member=self.member, shard=shard)
            await self.on_lost({shard})

    def _arm_renewal(self) -> None:
        if not self._stopped:
            self._renewal = asyncio.get_running_loop().call_later(self.ttl_s / 3, lambda: self._spawn(self._renew()))

    async def _renew(self) -> None:
        try:
            await self._write(f"member.{self.member}", {"member": self.member, "session": self.session, "shards": self.shards}, None)
            lost = set()
            async with self._io:  # every lease at once: a busy server answers them together
                renewing = {s: lease.revision for s, lease in self.held.items()}
                shards = sorted(renewing)
                value = {"owner": self.member, "session": self.session}
                sent = time.monotonic()
                written = await asyncio.gather(*(self._write(f"shard.{s}", value, renewing[s]) for s in shards),
                                               return_exceptions=True)
                for shard, rev in zip(shards, written, strict=True):
                    now = self.held.get(shard)
                    if now is None or now.revision != renewing[shard]:
                        # Dropped, or taken anew (a rebalance does not wait for renewals) while
                        # this renewal was on its way, say across a partition: its answer is
                        # about a lease that is not the one held now.
                        continue
                    if isinstance(rev, int):
                        self._hold(shard, rev, sent)
                    elif isinstance(rev, APIError) and rev.err_code in WRONG_LAST_SEQUENCE:
                        # It expired and someone took it: not ours from now (owns() says no), but
                        # dropped only once the owner knows (below), so that no rebalance takes it
                        # again meanwhile and tells the owner it gained a shard it has not lost yet.
                        self._unfence(shard)
                        self.held = {**self.held, shard: Lease(self.held[shard].revision, 0.0)}
                        lost.add(shard)
                    else:
                        log.warning("lease renewal failed", member=self.member, shard=shard, error=str(rev) or type(rev).__name__)
            if lost:
                async with self._lock:
                    # While this waited for the lock, a lapse may have dropped a lost lease (and
                    # told the owner) and a rebalance taken the shard anew: that lease is not the
                    # one found lost, and the owner has just rebuilt its clusters.
                    lost = {s for s in lost if (lease := self.held.get(s)) is not None and lease.revision == renewing[s]}
                    if lost:
                        log.warning("leases lost to another member", member=self.member, shards=sorted(lost))
                        await self.on_lost(lost)
                        for shard in lost:
                            self._drop(shard)
        except Exception as err:  # noqa: BLE001 - the bus is away: the fences decide
            log.warning("lease renewal failed", member=self.member, error=str(err) or type(err).__name__)
        finally:
            self._arm_renewal()


async def lease_table(js: JetStreamContext) -> tuple[dict[str, dict[str, Any]], dict[int, str]]:
    """What the `leases` bucket says now: live members (name -> their record) and shards
    (number -> owner). Empty if no planner ever started."""
    try:
        kv = await js.key_value(BUCKET)
        keys = await kv.keys()
    except (BucketNotFoundError, NoKeysError):  # nobody holds anything
        return {}, {}
    # (Anything else, a timeout of a busy server, is raised: it answered "no live planners",
    # and `muster planners --json` said 0 shards, session 32's CI.)
    members: dict[str, dict[str, Any]] = {}
    owners: dict[int, str] = {}
    for key in keys:
        try:
            entry = await kv.get(key)
        except (KeyNotFoundError, KeyDeletedError):  # expired meanwhile
            continue
        if not entry.value:
            continue
        kind, _, name = key.partition(".")
        record = json.loads(entry.value)
        if kind == "member":
            members[name] = record
        elif kind == "shard" and name.isdigit():
            owners[int(name)] = str(record.get("owner", "?"))
    return members, owners
