"""Stories from the log that the operator commands and the console share: a cluster's whole
history (its events and its jobs'), and the cluster rebuilt as it was at a point of the log,
with each of its jobs as it stood then.

Reads through the event store; folds with the read model, so nothing depends on when it runs: the
same point gives the same answer.

A rebuild starts from the nearest story snapshot at or before the point (`muster.readmodel.story`,
KV `snapshots`, key `<tenant>.story.<cluster>`) and reads only the events after it, in one ordered
read of the story's subjects; without one (none yet, older than the bucket's history, or from
other code) it folds from the first event. The tracker writes a snapshot when a job of the
cluster ends once the jobs ended since its last snapshot ran `EVERY_TASKS` tasks: `StoryWriter`.
Docs: docs/decisions/0010-replay-from-story-snapshots.md, 0043.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol

import structlog

from contracts import subjects
from contracts.records import Recorded
from muster import snapshots
from muster.catalog.store import catalog_filter, state_of
from muster.readmodel.clusters import Catalog, job_ids, prefix
from muster.readmodel.observed import needs_catalog
from muster.readmodel.story import STORY, JobFold, Story, job_of
from muster.snapshots import Snapshot, SnapshotError

log = structlog.get_logger("muster.tracker")

AT_ONCE = 16
"""Jobs' histories (or ordered reads) read at once."""
FILTERS = 100
"""Subjects one ordered read of a story's tail follows."""


class Log(Protocol):
    """What a rebuild reads (`EventStore`, or `MemoryEventLog` in unit tests)."""

    async def read(self, subject_filter: str, start_seq: int = 1, up_to_seq: int | None = None) -> list[Recorded]: ...

    async def read_many(self, subject_filters: Sequence[str], up_to_seq: int | None = None) -> list[Recorded]: ...

    async def replay(self, subject_filter: str | Sequence[str], on_event: Callable[[Recorded], None],
                     timeout: float = 600.0, *, start_seq: int = 1, bodies: bool = True) -> int: ...


class Stories(Protocol):
    """Where story snapshots are kept (`SnapshotStore`, `MemorySnapshots`)."""

    async def put(self, kind: str, tenant: str, aggregate_id: str, data: bytes) -> None: ...

    async def nearest(self, kind: str, tenant: str, aggregate_id: str, at_seq: int | None,
                      fits: Callable[[Snapshot], bool] | None = None) -> Snapshot | None: ...


async def cluster_history(store: Log, tenant: str, cluster_id: str, up_to_seq: int | None = None) -> list[Recorded]:
    """A cluster's whole story: its own events and all its jobs', in log order."""
    own = await store.read(subjects.cluster_events(tenant, cluster_id), up_to_seq=up_to_seq)
    merged = {r.seq: r for r in own}
    for job in job_ids(own):
        for r in await store.read_many(subjects.job_history_filters(tenant, job), up_to_seq=up_to_seq):
            merged[r.seq] = r
    return [merged[s] for s in sorted(merged)]


async def replay_cluster(store: Log, tenant: str, cluster_id: str, seq: int | None, at: datetime | None,
                         stories: Stories | None = None) -> dict[str, Any] | None:
    """The cluster and its jobs from the events up to log sequence `seq`, or up to time `at`;
    its drift repaired as a repair asked at that point would (with the catalog of then)."""
    story = await story_at(store, tenant, cluster_id, seq, at, stories)
    if story is None:
        return None
    return story.answer(seq, at, await catalog_at(store, tenant, seq, at) if needs_catalog(story.drift()) else None)


async def catalog_at(store: Log, tenant: str, seq: int | None = None, at: datetime | None = None) -> Catalog:
    """The tenant's services as the log had them at a point (now, without one): what a repair
    asked then plans with, so the drift shown says what it does (`observed.as_repaired`)."""
    return state_of(prefix(await store.read(catalog_filter(tenant), up_to_seq=seq), seq, at)).catalog.services


async def story_at(store: Log, tenant: str, cluster_id: str, seq: int | None, at: datetime | None,
                   stories: Stories | None = None) -> Story | None:
    """The story up to the point, from the nearest snapshot that fits it, or from the first event."""
    base = await _nearest(stories, tenant, cluster_id, seq, at) if stories is not None else None
    story = base if base is not None else Story()
    own_subject = subjects.cluster_events(tenant, cluster_id)
    if base is None:
        own = prefix(await store.read(own_subject, up_to_seq=seq), seq, at)
        stale = story.take_own(own)
    else:
        # Everything after the snapshot, in one ordered read of the story's subjects.
        known = list(story.jobs)
        filters = [f for job in known for f in subjects.job_history_filters(tenant, job)]
        own, firsts = await _tail(store, own_subject, filters, story.seq + 1, seq)
        # A job with events after the snapshot (up to the point) is folded again from its first.
        stale = [job for job in known if job in firsts and (at is None or firsts[job] <= at)]
        stale += story.take_own(prefix(own, seq, at))
    if not story.started:
        return None
    for job, fold in zip(stale, await _folds(store, tenant, stale, seq, at), strict=True):
        story.take_folded(job, fold)
    return story


async def _nearest(stories: Stories, tenant: str, cluster_id: str, seq: int | None, at: datetime | None) -> Story | None:
    try:
        snap = await stories.nearest(STORY.name, tenant, cluster_id, seq, lambda s: s.aggregate.fits(seq, at))
    except Exception as err:  # noqa: BLE001 - a snapshot is a shortcut: without one, fold from the first event
        log.warning("story snapshots unreadable; folding from the first event", cluster=cluster_id, error=str(err) or type(err).__name__)
        return None
    return snap.aggregate if snap is not None and isinstance(snap.aggregate, Story) else None


async def _tail(store: Log, own_subject: str, filters: Sequence[str], start: int,
                seq: int | None) -> tuple[list[Recorded], dict[str, datetime]]:
    """What follows a snapshot, from `start` up to `seq`: the cluster's own events, whole and
    in log order, and for each job with any event on its subjects (`filters`) the time of its
    first. Only that is kept of the jobs' events, and their bodies are not fetched (a job of
    10,000 nodes started after the snapshot has ~440,000 events there, its plan among them,
    and is folded again from its first anyway). Ordered reads of at most `FILTERS` subjects
    each, several at once (a consumer's creation grows faster than its number of filters:
    docs/decisions/0010)."""
    own: list[Recorded] = []
    firsts: dict[str, tuple[int, datetime]] = {}
    gate = asyncio.Semaphore(AT_ONCE)

    def take_own(r: Recorded) -> None:
        if seq is None or r.seq <= seq:
            own.append(r)

    def take(r: Recorded) -> None:
        if seq is not None and r.seq > seq:
            return
        job = job_of(r.subject)
        held = firsts.get(job) if job is not None else None
        if job is not None and (held is None or r.seq < held[0]):  # chunks are read at once: any order
            firsts[job] = (r.seq, r.time)

    async def one(chunk: Sequence[str]) -> None:
        async with gate:
            await store.replay(chunk, take, start_seq=start, bodies=False)  # where and when only

    await asyncio.gather(store.replay(own_subject, take_own, start_seq=start),  # a layout of many nodes is offloaded
                         *(one(filters[i:i + FILTERS]) for i in range(0, len(filters), FILTERS)))
    return own, {job: when for job, (_, when) in firsts.items()}


async def _folds(store: Log, tenant: str, jobs: Sequence[str], seq: int | None, at: datetime | None) -> list[JobFold]:
    """Each job's history up to the point, folded as it is read (one ordered read of its
    subjects): a big job's events are never all held at once."""
    gate = asyncio.Semaphore(AT_ONCE)

    async def one(job: str) -> JobFold:
        fold = JobFold()
        past = False

        def take(r: Recorded) -> None:
            nonlocal past
            past = past or (seq is not None and r.seq > seq) or (at is not None and r.time > at)
            if not past:  # a prefix, as `prefix` cuts a read history
                fold.take(r)

        async with gate:
            await store.replay(subjects.job_history_filters(tenant, job), take)
        return fold

    return list(await asyncio.gather(*(one(job) for job in jobs)))


MOST_TASKS = 8_000
"""Past this a story does not fit the store (each task's run is in it and a value is capped:
decision 0007); measured in docs/benchmarks.md ("Scale: a 10,000-node create")."""

EVERY_TASKS = MOST_TASKS
"""A cluster's story is snapshotted again once the jobs ended since its last snapshot ran this
many tasks (decision 0043). Writing one reads every event of those jobs again (four a task),
which cost a 100-node create a tenth to a fifth of its CPU when it followed every job; a replay past the
last snapshot folds at most about this many tasks' events (~32,000: a second here), as a
replay of a 1,000-node cluster, which never had a snapshot, always did."""


class StoryWriter:
    """Writes a cluster's story snapshot at the sequence of a job's end (its final event), in
    the background: one at a time, the latest point of each cluster only if several wait. Each
    time the jobs ended since the cluster's last snapshot ran `EVERY_TASKS` tasks, and at the
    first end of a job of a cluster this process did not see made (`made`: what came before it
    started is not known). A snapshot not written is a missed shortcut only: a replay folds
    from an earlier one or from the first event, to the same answer."""

    def __init__(self, store: Log, stories: Stories) -> None:
        self.store, self.stories = store, stories
        self.written = 0
        self._due: dict[tuple[str, str], int] = {}
        self._writing: asyncio.Task[None] | None = None
        self._skip: set[tuple[str, str]] = set()  # too large: they only grow
        self._since: dict[tuple[str, str], int] = {}
        """Tasks of the cluster's jobs ended since its last snapshot was due, or since it was made."""

    def made(self, tenant: str, cluster_id: str) -> None:
        """The cluster's first event (`ClusterRequested`): none of its story is waiting for a
        snapshot yet, so the end of its first job need not write one."""
        self._since.setdefault((tenant, cluster_id), 0)

    def due(self, tenant: str, cluster_id: str, seq: int, tasks: int = 0) -> None:
        """A job of the cluster ended at `seq`; `tasks`: how many it had (a status change of the
        cluster is not the sign: an expand's end leaves the status as its start set it, and
        appends none). A story holding a job of more than `MOST_TASKS` cannot be stored, and
        finding that out read every event of the job after it ended: such a cluster is skipped
        at once."""
        key = (tenant, cluster_id)
        if tasks > MOST_TASKS:
            self._skip.add(key)
        if key in self._skip:
            return
        since = self._since.get(key)
        if since is not None and since + tasks < EVERY_TASKS:
            self._since[key] = since + tasks
            return
        self._since[key] = 0
        self._due[key] = max(seq, self._due.get(key, 0))
        if self._writing is None or self._writing.done():
            self._writing = asyncio.get_running_loop().create_task(self._write())

    async def _write(self) -> None:
        while self._due:
            (tenant, cluster_id), seq = self._due.popitem()
            try:
                await self.write(tenant, cluster_id, seq)
            except snapshots.SnapshotTooLarge as err:
                self._skip.add((tenant, cluster_id))
                log.warning("story snapshot too large; its replays fold from the first event", cluster=cluster_id, error=str(err))
            except Exception as err:  # noqa: BLE001 - a missed snapshot only costs a longer replay
                log.warning("story snapshot not written", cluster=cluster_id, seq=seq, error=str(err) or type(err).__name__)

    async def write(self, tenant: str, cluster_id: str, seq: int) -> None:
        """The story up to `seq`, snapshotted (from the previous snapshot and what follows it)."""
        story = await story_at(self.store, tenant, cluster_id, seq, None, self.stories)
        if story is None:
            return
        story.covers(seq)
        try:
            data = snapshots.take(STORY, story, tenant, seq)
        except SnapshotError as err:  # a bug in the read model's state: say it, write nothing
            log.error("story cannot be snapshotted", cluster=cluster_id, error=str(err))
            return
        await self.stories.put(STORY.name, tenant, cluster_id, data)
        self.written += 1

    async def idle(self) -> None:
        """Wait until every due snapshot is written (tests, a clean stop)."""
        while self._writing is not None and not self._writing.done():
            await asyncio.shield(self._writing)

    def close(self) -> None:
        if self._writing is not None:
            self._writing.cancel()
