"""The tenants' spend, shared with the other planners (docs/governance.md, "Policies";
docs/decisions/0044-a-tenant-s-spend-is-shared-by-shard.md).

A policy's tenant totals (`input.tenant.clusters|nodes|per_hour`: a budget, a node ceiling)
were this planner's clusters only: with several planners each let a tenant spend its whole
budget on its own shards. So each planner writes, for each tenant and each shard it holds, what
that shard's clusters are (`domain/spend.py`: clusters, nodes by provider and hardware type)
whenever a save changed a cluster's layout or deleted it, or changed what an open job holds
(admitted, ended); admission adds the other shards'
entries (watched, read without a round trip) to what it holds itself.

A key is written by its shard's owner only (nobody else writes it). A shard gained is written
again from the log's view (its last owner may have died between a save and its write). A write
that fails is tried again, backing off 0.25 s to 5 s.

Strict (decision 44, "Strict"): a cluster whose job is admitted and not ended counts at least
what the job makes of it (`spend.at_least`: the job's nodes), so a job holds its room from its
admission to its end, in its shard's own entry. A governed admission of a tenant whose policies
read its totals writes that entry first (`reserve`), only if none of the tenant's keys changed
since its judgement read them; otherwise it is judged again. An approval of such a tenant's job
writes it again the same way (`confirm`, session 29). The hold is derived state: from
the jobs in memory, rebuilt from the log with the shard (an admission whose job never reached
the log holds nothing once its key is written again).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

import structlog

from contracts.layout import NodeSpec

from .domain import spend
from .domain.admission import Refused
from .domain.cluster import Cluster
from .domain.job import Job
from .ports import Shards, SpendBoard

log = structlog.get_logger("muster.planner")
RETRY_S = (0.25, 5.0)
JUDGED = 3
"""Judgements of one request whose fenced write another planner's write got ahead of, at most."""
CATCH_UP_S = 2.0
"""How long a request judged again waits for the other planner's write to reach it."""


class Contested(Refused):
    """Another planner changed the tenant's spend while this request was judged, again each
    time it was judged again (`JUDGED`): sent again, it is judged on what both wrote (decision
    44, "Strict")."""

    def __init__(self, tenant: str) -> None:
        super().__init__(f"tenant {tenant}'s spend changed on another planner while this request was judged against its "
                         "policies; send the request again")


J = TypeVar("J")
"""A judgement (`governance.Judgement`)."""


class SharedSpend:
    def __init__(self, clusters: Mapping[str, Cluster], board: SpendBoard, shards: Shards,
                 jobs: Mapping[str, Job] | None = None) -> None:
        self.clusters, self.board, self.shards = clusters, board, shards
        self.jobs: Mapping[str, Job] = jobs if jobs is not None else {}
        self._pending: dict[str, tuple[str, str, list[str]]] = {}
        """cluster id -> (tenant, provider, the hardware type of each node) of an admission
        not recorded yet (`reserve` to `release`): counted as its job will be."""
        self._taken: dict[str, tuple[int, bool]] = {}
        """cluster id -> (layout epoch, deleted) last counted: a save that changed neither
        (a task's results, a lease) writes nothing."""
        self._held: dict[str, tuple[str, tuple[str, ...]]] = {}
        """job id -> (its cluster, the hardware type of each node) its open job held when its
        entry was last marked: a save that changed neither (a task's outcome) marks nothing."""
        self._sorted: dict[str, tuple[list[NodeSpec], tuple[str, ...]]] = {}
        """Each open job's nodes list, and its hardware sorted (`_hardware`)."""
        self._dirty: set[str] = set()
        self.writing = asyncio.Lock()
        """Held by a judgement that may reserve (`Requests._judged`) and by each background write:
        this planner's own write in the meantime would make the reservation judge again."""
        self._task: asyncio.Task[None] | None = None

    def holds(self, cluster: Cluster) -> bool:
        return self.shards.holds(self.shards.shard_of(str(cluster.id)))

    def elsewhere(self, tenant: str) -> spend.Spend:
        """The tenant's spend on the shards this planner does not hold, as their owners wrote it."""
        found = [value for name, value in self.board.known().items()
                 if (parsed := spend.parse_key(name)) is not None and parsed[0] == tenant and not self.shards.holds(parsed[1])]
        return spend.total(found)

    def saved(self, cluster: Cluster) -> None:
        """A save of the cluster reached the log: its shard's entry is written again if its
        layout or its being deleted changed."""
        mark = (cluster.layout_epoch, cluster.status == "deleted")
        if self._taken.get(str(cluster.id)) == mark:
            return
        self._taken[str(cluster.id)] = mark
        self._mark(spend.key(cluster.tenant, self.shards.shard_of(str(cluster.id))))

    def job_saved(self, job: Job) -> None:
        """A job's save reached the log: what it holds is written when that changed (a job
        admitted without a reservation, before its tenant had a budget policy or waiting for an
        approver on a cluster whose layout it has not changed yet, is counted on the other
        planners from its first save); once it ended, what it held goes (`_flush` skips a
        value already there)."""
        shard = self.shards.shard_of(job.cluster_id)
        if not self.shards.holds(shard):
            return
        held = () if job.is_final else self._hardware(job)
        if job.is_final:  # (a job open before a restart is not in `_held`: its end is written all the same)
            self._held.pop(str(job.id), None)
            self._sorted.pop(str(job.id), None)
            if not job.nodes:
                return
        elif not held or self._held.get(str(job.id)) == (job.cluster_id, held):
            return
        else:
            self._held[str(job.id)] = (job.cluster_id, held)
        self._mark(spend.key(job.tenant, shard))

    def _hardware(self, job: Job) -> tuple[str, ...]:
        """The hardware of the job's nodes, sorted once for each list of them the job takes (not
        again at every save of a wave: as many names as the job has nodes)."""
        nodes, hardware = self._sorted.get(str(job.id), (None, ()))
        if nodes is not job.nodes:
            hardware = tuple(sorted(n.hardwaretype for n in job.nodes))
            self._sorted[str(job.id)] = (job.nodes, hardware)
        return hardware

    def local(self, tenant: str, besides: str) -> spend.Spend:
        """The tenant's spend on the shards this planner holds, holds included, without the
        cluster `besides` (the one being judged)."""
        return spend.total(self._cluster(c) for c in list(self.clusters.values())
                           if c.tenant == tenant and c.status != "deleted" and str(c.id) != besides and self.holds(c))

    async def reserve(self, tenant: str, cluster_id: str, provider: str, hardware: list[str], seen: int) -> int | None:
        """Hold what an admitted job makes of its cluster, in its shard's entry, written only if
        none of the tenant's keys changed since revision `seen` (its judgement's). None: held
        (or nothing to hold: the job adds nothing); else the revision to judge again past.
        `release` after it, whatever happened."""
        name = spend.key(tenant, self.shards.shard_of(cluster_id))
        self._pending.pop(cluster_id, None)  # (judged again: held anew)
        before = self.of(tenant, self.shards.shard_of(cluster_id))
        self._pending[cluster_id] = (tenant, provider, hardware)
        value = self.of(tenant, self.shards.shard_of(cluster_id))
        if value == before:
            return None
        return await self.board.put_if(name, value, tenant, seen)

    async def confirm(self, job: Job, seen: int) -> int | None:
        """An approval of `job` (decision 44, "An approval is fenced too"): its shard's entry
        written again as it is, the job's hold in it, only if none of the tenant's keys changed
        since revision `seen` (its judgement's). The write moves the tenant's revision even when
        the value is the same, so of two approvals (or an approval and an admission) judged on
        the same revision, one lands and the other is judged again on what the first wrote. None:
        written, or nothing to fence (the job holds nothing its cluster does not count already:
        a shrink, a delete); else the revision to judge again past."""
        cluster = self.clusters.get(job.cluster_id)
        if cluster is None or not self.holds(cluster):
            return None
        counted = spend.of_clusters([(cluster.provider, [n.hardwaretype for n in cluster.nodes.values()])])
        if self._cluster(cluster) == counted:
            return None
        shard = self.shards.shard_of(job.cluster_id)
        return await self.board.put_if(spend.key(job.tenant, shard), self.of(job.tenant, shard), job.tenant, seen)

    async def fenced(self, tenant: str, judge: Callable[[], Awaitable[J]], write: Callable[[J], Awaitable[int | None]]) -> J:
        """`judge` the request, then `write` its shard's entry fenced on the revision it read
        (`reserve`, `confirm`): a judgement another planner's write got ahead of is judged
        again once the watch brought that write, at most `JUDGED` times (`Contested`). Holds
        `writing` from the judgement to the write: this planner's own background write in
        between would only make it judge again."""
        for _ in range(JUDGED):
            async with self.writing:
                judgement = await judge()
                last = await write(judgement)
            if last is None:
                return judgement
            log.info("tenant's spend changed while judged; judging again", tenant=tenant, at=last)
            try:
                await self.board.caught_up(tenant, last, CATCH_UP_S)
            except TimeoutError:
                break
        raise Contested(tenant)

    def release(self, cluster_id: str) -> None:
        """The admission is over: its job, if recorded, holds from the jobs in memory now."""
        found = self._pending.pop(cluster_id, None)
        if found is not None:
            self._mark(spend.key(found[0], self.shards.shard_of(cluster_id)))

    def resync(self) -> None:
        """Shards were gained: every entry of theirs written again from the clusters rebuilt."""
        for cluster in list(self.clusters.values()):
            if self.holds(cluster):
                self._taken[str(cluster.id)] = (cluster.layout_epoch, cluster.status == "deleted")
                self._mark(spend.key(cluster.tenant, self.shards.shard_of(str(cluster.id))))
        for name in list(self.board.known()):
            parsed = spend.parse_key(name)
            if parsed is not None and self.shards.holds(parsed[1]):
                self._mark(name)

    def forget(self, only: Callable[[str], bool]) -> None:
        """Clusters whose shards went to another planner: its writes from now on."""
        for cluster_id in [c for c in self._taken if only(c)]:
            del self._taken[cluster_id]
        for job_id in [j for j, (c, _) in self._held.items() if only(c)]:
            del self._held[job_id]
            self._sorted.pop(job_id, None)

    def of(self, tenant: str, shard: int) -> spend.Spend:
        """The shard's entry: its clusters, each at least what its open job makes of it."""
        counted = [self._cluster(c) for c in list(self.clusters.values())
                   if c.tenant == tenant and c.status != "deleted" and self.shards.shard_of(str(c.id)) == shard]
        new = [spend.of_clusters([(provider, hardware)]) for cid, (owner, provider, hardware) in self._pending.items()
               if owner == tenant and cid not in self.clusters and self.shards.shard_of(cid) == shard]
        return spend.total([*counted, *new])

    def _cluster(self, c: Cluster) -> spend.Spend:
        counted = spend.of_clusters([(c.provider, [n.hardwaretype for n in c.nodes.values()])])
        pending = self._pending.get(str(c.id))
        job = self.jobs.get(c.job_id) if c.job_id else None
        if pending is not None:
            return spend.at_least(counted, spend.of_clusters([(pending[1], pending[2])]))
        if job is not None and not job.is_final and job.nodes:
            return spend.at_least(counted, spend.of_clusters([(c.provider, [n.hardwaretype for n in job.nodes])]))
        return counted

    def _mark(self, name: str) -> None:
        self._dirty.add(name)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._flush())

    async def _flush(self) -> None:
        delay = RETRY_S[0]
        while self._dirty:
            name = self._dirty.pop()
            parsed = spend.parse_key(name)
            if parsed is None or not self.shards.holds(parsed[1]):
                continue  # (the shard went meanwhile: its new owner writes it)
            try:
                async with self.writing:
                    value = self.of(*parsed)
                    if self.board.known().get(name) == value:
                        continue
                    await self.board.put(name, value)
            except Exception as err:  # noqa: BLE001 - the bus away: the entry is written once it is back
                log.warning("a tenant's spend not shared yet; trying again", spend=name, error=str(err) or type(err).__name__,
                            retry_in_s=delay)
                self._dirty.add(name)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_S[1])
                continue
            delay = RETRY_S[0]

    async def settled(self) -> None:
        """Every change taken so far is written (tests)."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
