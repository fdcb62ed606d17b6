"""The planner's view of the log: every cluster, the jobs it has loaded, the catalogs it read.

Each aggregate is a fold of its events; `save` appends an aggregate's new events fenced by the
sequence it was loaded at, so a planner working from a stale view is refused, and then takes
the log's view again. One lock serialises every handler, so decisions see a consistent view.

A copy whose save failed and which could not take the log's view then (the log unreadable: a
partition, a failover) is stale: it may hold what was never stored. Nothing acts on it until
it has been read again (`fresh`), or a redelivered event would pass for a duplicate and be
acked, and tasks the log never queued would go out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import structlog

from contracts import subjects
from contracts.catalog import Catalog
from muster import snapshots
from muster.bus.appends import MAX_ATOMIC
from muster.bus.repository import Repository, append_of, fence, fold, mark_stored, pending_appends, rebuild
from muster.catalog.store import CatalogState, advanced, catalog_filter, read_state
from muster.ports.eventlog import Append, EventLog, Recorded
from muster.readmodel.clusters import job_ids
from muster.snapshots import Kind, Snapshot, SnapshotSource

from . import joblog
from .domain.cluster import Cluster
from .domain.job import Job
from .ports import CatalogSource
from .snapshots import CLUSTER, EVERY, JOB, Snapshotter

log = structlog.get_logger("muster.planner")
PART = MAX_ATOMIC - 1
"""Events of one part of a saved wave (`save(stored=...)`): the most the server takes in one
atomic batch, less the room for a marker (`joblog`)."""
TAIL_READS = 16
"""Aggregates read at once when resuming from snapshots (each the events after its snapshot)."""
PINNED = 16
"""Older catalogs kept for the running jobs admitted before a catalog change (a few at a time)."""


class LogCatalogs:
    """The tenant's catalog as the log has it (the `catalog` events). The current one is read
    from where the last read of it ended: every request reads it (a create, at admission), and
    the tenant's whole catalog history each time was a read and a fold that grew with every
    apply since the first (docs/benchmarks.md, "Scale: what a create reads and sends whatever
    its size (session 36)"). The log only grows (`EVENTS` denies deletes and purges), so what
    came since, folded over the last state (`advanced`), is the whole history's fold."""

    def __init__(self, log: EventLog) -> None:
        self.log = log
        self.last: dict[str, CatalogState] = {}
        """Each tenant's catalog as the last read of it left it."""

    async def load(self, tenant: str, up_to_seq: int | None = None) -> tuple[Catalog, int]:
        if up_to_seq is not None:  # (a running job's catalog, older than the current one)
            state = await read_state(self.log, tenant, up_to_seq)
            return state.catalog, up_to_seq
        known = self.last.get(tenant, CatalogState())
        state = advanced(known, await self.log.read(catalog_filter(tenant), start_seq=known.last_seq + 1))
        if state.last_seq >= self.last.get(tenant, known).last_seq:  # (two reads at once: the later one kept)
            self.last[tenant] = state
        return state.catalog, state.last_seq


class PlannerState:
    def __init__(self, log: EventLog, catalogs: CatalogSource, snapshots: SnapshotSource | None = None,
                 snapshot_every: int = EVERY) -> None:
        self.log = log
        self.repo = Repository(log)
        self.catalog_source = catalogs
        self.jobs: dict[str, Job] = {}
        self.clusters: dict[str, Cluster] = {}
        self.catalogs: dict[str, Catalog] = {}
        self.catalog_seqs: dict[str, int] = {}
        """Where each of `catalogs` is in the log (its last catalog event)."""
        self.pinned: dict[tuple[str, int], Catalog] = {}
        """(tenant, seq) -> the catalog there, for jobs that run with an older one (`catalog_of`)."""
        self.lock = asyncio.Lock()
        self.part = PART
        self.snapshotter = Snapshotter(snapshots, snapshot_every) if snapshots is not None and snapshot_every > 0 else None
        self._prefetched: dict[str, tuple[Job | None, list[Recorded] | None]] = {}
        self.stale: set[str] = set()
        """`job:<id>` and `cluster:<id>` of copies that may hold events the log has not (`fresh`)."""
        self.cluster_saved: Callable[[Cluster], None] | None = None
        """Told of each cluster whose save reached the log (the tenants' spend: `spend.SharedSpend`)."""
        self.job_saved: Callable[[Job], None] | None = None
        """Told of each job whose save reached the log (a job that ended holds no spend)."""

    async def load_clusters(self, only: Callable[[str], bool] | None = None) -> list[Cluster]:
        """Fold the clusters (those whose id `only` accepts) from the log, replacing what was
        in memory for them; returns them. With snapshots, each from its snapshot and the
        events after it."""
        if self.snapshotter is not None:
            found = await self._load_clusters_from_snapshots(only)
            self._loaded(found)
            return list(found.values())
        loaded: dict[str, Cluster] = {}

        def on_cluster(r: Recorded) -> None:
            key = r.subject.rsplit(".", 1)[1]
            if only is None or only(key):
                loaded[key] = fold(Cluster, loaded.get(key), r)

        await self.log.replay(subjects.ALL_CLUSTER_EVENTS, on_cluster)
        self._loaded(loaded)
        return list(loaded.values())

    def _loaded(self, clusters: dict[str, Cluster]) -> None:
        self.clusters.update(clusters)
        self.stale.difference_update(f"cluster:{cid}" for cid in clusters)

    def forget(self, cluster_ids: set[str]) -> list[str]:
        """Drop these clusters and their jobs from memory (another planner acts for them now);
        returns the jobs dropped."""
        for cid in cluster_ids:
            self.clusters.pop(cid, None)
            self.stale.discard(f"cluster:{cid}")
        gone = [jid for jid, job in self.jobs.items() if job.cluster_id in cluster_ids]
        for jid in gone:
            del self.jobs[jid]
            self.stale.discard(f"job:{jid}")
        return gone

    async def _load_clusters_from_snapshots(self, only: Callable[[str], bool] | None) -> dict[str, Cluster]:
        """Each cluster from its snapshot, and the events after it. A cluster whose subject
        holds as many events as its snapshot's version has none after it and is not read; the
        others' tails come from one pass over the cluster events from the oldest snapshot
        they need (one read of that stretch of the log, where a read per cluster would make the
        server look through it once for each)."""
        assert self.snapshotter is not None
        latest = await self._shortcut(self.snapshotter.store.latest(CLUSTER.name), {})
        loaded: dict[str, Cluster] = {}
        behind: dict[str, Snapshot | None] = {}  # subject -> its snapshot, for those with events after it
        for subject, count in (await self.log.subjects(subjects.ALL_CLUSTER_EVENTS)).items():
            tenant, key = _tenant_and_id(subject)
            if only is not None and not only(key):
                continue
            snap = latest.get(key)
            if snap is not None and snap.aggregate.version == count:  # (every event of a subject is one version)
                loaded[key] = snap.aggregate
                self.snapshotter.loaded(CLUSTER, snap.aggregate, tenant, snap.aggregate.version)
            else:
                behind[subject] = snap
        if behind:
            tails: dict[str, list[Recorded]] = {subject: [] for subject in behind}

            def on_event(r: Recorded) -> None:
                tail = tails.get(r.subject)
                if tail is not None:
                    tail.append(r)

            start = min(snap.seq + 1 if snap is not None else 1 for snap in behind.values())
            await self.log.replay(subjects.ALL_CLUSTER_EVENTS, on_event, start_seq=start)
            for subject, snap in behind.items():
                tenant, key = _tenant_and_id(subject)
                cluster = await self._resume(CLUSTER, Cluster, subject, tenant, snap, tails[subject])
                if cluster is not None:
                    loaded[key] = cluster
        gate = asyncio.Semaphore(TAIL_READS)

        # Each cluster's current job, read the same way, many at once (resume asks for them
        # one by one: they are ready by then).
        async def job(tenant: str, job_id: str) -> None:
            async with gate:
                self._prefetched[job_id] = await self._load_job(tenant, job_id)

        await asyncio.gather(*(job(c.tenant, c.job_id) for c in loaded.values() if c.job_id))
        return loaded

    async def load_job(self, tenant: str, job_id: str) -> tuple[Job | None, list[Recorded] | None]:
        """A job at resume: from its snapshot and the events after it when it has ended;
        otherwise from its whole history, returned too (its open tasks' times are in it)."""
        found = self._prefetched.pop(job_id, None)
        if found is None:
            found = await self._load_job(tenant, job_id)
        self.stale.discard(f"job:{job_id}")  # (what is returned is the log's: the caller keeps it)
        return found

    async def _load_job(self, tenant: str, job_id: str) -> tuple[Job | None, list[Recorded] | None]:
        snap = (await self._shortcut(self.snapshotter.store.get(JOB.name, tenant, job_id), None)
                if self.snapshotter is not None else None)
        if snap is not None:
            tail = await joblog.history(self.log, tenant, job_id, snap.seq + 1)
            job = await self._resume(JOB, Job, subjects.job_events(tenant, job_id), tenant, snap, tail)
            if job is not None and job.is_final:
                return job, None
        history = await self.job_history(tenant, job_id)
        job = rebuild(Job, history)
        if job is not None and self.snapshotter is not None:
            self.snapshotter.loaded(JOB, job, tenant)
        return job, history

    @staticmethod
    async def _shortcut(read: Awaitable[Any], without: Any) -> Any:
        """A read of the snapshots bucket, or `without` when it cannot be read just now (its
        stream electing a leader after a partition healed: 503s, timeouts). Snapshots are a
        shortcut: the log has everything, so a rebuild goes on from it rather than failing (a
        planner gaining shards then handed them back, and the others failed the same way)."""
        try:
            return await read
        except Exception as err:  # noqa: BLE001 - whatever it is, the log is still there
            log.warning("snapshots unreadable; folding from the log", error=str(err) or type(err).__name__)
            return without

    async def _resume(self, kind: Kind, cls: type[Any], subject: str, tenant: str, snap: Snapshot | None,
                      tail: list[Recorded] | None = None) -> Any:
        """The aggregate from its snapshot and the events after it (`tail`, or read here)."""
        if tail is None:
            tail = await self.log.read(subject, start_seq=snap.seq + 1 if snap is not None else 1)
        try:
            aggregate = snapshots.resume(snap, tail, lambda a, r: fold(cls, a, r))
        except Exception as err:  # noqa: BLE001 - a snapshot that does not fit its log is only a lost shortcut
            log.warning("snapshot does not fit its log; folded from the first event", kind=kind.name, subject=subject,
                        error=str(err) or type(err).__name__)
            snap = None
            aggregate = rebuild(cls, await (self.job_history(tenant, _tenant_and_id(subject)[1]) if kind is JOB
                                            else self.log.read(subject)))
        if aggregate is not None and self.snapshotter is not None:
            self.snapshotter.loaded(kind, aggregate, tenant, snap.aggregate.version if snap is not None else 0,
                                    refresh=kind is CLUSTER)
        return aggregate

    async def job_history(self, tenant: str, job_id: str) -> list[Recorded]:
        return await joblog.history(self.log, tenant, job_id)

    async def find_job(self, tenant: str, job_id: str) -> Job | None:
        """A job from memory, or from the log (finished jobs are not kept at start)."""
        job = self.jobs.get(job_id)
        if job is None:
            try:
                job = rebuild(Job, await self.job_history(tenant, job_id))
            except subjects.SubjectError:
                return None
            if job is not None:
                self.jobs[job_id] = job
        return job if job is not None and job.tenant == tenant else None

    async def jobs_since(self, tenant: str, cluster_id: str, job_id: str) -> tuple[Job, ...]:
        """The cluster's jobs from `job_id` on (it included), in the order the cluster took them
        (its events name each job that changed it)."""
        order = job_ids(await self.log.read(subjects.cluster_events(tenant, cluster_id)))
        later = order[order.index(job_id):] if job_id in order else []
        return tuple(j for j in [await self.find_job(tenant, i) for i in later] if j is not None)

    def cached(self, tenant: str) -> Catalog | None:
        """The tenant's catalog as last loaded (None: not loaded yet)."""
        return self.catalogs.get(tenant)

    async def catalog(self, tenant: str, refresh: bool = False) -> Catalog:
        """The tenant's catalog as last read (`refresh`: read now): what admission checks a
        request against. A job runs with its own (`catalog_of`)."""
        return (await self.current_catalog(tenant, refresh))[0]

    async def current_catalog(self, tenant: str, refresh: bool = False) -> tuple[Catalog, int]:
        """The catalog and where it is in the log (what a job admitted now records)."""
        if refresh or tenant not in self.catalogs:
            self.catalogs[tenant], self.catalog_seqs[tenant] = await self.catalog_source.load(tenant)
        return self.catalogs[tenant], self.catalog_seqs[tenant]

    async def catalog_of(self, job: Job) -> Catalog:
        """The catalog the job runs with: as the log had it where the job recorded it (when it
        was admitted, or retried), so every task, layout and rollback of it reads the same
        service actions, whatever is applied meanwhile and whichever request refreshed the
        tenant's catalog last (docs/client.md, "A job keeps its catalog"). A job recorded
        before that runs with the current one."""
        seq = job.catalog_seq
        if seq is None:
            return await self.catalog(job.tenant)
        if self.catalog_seqs.get(job.tenant) == seq:
            return self.catalogs[job.tenant]
        key = (job.tenant, seq)
        found = self.pinned.pop(key, None)
        if found is None:
            found, _ = await self.catalog_source.load(job.tenant, up_to_seq=seq)
        self.pinned[key] = found  # the most recently used last
        while len(self.pinned) > PINNED:
            self.pinned.pop(next(iter(self.pinned)))
        return found

    def is_stale(self, job: Job | None = None, cluster_id: str | None = None) -> bool:
        return (job is not None and (f"job:{job.id}" in self.stale or f"cluster:{job.cluster_id}" in self.stale)) or (
            cluster_id is not None and f"cluster:{cluster_id}" in self.stale)

    async def fresh(self, job: Job) -> tuple[Job, Cluster]:
        """The job and its cluster as the log has them: the copies in memory, unless a failed
        save left them stale, then read again. Raises while the log cannot be read: the event
        being handled is redelivered, not taken in on a copy that may be wrong."""
        if self.is_stale(job):
            await self.reload(job.tenant, str(job.id), job.cluster_id)
            job = self.jobs[str(job.id)]
        return job, self.clusters[job.cluster_id]

    async def fresh_cluster(self, tenant: str, cluster_id: str) -> None:
        """`fresh` for a cluster and its current job, by the cluster's id (a request on it)."""
        cluster = self.clusters.get(cluster_id)
        job = self.jobs.get(cluster.job_id) if cluster is not None and cluster.job_id else None
        if job is not None:
            await self.fresh(job)
        elif self.is_stale(cluster_id=cluster_id):
            await self._reload_cluster(tenant, cluster_id)

    async def save_cluster(self, cluster: Cluster) -> None:
        try:
            await self.repo.save(cluster, subjects.cluster_events(cluster.tenant, str(cluster.id)))
        except Exception:
            await self._take_the_logs_view(lambda: self._reload_cluster(cluster.tenant, str(cluster.id)),
                                           f"cluster:{cluster.id}")
            raise
        if self.snapshotter is not None:
            self.snapshotter.saved(CLUSTER, cluster, cluster.tenant)
        if self.cluster_saved is not None:
            self.cluster_saved(cluster)

    async def save_job(self, job: Job) -> None:
        try:
            await joblog.append(self.log, job, pending_appends(job))
        except Exception:
            await self._take_the_logs_view(lambda: self._reload_job(job.tenant, str(job.id)), f"job:{job.id}")
            raise
        if self.snapshotter is not None:
            self.snapshotter.saved(JOB, job, job.tenant)
        if self.job_saved is not None:
            self.job_saved(job)

    async def _take_the_logs_view(self, reload: Callable[[], Awaitable[None]], *keys: str) -> None:
        """After a failed save, whose events may or may not be in the log. When the log cannot
        be read either (a failover), the copy in memory stays, marked stale (`fresh`)."""
        try:
            await reload()
        except Exception as err:  # noqa: BLE001 - the save's own error is the one raised
            self.stale.update(keys)
            log.warning("could not take the log's view after a failed save; read again before it is acted on",
                        error=str(err) or type(err).__name__, copies=sorted(keys))

    async def save(self, job: Job, cluster: Cluster, chain: bool = False,
                   stored: Callable[[Sequence[Append]], None] | None = None) -> None:
        """The cluster's new events, then the job's (the cluster points to its job first).
        `chain`: in one round trip, each event landing only right after the one before (a
        prefix may be stored; see `EventLog.append_chain`), for the latency paths whose events
        are each a whole decision. `stored`: the job's events are appended in parts of at most
        `part`, each fenced by the one before, and `stored` is told of each part once it is in
        the log, while the next one is on its way (a wave of 10,000 `TaskQueued` publishes
        its first tasks while the rest are recorded)."""
        try:
            if stored is not None:
                await self.save_cluster(cluster)
                await self._save_in_parts(job, stored)
            elif chain:
                await self._save_chain(job, cluster)
                if self.cluster_saved is not None:
                    self.cluster_saved(cluster)
                if self.snapshotter is not None:
                    self.snapshotter.saved(CLUSTER, cluster, cluster.tenant)
                    self.snapshotter.saved(JOB, job, job.tenant)
            elif not await self._save_together(job, cluster):
                await self.save_cluster(cluster)
                await self.save_job(job)
        except Exception:
            # Our view is no longer the log's: someone else wrote (another planner, a stale
            # copy), or an append failed, or it landed and its ack was lost (a server failover).
            # Take the log's view; the event that brought us here is redelivered.
            await self._take_the_logs_view(lambda: self.reload(job.tenant, str(job.id), job.cluster_id),
                                           f"job:{job.id}", f"cluster:{job.cluster_id}")
            raise
        if self.job_saved is not None:
            self.job_saved(job)

    async def _save_in_parts(self, job: Job, stored: Callable[[Sequence[Append]], None]) -> None:
        # Each part encoded just before it is sent: the first part does not wait for the
        # encoding of all of them.
        events = job.collect_events()
        for start in range(0, len(events), self.part):
            part = [append_of(e) for e in events[start : start + self.part]]
            await joblog.append(self.log, job, part)
            stored(part)
        if events and self.snapshotter is not None:
            self.snapshotter.saved(JOB, job, job.tenant)

    async def _save_together(self, job: Job, cluster: Cluster) -> bool:
        """The cluster's new events and the job's in one atomic batch, each fenced on its own
        subject (docs/decisions/0045), when the job's would be an atomic batch anyway: the
        cluster's node results of a wave (`NodeResultsRecorded`) no longer cost a store of their
        own before it. False when not (nothing saved)."""
        theirs, mine = len(cluster.pending_events), len(job.pending_events)
        first = getattr(getattr(job.pending_events[0], "payload", None), "type", None) if mine else None
        batch = mine > 1 or first in subjects.JOB_TASK_TYPES  # (a lone record goes with a marker)
        mine += sum(joblog.closes(getattr(e, "payload", None)) for e in job.pending_events)  # (each with its StepClosed)
        if not theirs or not batch or theirs + mine + 1 > MAX_ATOMIC:  # (+1: room for a marker)
            return False
        subject = subjects.cluster_events(cluster.tenant, str(cluster.id))
        ours = pending_appends(cluster)
        expect = fence(cluster, subject, ours)
        seqs = await joblog.append_after(self.log, job, pending_appends(job), [(subject, a) for a in ours], expect)
        mark_stored(cluster, seqs[-1])
        if self.snapshotter is not None:
            self.snapshotter.saved(CLUSTER, cluster, cluster.tenant)
            self.snapshotter.saved(JOB, job, job.tenant)
        if self.cluster_saved is not None:
            self.cluster_saved(cluster)
        return True

    async def _save_chain(self, job: Job, cluster: Cluster) -> None:
        """The cluster's new events, then the job's, as one chain (`EventLog.append_chain`)."""
        subject = subjects.cluster_events(cluster.tenant, str(cluster.id))
        ours = pending_appends(cluster)
        parts = [(subject, ours, fence(cluster, subject, ours))] if ours else []
        mine = joblog.chain_parts(job, pending_appends(job))
        stored = await self.log.append_chain([*parts, *mine])
        if ours:
            mark_stored(cluster, stored[0][-1])
        if mine:
            joblog.chained(job, mine, stored[len(parts):])

    async def reload(self, tenant: str, job_id: str, cluster_id: str) -> None:
        await self._reload_job(tenant, job_id)
        await self._reload_cluster(tenant, cluster_id)

    async def _reload_job(self, tenant: str, job_id: str) -> None:
        job = rebuild(Job, await self.job_history(tenant, job_id))
        if job is not None:
            self.jobs[job_id] = job
        self.stale.discard(f"job:{job_id}")

    async def _reload_cluster(self, tenant: str, cluster_id: str) -> None:
        cluster = rebuild(Cluster, await self.log.read(subjects.cluster_events(tenant, cluster_id)))
        if cluster is not None:
            self.clusters[cluster_id] = cluster
        self.stale.discard(f"cluster:{cluster_id}")


def _tenant_and_id(subject: str) -> tuple[str, str]:
    """`muster.evt.<tenant>.<kind>.<id>`"""
    parts = subject.split(".")
    return parts[2], parts[-1]
