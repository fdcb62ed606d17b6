"""The planner's view of the log: every cluster, the jobs it has loaded, the catalogs it read.

Each aggregate is a fold of its events; `save` appends an aggregate's new events fenced by the
sequence it was loaded at, so a planner working from a stale view is refused, and then takes
the log's view again. One lock serialises every handler, so decisions see a consistent view.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from contracts import subjects
from contracts.catalog import Catalog
from muster.bus.repository import Repository, fold, rebuild
from muster.ports.eventlog import EventLog, Recorded

from .domain.cluster import Cluster
from .domain.job import Job
from .ports import CatalogSource


class PlannerState:
    def __init__(self, log: EventLog, catalogs: CatalogSource) -> None:
        self.log = log
        self.repo = Repository(log)
        self.catalog_source = catalogs
        self.jobs: dict[str, Job] = {}
        self.clusters: dict[str, Cluster] = {}
        self.catalogs: dict[str, Catalog] = {}
        self.lock = asyncio.Lock()

    async def load_clusters(self, only: Callable[[str], bool] | None = None) -> list[Cluster]:
        """Fold the clusters (those whose id `only` accepts) from the log, replacing what was
        in memory for them; returns them."""
        loaded: dict[str, Cluster] = {}

        def on_cluster(r: Recorded) -> None:
            key = r.subject.rsplit(".", 1)[1]
            if only is None or only(key):
                loaded[key] = fold(Cluster, loaded.get(key), r)

        await self.log.replay(subjects.ALL_CLUSTER_EVENTS, on_cluster)
        self.clusters.update(loaded)
        return list(loaded.values())

    def forget(self, cluster_ids: set[str]) -> list[str]:
        """Drop these clusters and their jobs from memory (another planner acts for them now);
        returns the jobs dropped."""
        for cid in cluster_ids:
            self.clusters.pop(cid, None)
        gone = [jid for jid, job in self.jobs.items() if job.cluster_id in cluster_ids]
        for jid in gone:
            del self.jobs[jid]
        return gone

    async def job_history(self, tenant: str, job_id: str) -> list[Recorded]:
        return await self.log.read(subjects.job_events(tenant, job_id))

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

    async def catalog(self, tenant: str, refresh: bool = False) -> Catalog:
        if refresh or tenant not in self.catalogs:
            self.catalogs[tenant] = await self.catalog_source.load(tenant)
        return self.catalogs[tenant]

    async def save_cluster(self, cluster: Cluster) -> None:
        await self.repo.save(cluster, subjects.cluster_events(cluster.tenant, str(cluster.id)))

    async def save_job(self, job: Job) -> None:
        await self.repo.save(job, subjects.job_events(job.tenant, str(job.id)))

    async def save(self, job: Job, cluster: Cluster) -> None:
        """The cluster's new events, then the job's (the cluster points to its job first)."""
        try:
            await self.save_cluster(cluster)
            await self.save_job(job)
        except Exception:
            # Our view is no longer the log's: someone else wrote (another planner, a stale
            # copy), or an append failed, or it landed and its ack was lost (a server failover).
            # Take the log's view; the event that brought us here is redelivered.
            await self.reload(job.tenant, str(job.id), job.cluster_id)
            raise

    async def reload(self, tenant: str, job_id: str, cluster_id: str) -> None:
        job = rebuild(Job, await self.job_history(tenant, job_id))
        if job is not None:
            self.jobs[job_id] = job
        await self.reload_cluster(tenant, cluster_id)

    async def reload_cluster(self, tenant: str, cluster_id: str) -> None:
        cluster = rebuild(Cluster, await self.log.read(subjects.cluster_events(tenant, cluster_id)))
        if cluster is not None:
            self.clusters[cluster_id] = cluster
