"""The planner's side of resource pools (docs/pools.md): a cluster on a `static-pool` provider
gets its machines from a pool.

- Admission (`refusal`, run by the `pool_admits` rule): the pool exists, and the tenant's
  quotas and the pool's per-job limit allow the nodes asked for; else the request is rejected
  with the pool's reason. The pool checks again when it takes the request (it decides).
- Dispatch (`admit`, the planner's DispatchPolicy): a node's `create` waits until the node
  holds a host (`pool_host` in its results). Nothing else is held: every other task of the
  node comes after its create.
- After every decision of the saga (`after`): ask for the hosts the job's held creates need
  (`PoolHostsRequested` on the job's request subject, then `JobResourcesRequested` on the job),
  report what happened to nodes holding hosts (confirmed, releasing, released, failed), and
  close the request when the job ends (a job cancelled while waiting cancels its request).
- Pool events (`on_pool_event`, from a live fold of the pools): a grant gives each node its
  host (`NodeResultsRecorded` with `pool_host`; `JobResourcesGranted`) and the job goes on; a
  refusal or an expired deadline fails the waiting job with the pool's reason. A grant that
  finds its job already ended hands the hosts straight back.

Every reaction is idempotent: the live fold replays every pool's history when a planner
starts, which is also how a planner killed between a grant and its use picks the grant up.

Longer than most modules: the four sides above are one conversation with the pool (what was
asked, reported and granted for a job), easier to check in one place.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from contracts import subjects
from contracts.catalog import Action, Catalog
from contracts.commands import COMMAND_ADAPTER, CreateCluster, ExpandCluster
from contracts.events import Event, NodeResult
from contracts.pools import (
    Holder,
    HostsGranted,
    HostSpec,
    NodeNeed,
    PoolDynamicHostCreated,
    PoolHostsRequested,
    PoolNodesReported,
    PoolRequest,
    PoolRequestCancelled,
    PoolRequestClosed,
    grants_in,
)
from contracts.records import Recorded
from muster.ports.eventlog import Append, ConcurrencyError, EventLog

from .domain.admission import Facts, provider_of
from .domain.cluster import Cluster
from .domain.job import Job
from .ports import PoolReaction

if TYPE_CHECKING:
    from services.pool.domain.pool import Pool

log = structlog.get_logger("muster.planner")

POOL_PROVIDER = "static-pool"
GRANT = "pool_host"
"""The node results key of a grant (the static-pool plugin reads it)."""


def request_id_of(job_id: str, nth: int) -> str:
    """The job's n-th request (a retried job asks again): `<job>`, `<job>_r2`, ..."""
    return job_id if nth == 1 else f"{job_id}_r{nth}"


def job_id_of(request_id: str) -> str:
    return request_id.split("_r", 1)[0]


class PoolFold(Protocol):
    """Every pool as its events make it, kept current (`services.pool.mirror.PoolMirror`)."""

    @property
    def pools(self) -> Mapping[str, Pool]: ...

    def watch(self, watcher: Callable[[str, Pool, Recorded], Awaitable[None]]) -> None: ...


class Catalogs(Protocol):
    """The tenants' catalogs as the planner holds them (`state.PlannerState`)."""

    def cached(self, tenant: str) -> Catalog | None: ...

    async def catalog(self, tenant: str, refresh: bool = False) -> Catalog: ...

    async def catalog_of(self, job: Job) -> Catalog: ...


class Jobs(Protocol):
    async def save_job(self, job: Job) -> None: ...


class PoolBroker:
    """The planner's `Pools` port: reads the pools from `mirror`, writes its requests and
    reports to `log`, and records a job's own part (`JobResourcesRequested`) through `jobs`."""

    def __init__(self, log: EventLog, mirror: PoolFold, catalogs: Catalogs, jobs: Jobs) -> None:
        self.log, self.mirror, self.catalogs, self.jobs = log, mirror, catalogs, jobs
        self.reported: dict[str, set[tuple[str, str]]] = {}
        """job id -> (node, status) reported to its pool in this life (read from the log the
        first time a job is seen)."""
        self.decided: dict[str, tuple[str, Event]] = {}
        """request id -> the pool's last word on it (pool, decision), kept for jobs this planner
        loads only later: a shard gained after the pools' history was replayed (catch_up)."""

    # -- which clusters use pools ------------------------------------------------------------

    @staticmethod
    def pool_named(catalog: Catalog | None, provider: str) -> tuple[str, bool] | None:
        """(pool, dynamic) for a provider that lends a pool's hosts (`static-pool`) or puts the
        machines it makes on a pool's books (any other provider with a `pool` field)."""
        p = catalog.providers.get(provider) if catalog is not None else None
        name = str(p.provisioner.get("pool") or "") if p is not None else ""
        if p is None or not name:
            return None
        return name, p.providertype != POOL_PROVIDER

    def _pool_of(self, job: Job, cluster: Cluster) -> tuple[str, bool] | None:
        return self.pool_named(self.catalogs.cached(job.tenant), cluster.provider)

    # -- admission ---------------------------------------------------------------------------

    def refusal(self, f: Facts) -> str:
        """Why the pool would refuse this create or expand now ('' if it would not)."""
        cmd = f.command
        provider = provider_of(f) if isinstance(cmd, CreateCluster) else f.cluster.provider if f.cluster else ""
        found = self.pool_named(f.catalog, provider)
        if found is None or not isinstance(cmd, (CreateCluster, ExpandCluster)):
            if f.catalog.providers.get(provider) is not None and f.catalog.providers[provider].providertype == POOL_PROVIDER:
                return f"provider {provider!r} is a static pool without its 'pool' field"
            return ""
        name, dynamic = found
        pool = self.mirror.pools.get(name)
        if pool is None:
            return f"pool {name!r} (provider {provider!r}) does not exist: add hosts with `muster pool add-hosts {name} FILE`"
        count = cmd.nodes - (len(f.cluster.nodes) if f.cluster is not None and isinstance(cmd, ExpandCluster) else 0)
        cluster_id = str(f.cluster.id) if f.cluster is not None else f"new-{f.job_id}"
        probe = PoolRequest(request_id=f.job_id, pool=name, tenant=f.tenant, cluster_id=cluster_id,
                            nodes=[NodeNeed(node_id=f"n{i}") for i in range(max(1, count))])
        return pool.quota_refusal(probe) if dynamic else pool.refusal(probe)

    # -- dispatch ----------------------------------------------------------------------------

    def admit(self, job: Job, cluster: Cluster, ready: Sequence[str]) -> Sequence[str]:
        found = self._pool_of(job, cluster)
        if found is None or found[1]:  # a provider that makes its machines needs no grant
            return ready
        return [t for t in ready if not self._needs_grant(job, cluster, t)]

    @staticmethod
    def _needs_grant(job: Job, cluster: Cluster, task_id: str) -> bool:
        task = job.tasks[task_id]
        return task.action is Action.CREATE and GRANT not in cluster.results.get(task.node, {})

    # -- after every decision ------------------------------------------------------------------

    async def after(self, job: Job, cluster: Cluster) -> None:
        found = self._pool_of(job, cluster)
        if found is None:
            return
        name, dynamic = found
        job_id = str(job.id)
        rid = job.resources["request_id"] if job.resources is not None else job_id
        if job_id not in self.reported:
            await self._load_reports(job, name)
        done = self.reported[job_id]
        for fact in self._reports(job, rid, done):
            if dynamic and fact.status == "confirmed":  # the machines it made go on the pool's books
                for made in self._made(job, cluster, fact.node_ids):
                    await self._write(job, name, rid, made)
                continue
            await self._write(job, name, rid, fact)
        if job.is_final and job.resources is not None and (rid, "closed") not in done:
            if not job.resources["granted"] and job.cancel_requested:
                await self._write(job, name, rid, PoolRequestCancelled(request_id=rid, reason=f"job {job_id} cancelled",
                                                                       by=job.requested_by))
            await self._write(job, name, rid, PoolRequestClosed(request_id=rid, by=job.requested_by,
                                                                outcome=f"job {job.state}: {job.error}".rstrip(": ")))
            done.add((rid, "closed"))
        if job.is_final and not dynamic:
            for fact in self._left_behind(job, cluster, name, rid, done):
                await self._write(job, name, rid, fact)
        if not dynamic:
            await self._ask(job, cluster, name)

    async def _ask(self, job: Job, cluster: Cluster, name: str) -> None:
        """Ask for the hosts of creates that wait for one, unless a request is out already."""
        if job.is_final or not job.planned or job.waiting_for_resources or job.state != "running":
            return
        plan = job.active_plan
        nodes = sorted({t.node for t in plan.tasks if t.action.value == "create"} if plan is not None else set())
        needs = [n for n in nodes if GRANT not in cluster.results.get(n, {}) and job.task_state.get(f"{n}.create") != "succeeded"]
        if not needs:
            return
        catalog = await self.catalogs.catalog_of(job)
        nth = 1 if job.resources is None else _nth(job.resources["request_id"]) + 1
        rid = request_id_of(str(job.id), nth)
        wait = getattr(COMMAND_ADAPTER.validate_python(job.request), "pool", None)
        request = PoolRequest(
            request_id=rid, pool=name, tenant=job.tenant, cluster_id=job.cluster_id, job_id=str(job.id),
            nodes=[NodeNeed(node_id=n, hardwaretype=cluster.nodes[n].hardwaretype,
                            requires=_requires(catalog, cluster.nodes[n].hardwaretype, cluster.provider)) for n in needs],
            urgency=wait.urgency if wait is not None else 50,
            # From this run's start: a retry's request counted from the job's creation was past
            # its deadline before it was asked.
            deadline=(job.run_started or job.created_on) + timedelta(seconds=wait.wait_s) if wait is not None and wait.wait_s else None,
            callback=wait.callback if wait is not None else None, by=job.requested_by,
        )
        subject = subjects.pool_request_events(job.tenant, name, rid)
        try:  # the fact first: a restart between the two appends asks again, and finds it asked
            await self.log.append(subject, [Append(PoolHostsRequested(request=request), msg_id=f"{subject}:requested")],
                                  expect_last_seq=0)
        except ConcurrencyError:
            pass
        if job.request_resources(name, rid, len(needs)):
            await self.jobs.save_job(job)
        log.info("hosts requested", job=str(job.id), pool=name, request=rid, hosts=len(needs))

    @staticmethod
    def _reports(job: Job, rid: str, done: set[tuple[str, str]]) -> list[PoolNodesReported]:
        """What to tell the pool about the job's nodes that it has not been told yet: a node
        confirmed, being deleted, deleted, or failed for good (its host goes to error)."""
        found: dict[str, list[str]] = {}
        failed: list[PoolNodesReported] = []
        for task_id, state in job.task_state.items():
            task = job.tasks.get(task_id)
            if task is None or task_id in job.cleanups.values() or ".cleanup" in task_id:
                continue  # a cleanup deletes a half-made machine; the node keeps its host
            node, action = task.node, task.action.value
            status = ""
            if action == "confirm" and state == "succeeded":
                status = "confirmed"
            elif action == "delete" and state in ("queued", "succeeded"):
                status = "released" if state == "succeeded" else "releasing"
            elif action in ("confirm", "delete") and state == "failed" and job.attempts_left(task_id) <= 0:
                status = "failed"
            key = (f"{rid}:{node}", status)
            if not status or key in done:
                continue
            done.add(key)
            if status == "failed":
                failed.append(PoolNodesReported(request_id=rid, cluster_id=job.cluster_id, status="failed", node_ids=[node],
                                                reason=f"{action} of node {node} failed for good (job {job.id})",
                                                by=job.requested_by))
            else:
                found.setdefault(status, []).append(node)
        def report(status: str) -> PoolNodesReported:
            return PoolNodesReported(request_id=rid, cluster_id=job.cluster_id, status=status,  # type: ignore[arg-type]
                                     node_ids=sorted(found[status]), by=job.requested_by)

        # Released last: a host that failed for good goes to error before it is given back.
        return [report(s) for s in ("confirmed", "releasing") if s in found] + failed + \
            [report(s) for s in ("released",) if s in found]

    def _left_behind(self, job: Job, cluster: Cluster, name: str, rid: str, done: set[tuple[str, str]]) -> list[PoolNodesReported]:
        """The job ended and the pool still lends hosts to nodes the cluster no longer has: a
        create that failed for good with nothing made (no delete ran to report the release), a
        rollback that took the node out. Those hosts go back (`released`); before, they stayed
        `assigning` for a cluster that had no such node, lent to nobody else for ever, and
        neither `pool reset` nor `remove-host` could take them (both refuse a held host)."""
        pool = self.mirror.pools.get(name)
        if pool is None:
            return []
        gone = sorted(node for cid, node in pool.book.holders if cid == job.cluster_id and node not in cluster.nodes
                      and (f"{rid}:{node}", "released") not in done)
        if not gone:
            return []
        done.update((f"{rid}:{node}", "released") for node in gone)
        return [PoolNodesReported(request_id=rid, cluster_id=job.cluster_id, status="released", node_ids=gone,
                                  reason=f"job {job.id} ended ({job.state}) and cluster {job.cluster_id} has no such node",
                                  by=job.requested_by)]

    @staticmethod
    def _made(job: Job, cluster: Cluster, nodes: list[str]) -> list[PoolDynamicHostCreated]:
        """The hosts a provider made for these confirmed nodes, as the pool registers them."""
        out = []
        for node in nodes:
            results = cluster.results.get(node, {})
            address = cluster.ipaddresses.get(node, {}).get("access_v4")
            keys = list((results.get("ssh_host_keys") or {}).values())
            if not (results.get("providerid") and address and keys):
                continue  # a machine without an SSH identity: nothing the pool could check
            spec = HostSpec.model_validate({
                "id": str(results["providerid"]), "address": address, "port": int(results.get("ssh_port") or 22),
                "user": str((results.get("ssh-auth") or {}).get("user") or "root"), "host_keys": keys,
                "properties": {"labels": [cluster.nodes[node].hardwaretype]} if node in cluster.nodes else {},
                "kind": "dynamic", "provider": cluster.provider,
            })
            out.append(PoolDynamicHostCreated(host=spec, by=job.requested_by, holder=Holder(
                tenant=job.tenant, cluster_id=job.cluster_id, node_id=node, request_id=str(job.id))))
        return out

    async def _load_reports(self, job: Job, name: str) -> None:
        """What earlier lives of this planner told the pool about the job."""
        done: set[tuple[str, str]] = set()
        last = _nth(job.resources["request_id"]) if job.resources is not None else 1
        for nth in range(1, last + 1):
            rid = request_id_of(str(job.id), nth)
            for r in await self.log.read(subjects.pool_request_events(job.tenant, name, rid)):
                if r.type == "PoolNodesReported":
                    done |= {(f"{rid}:{n}", r.event.status) for n in r.event.node_ids}
                elif r.type == "PoolRequestClosed":
                    done.add((rid, "closed"))
        self.reported[str(job.id)] = done

    async def _write(self, job: Job, name: str, rid: str, fact: Event) -> None:
        subject = subjects.pool_request_events(job.tenant, name, rid)
        # Derived from what it says: a repeat after a restart is stored once.
        digest = hashlib.sha256(fact.model_dump_json().encode()).hexdigest()[:24]
        await self.log.append(subject, [Append(fact, msg_id=f"{subject}:{digest}")])

    # -- the pool's decisions (`Planner.on_pool_event`) ---------------------------------------

    def decisions(self, name: str, r: Recorded) -> list[Event]:
        """The pool's decisions about requests in one of its events, each remembered as the
        request's last word (for jobs this planner loads only later: `last_word`)."""
        # A grant comes alone (`HostsGranted`) or with the release that made it (`HostsReleased`).
        found: list[Any] = grants_in(r.event) if r.type in ("HostsGranted", "HostsReleased") else \
            [r.event] if r.type in ("RequestRefused", "RequestExpired", "RequestCancelled") else []
        for decision in found:
            self.decided[decision.request_id] = (name, decision)
        return found

    def last_word(self, request_id: str) -> tuple[str, Pool, Event] | None:
        """The pool's last decision on a request, if the pool is still known."""
        found = self.decided.get(request_id)
        pool = self.mirror.pools.get(found[0]) if found is not None else None
        return (found[0], pool, found[1]) if found is not None and pool is not None else None

    async def react(self, name: str, pool: Pool, decision: Event, job: Job, cluster: Cluster) -> PoolReaction | None:
        """A decision on the request of `job` (loaded, on a cluster this planner acts for), taken
        into the aggregates; the planner records it (`PoolReaction`). None: nothing to record."""
        rid = decision.request_id  # type: ignore[attr-defined]
        if job.resources is None or job.resources["request_id"] != rid or job.resources.get("ended"):
            return None  # an older request of the job (one a retry left behind)
        if not isinstance(decision, HostsGranted):
            if job.waiting_for_resources and job.state == "running":
                reason = getattr(decision, "reason", "") or "the request was cancelled"
                self._give_up(job, cluster, f"pool {name}: {reason}")
                return PoolReaction(advance=False)
            return None
        assignments = {a.node_id: a.host_id for a in decision.assignments}
        if job.is_final or job.state != "running":  # it ended while the pool decided: give them back
            if not job.resources["granted"]:
                fact = PoolNodesReported(request_id=str(job.id), cluster_id=job.cluster_id, status="released",
                                         node_ids=sorted(assignments), by=job.requested_by)
                await self._write(job, name, str(job.id), fact)
            return None
        grants: list[NodeResult] = []
        for node, host_id in sorted(assignments.items()):
            host = pool.book.hosts.get(host_id)
            if host is None or node not in cluster.nodes:
                continue
            spec = host.spec
            grants.append(NodeResult(node_id=node, task_id="pool.grant", result={GRANT: {
                "pool": name, "host_id": spec.id, "address": spec.address, "port": spec.port, "user": spec.user,
                "host_keys": list(spec.host_keys)}}))
        cluster.record_many(grants)
        # The grant (the nodes' hosts on the cluster), the tasks it lets go, then the job's
        # record of it, as one chain (docs/pools.md, "Latency"). The server syncs the links
        # one after another, so what a task needs (its node's host) goes first and the job's
        # `JobResourcesGranted` last. Each is a whole decision: a chain cut short (a refusal,
        # then a reload) leaves a prefix, and the retry of this reaction, or a replay of the
        # grant, takes it from there (a job whose create is queued but whose grant is not
        # recorded records it; nothing new if all landed).

        def take() -> None:
            if job.take_resources(assignments):
                log.info("hosts granted", job=str(job.id), pool=name, hosts=len(assignments))

        return PoolReaction(advance=True, then=take)

    @staticmethod
    def _give_up(job: Job, cluster: Cluster, reason: str) -> None:
        """The pool will not serve the job: it fails with the pool's reason. Nothing ran: a new
        cluster is marked deleted, so its name is free for the create asked again (as a rejected
        approval's, docs/governance.md; until session 33 it stayed `failed`, holding its name,
        and `muster job retry` hung: docs/pools.md, "Giving up"); an expand's cluster goes back
        to the nodes it had."""
        job.fail(reason)
        if job.operation == "create":  # nothing ran (every create waited for its host): the name is free again
            cluster.change_layout(str(job.id), [])
            cluster.set_status("deleted", str(job.id), reason)
        else:
            cluster.change_layout(str(job.id), job.previous_nodes)
            cluster.set_status(cluster.status, str(job.id), reason)
        log.info("job gave up waiting for hosts", job=str(job.id), reason=reason)


def _requires(catalog: Catalog, hardwaretype: str, provider: str) -> str:
    hw = catalog.hardwaretypes.get(hardwaretype)
    return str((hw.providermap.get(provider, {}) if hw is not None else {}).get("requires", "") or "")


def _nth(request_id: str) -> int:
    return int(request_id.split("_r", 1)[1]) if "_r" in request_id else 1
