"""The planner's use cases: accept operations, get layouts, plan; the execution of a planned
job lives in `execution.py`.

State is only a fold of the log: `resume()` rebuilds every job and cluster from it, and every
handler is idempotent, so a redelivered event or a restarted planner changes nothing twice.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import NAMESPACE_URL, UUID, uuid5

import structlog
from nats.aio.client import Client
from pydantic import ValidationError

from contracts import subjects
from contracts.catalog import Catalog
from contracts.commands import (
    COMMAND_ADAPTER,
    VERB_OF,
    Accepted,
    AddServices,
    CancelJob,
    ClusterCommand,
    ConfigureCluster,
    CreateCluster,
    DeleteCluster,
    DryRun,
    ExpandCluster,
    JobCommand,
    PauseJob,
    Rejected,
    RemoveServices,
    RestartServices,
    ResumeJob,
    RetryJob,
    RollbackCluster,
    ShrinkCluster,
    StartServices,
    StopServices,
    UpgradeService,
)
from contracts.events import (
    ClusterRequested,
    JobPlanned,
    JobRequested,
    LayoutRequested,
    LayoutSolved,
    LayoutUnsolvable,
    PlannedTaskRecord,
)
from contracts.layout import Layout, NodeSpec
from contracts.templates import TemplateError, resolve_template
from muster.bus.connect import principal_of
from muster.bus.eventstore import Append, ConcurrencyError, EventStore, Recorded
from muster.bus.repository import Repository, fold, rebuild
from muster.catalog_files import describe_validation_error
from muster.catalog_store import read_catalog

from . import execution
from .domain import resize
from .domain.cluster import Cluster
from .domain.errors import PlanError
from .domain.job import Job, job_uuid
from .domain.plan import Plan, build_plan
from .domain.restore import restore_plan
from .metrics import QueueMetrics

log = structlog.get_logger("muster.planner")

LAYOUT_OPERATIONS = {"create", "expand", "shrink", "add-services", "remove-services"}


class Rejection(Exception):
    """A request that cannot be accepted; the message is the reply's reason."""


@dataclass
class PlannerConfig:
    instance: str = "planner-1"
    max_attempts: int = 3
    provisioner_class: str = "default"
    mode: str = "eager"
    task_timeout_s: float = 900.0
    action_timeout_s: dict[str, float] = field(default_factory=lambda: {"default": 600.0})
    solve_timeout_s: float = 30.0
    ack_wait_s: float = 30.0


@dataclass
class Planner:
    nc: Client
    store: EventStore
    config: PlannerConfig = field(default_factory=PlannerConfig)
    jobs: dict[str, Job] = field(default_factory=dict)
    clusters: dict[str, Cluster] = field(default_factory=dict)
    catalogs: dict[str, Catalog] = field(default_factory=dict)
    timers: execution.Timers = field(default_factory=execution.Timers)
    metrics: QueueMetrics = field(default_factory=QueueMetrics)
    ran_attempts: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    """Provisioners that claimed earlier attempts of a task, which its retries avoid where
    possible (best effort: not rebuilt after a restart)."""

    def __post_init__(self) -> None:
        self.repo = Repository(self.store)
        self.lock = asyncio.Lock()

    # -- start: rebuild from the log ---------------------------------------------------

    async def resume(self) -> None:
        """Rebuild every cluster and each cluster's current job from the log, then carry on
        with the open ones. Other (finished) jobs are loaded when a request names them: one
        job per cluster runs at a time, and accept records the cluster's pointer to a job
        before the job itself, so no open job can be missed."""

        def on_cluster(r: Recorded) -> None:
            key = r.subject.rsplit(".", 1)[1]
            self.clusters[key] = fold(Cluster, self.clusters.get(key), r)

        await self.store.replay(subjects.ALL_CLUSTER_EVENTS, on_cluster)
        async with self.lock:
            for cluster in list(self.clusters.values()):
                history = await self.store.read(subjects.job_events(cluster.tenant, cluster.job_id))
                job = rebuild(Job, history)
                if job is None:
                    continue  # accepted, then lost before the job was recorded: never answered
                self.jobs[cluster.job_id] = job
                if not job.is_final:
                    times = {(r.event.task_id, r.event.attempt): r.time for r in history if r.type in ("TaskQueued", "CleanupQueued")}
                    await self._resume_job(job, times)
        log.info("resumed", clusters=len(self.clusters), open=sum(not j.is_final for j in self.jobs.values()))

    async def find_job(self, tenant: str, job_id: str) -> Job | None:
        """A job from memory, or from the log (finished jobs are not kept at start)."""
        job = self.jobs.get(job_id)
        if job is None:
            try:
                job = rebuild(Job, await self.store.read(subjects.job_events(tenant, job_id)))
            except subjects.SubjectError:
                return None
            if job is not None:
                self.jobs[job_id] = job
        return job if job is not None and job.tenant == tenant else None

    async def _resume_job(self, job: Job, times: dict[tuple[str, int], datetime]) -> None:
        cluster = self.clusters[job.cluster_id]
        if not job.planned:
            if job.operation in LAYOUT_OPERATIONS:
                await self._ensure_layout_request(job, cluster)
            return
        # Queued attempts may never have reached TASKS; the message id makes a repeat
        # harmless. Their timers count from when they were queued.
        catalog = await self.catalog(job.tenant)
        for task_id, state in job.task_state.items():
            if state == "queued":
                attempt = job.attempts[task_id]
                await execution.publish(self, job, cluster, catalog, task_id, attempt, times.get((task_id, attempt)))
        await execution.advance(self, job, cluster)

    async def catalog(self, tenant: str, refresh: bool = False) -> Catalog:
        if refresh or tenant not in self.catalogs:
            self.catalogs[tenant] = await read_catalog(self.store, tenant)
        return self.catalogs[tenant]

    # -- queries ---------------------------------------------------------------------------

    def job_view(self, tenant: str, job_id: str) -> dict[str, Any] | None:
        job = self.jobs.get(job_id)
        if job is None or job.tenant != tenant:
            return None
        return job.view()

    # -- operations (request/reply) ----------------------------------------------------------

    async def handle_request(self, tenant: str, verb: str, data: bytes) -> Accepted | Rejected | DryRun:
        try:
            subjects.token(tenant, "tenant")
            command = self._parse(verb, data)
            async with self.lock:
                if isinstance(command, JobCommand):
                    return await self._control(tenant, command)
                if isinstance(command, CreateCluster):
                    return await self._create(tenant, command)
                return await self._cluster_operation(tenant, command)
        except (Rejection, subjects.SubjectError) as err:
            return Rejected(reason=str(err))

    def _parse(self, verb: str, data: bytes) -> Any:
        try:
            body = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise Rejection(f"request body is not JSON: {err}") from None
        if not isinstance(body, dict):
            raise Rejection("request body must be a JSON object")
        expected = {v: k for k, v in VERB_OF.items()}.get(verb)
        if expected is None:
            raise Rejection(f"unknown operation {verb!r}; known: {', '.join(sorted(VERB_OF.values()))}")
        body.setdefault("type", expected)
        if body["type"] != expected:
            raise Rejection(f"operation {verb!r} takes a {expected} command, not {body['type']!r}")
        try:
            return COMMAND_ADAPTER.validate_python(body)
        except ValidationError as err:
            raise Rejection(f"invalid {expected}: {describe_validation_error(err)}") from None

    # -- create -----------------------------------------------------------------------------

    async def _create(self, tenant: str, cmd: CreateCluster) -> Accepted | DryRun:
        job_id = str(job_uuid(tenant, cmd.request_id))
        cluster_id = str(cluster_uuid(job_id))
        known = await self.find_job(tenant, job_id)
        if known is not None and not cmd.dry_run:
            return Accepted(job_id=job_id, cluster_id=known.cluster_id, duplicate=True)
        catalog = await self.catalog(tenant, refresh=True)
        try:
            template = resolve_template(catalog, cmd.template)
        except TemplateError as err:
            raise Rejection(str(err)) from None
        size = template.constraints.size
        if cmd.nodes < size.min or (size.max is not None and cmd.nodes > size.max):
            limit = f"between {size.min} and {size.max}" if size.max is not None else f"at least {size.min}"
            raise Rejection(f"template {cmd.template!r} allows {limit} nodes; {cmd.nodes} requested")
        provider = cmd.provider or template.defaults.provider
        if not provider or provider not in catalog.providers:
            raise Rejection(f"unknown provider {provider!r}" if provider else f"template {cmd.template!r} names no default provider and the request none")
        services = cmd.services if cmd.services is not None else template.defaults.services
        unknown = sorted(set(services) - set(catalog.services))
        if unknown:
            raise Rejection(f"unknown services: {', '.join(unknown)}")
        job = Job(JobRequested(tenant=tenant, job_id=job_id, cluster_id=cluster_id, operation="create",
                               request=cmd.model_dump(mode="json"), requested_by=cmd.requested_by,
                               planner=self.config.instance, max_attempts=self.config.max_attempts))
        cluster = Cluster(ClusterRequested(tenant=tenant, cluster_id=cluster_id, name=cmd.name, template=cmd.template,
                                           provider=provider, config={**template.defaults.config, **cmd.config}, job_id=job_id))
        request = LayoutRequested(
            job_id=job_id, cluster_id=cluster_id, template=cmd.template, nodes=cmd.nodes, services=list(services),
            provider=provider, hardwaretype=cmd.hardwaretype, imagetype=cmd.imagetype,
            catalog=_solver_catalog(catalog),
        )
        if cmd.dry_run:
            return await self._dry_run(job, cluster, catalog, request)
        # The cluster (which points to its job) first: see resume().
        try:
            await self.repo.save(cluster, subjects.cluster_events(tenant, cluster_id))
        except ConcurrencyError:  # a retry after a crash between the two saves
            cluster = rebuild(Cluster, await self.store.read(subjects.cluster_events(tenant, cluster_id)))  # type: ignore[assignment]
        try:
            await self.repo.save(job, subjects.job_events(tenant, job_id))
        except ConcurrencyError:
            return Accepted(job_id=job_id, cluster_id=cluster_id, duplicate=True)
        self.jobs[job_id], self.clusters[cluster_id] = job, cluster
        await self._append_layout_request(job, request)
        log.info("accepted", tenant=tenant, job=job_id, operation="create", nodes=cmd.nodes)
        return Accepted(job_id=job_id, cluster_id=cluster_id)

    # -- operations on an existing cluster ------------------------------------------------

    async def _cluster_operation(self, tenant: str, cmd: ClusterCommand) -> Accepted | DryRun:
        cluster = self.clusters.get(cmd.cluster_id)
        if cluster is None or cluster.tenant != tenant:
            raise Rejection(f"unknown cluster {cmd.cluster_id!r}")
        operation = _operation_of(cmd)
        job_id = str(job_uuid(tenant, cmd.request_id))
        if await self.find_job(tenant, job_id) is not None and not cmd.dry_run:
            return Accepted(job_id=job_id, cluster_id=cmd.cluster_id, duplicate=True)
        current = await self.find_job(tenant, cluster.job_id)
        if current is not None and not current.is_final and current.id != UUID(job_id):
            raise Rejection(f"cluster {cmd.cluster_id!r} is busy with job {cluster.job_id} ({current.operation}, {current.state})")
        if cluster.status == "deleted":
            raise Rejection(f"cluster {cmd.cluster_id!r} is deleted")
        if operation not in ("delete",) and cluster.status not in ("active", "incomplete"):
            raise Rejection(f"cluster {cmd.cluster_id!r} is {cluster.status}; {operation} needs an active cluster")
        catalog = await self.catalog(tenant, refresh=True)
        job = Job(JobRequested(tenant=tenant, job_id=job_id, cluster_id=cmd.cluster_id, operation=operation,
                               request=cmd.model_dump(mode="json"), requested_by=cmd.requested_by,
                               planner=self.config.instance, max_attempts=self.config.max_attempts))
        if isinstance(cmd, RollbackCluster):
            return await self._restore(job, cluster, catalog, cmd)
        if operation in LAYOUT_OPERATIONS:
            request = self._layout_request(job, cluster, catalog, cmd)
            if cmd.dry_run:
                return await self._dry_run(job, cluster, catalog, request)
            await self._accept(job, cluster)
            await self._append_layout_request(job, request)
        else:
            config = cmd.config if isinstance(cmd, ConfigureCluster) else None
            if cmd.dry_run:
                plan = self._plan_direct(job, cluster, catalog, cmd)
                return DryRun(layout=resize.layout_of(list(cluster.nodes.values())), plan=plan.to_json())
            self._record_plan(job, cluster, self._plan_direct(job, cluster, catalog, cmd), list(cluster.nodes.values()))
            await self._accept(job, cluster)
            if config is not None:
                cluster.change_config(job_id, config)
            await execution.advance(self, job, cluster)
        log.info("accepted", tenant=tenant, job=job_id, operation=operation)
        return Accepted(job_id=job_id, cluster_id=cmd.cluster_id)

    async def _restore(self, job: Job, cluster: Cluster, catalog: Catalog, cmd: RollbackCluster) -> Accepted | DryRun:
        """Back to the cluster as it was before job `to_job` (its recorded previous state)."""
        source = await self.find_job(job.tenant, cmd.to_job)
        if source is None or source.cluster_id != job.cluster_id:
            raise Rejection(f"unknown job {cmd.to_job!r} for cluster {job.cluster_id!r}")
        if not source.planned or source.operation == "create":
            raise Rejection(f"job {cmd.to_job} left no earlier state to return to ({source.operation}, {source.state})")
        target, config = source.previous_nodes, source.previous_config
        try:
            restore = restore_plan(catalog.services, list(cluster.nodes.values()), target, config != cluster.config)
        except PlanError as err:
            raise Rejection(f"cannot plan the rollback: {err}") from None
        if not restore.plan.tasks:
            raise Rejection(f"cluster {job.cluster_id} is already as it was before job {cmd.to_job}")
        if cmd.dry_run:
            return DryRun(layout=resize.layout_of(target), plan=restore.plan.to_json())
        self._record_plan(job, cluster, restore.plan, list(target))
        await self._accept(job, cluster)
        cluster.change_layout(str(job.id), list(restore.interim))
        cluster.change_config(str(job.id), config)
        await execution.advance(self, job, cluster)
        log.info("accepted", tenant=job.tenant, job=str(job.id), operation="rollback", to_job=cmd.to_job)
        return Accepted(job_id=str(job.id), cluster_id=job.cluster_id)

    async def _accept(self, job: Job, cluster: Cluster) -> None:
        # The cluster's pointer to its job first: see resume().
        cluster.set_status(cluster.status, str(job.id))
        await self.repo.save(cluster, subjects.cluster_events(job.tenant, job.cluster_id))
        try:
            await self.repo.save(job, subjects.job_events(job.tenant, str(job.id)))
        except ConcurrencyError:
            raise Rejection(f"job {job.id} exists already") from None
        self.jobs[str(job.id)] = job

    def _layout_request(self, job: Job, cluster: Cluster, catalog: Catalog, cmd: ClusterCommand) -> LayoutRequested:
        nodes = list(cluster.nodes.values())
        total = len(nodes)
        if isinstance(cmd, ExpandCluster):
            if cmd.nodes <= total:
                raise Rejection(f"expand needs more than the cluster's {total} nodes; {cmd.nodes} requested")
            total = cmd.nodes
        elif isinstance(cmd, ShrinkCluster):
            if cmd.nodes >= total:
                raise Rejection(f"shrink needs fewer than the cluster's {total} nodes; {cmd.nodes} requested")
            total = cmd.nodes
        on_cluster = {s for n in nodes for s in n.services}
        add = list(cmd.services) if isinstance(cmd, AddServices) else []
        remove = list(cmd.services) if isinstance(cmd, RemoveServices) else []
        if unknown := sorted(set(add) - set(catalog.services)):
            raise Rejection(f"unknown services: {', '.join(unknown)}")
        if present := sorted(set(add) & on_cluster):
            raise Rejection(f"already on the cluster: {', '.join(present)}")
        if absent := sorted(set(remove) - on_cluster):
            raise Rejection(f"not on the cluster: {', '.join(absent)}")
        return LayoutRequested(
            job_id=str(job.id), cluster_id=str(cluster.id), template=cluster.template, nodes=total,
            services=sorted(on_cluster), provider=cluster.provider, existing=resize.layout_of(nodes),
            add_services=add, remove_services=remove, catalog=_solver_catalog(catalog),
        )

    def _plan_direct(self, job: Job, cluster: Cluster, catalog: Catalog, cmd: ClusterCommand) -> Plan:
        """Operations that change no layout: plan them on the cluster as it is."""
        nodes = list(cluster.nodes.values())
        services: Sequence[str] | None = None
        operation = job.operation
        if isinstance(cmd, (StartServices, StopServices, RestartServices)):
            services = cmd.services
        elif isinstance(cmd, UpgradeService):
            services, operation = [cmd.service], "upgrade"
        try:
            return build_plan(catalog.services, nodes, operation, services=services)
        except PlanError as err:
            raise Rejection(f"cannot plan {job.operation}: {err}") from None

    # -- layouts ---------------------------------------------------------------------------

    async def _append_layout_request(self, job: Job, request: LayoutRequested) -> None:
        try:
            await self.store.append(subjects.layout_events(job.tenant, str(job.id)),
                                    [Append(request, msg_id=f"{job.id}:layout:1")], expect_last_seq=0)
        except ConcurrencyError:
            pass  # already asked (a restart after a crash between the two appends)

    async def _ensure_layout_request(self, job: Job, cluster: Cluster) -> None:
        if await self.store.last_seq(subjects.layout_events(job.tenant, str(job.id))):
            return
        catalog = await self.catalog(job.tenant)
        cmd = COMMAND_ADAPTER.validate_python(job.request)
        if isinstance(cmd, CreateCluster):
            template = resolve_template(catalog, cmd.template)
            request = LayoutRequested(
                job_id=str(job.id), cluster_id=job.cluster_id, template=cmd.template, nodes=cmd.nodes,
                services=list(cmd.services if cmd.services is not None else template.defaults.services),
                provider=cluster.provider, hardwaretype=cmd.hardwaretype, imagetype=cmd.imagetype,
                catalog=_solver_catalog(catalog),
            )
        else:
            request = self._layout_request(job, cluster, catalog, cmd)
        await self._append_layout_request(job, request)

    async def on_layout_event(self, recorded: Recorded) -> None:
        event = recorded.event
        if not isinstance(event, (LayoutSolved, LayoutUnsolvable)):
            return
        async with self.lock:
            job = self.jobs.get(event.job_id)
            if job is None or job.planned or job.is_final:
                return
            cluster = self.clusters[job.cluster_id]
            if isinstance(event, LayoutUnsolvable):
                await self._fail_unplanned(job, cluster, f"no layout: {event.message}")
                return
            catalog = await self.catalog(job.tenant)
            try:
                plan, target = self._plan_layout(job, cluster, catalog, event.layout)
            except PlanError as err:
                await self._fail_unplanned(job, cluster, f"planning failed: {err}")
                return
            self._record_plan(job, cluster, plan, target)
            if job.operation not in execution.SHRINKING:
                cluster.change_layout(str(job.id), target)
            await execution.advance(self, job, cluster)

    def _plan_layout(self, job: Job, cluster: Cluster, catalog: Catalog, layout: Layout) -> tuple[Plan, list[NodeSpec]]:
        current = list(cluster.nodes.values())
        cmd = COMMAND_ADAPTER.validate_python(job.request)
        op = job.operation
        if op in ("create", "expand"):
            change = resize.expand(current, layout, _node_factory(cluster, catalog, current))
            plan = build_plan(catalog.services, change.nodes, op, node_ids=None if op == "create" else change.planned)
        elif op == "shrink":
            change = resize.shrink(current, layout)
            plan = build_plan(catalog.services, current, op, node_ids=change.planned)
        elif op == "add-services":
            change = resize.add_services(current, layout, cmd.services)
            plan = build_plan(catalog.services, change.nodes, op, services=cmd.services, node_ids=change.planned)
        else:  # remove-services
            change = resize.remove_services(current, cmd.services)
            plan = build_plan(catalog.services, current, op, services=cmd.services, node_ids=change.planned)
        return plan, list(change.nodes)

    def _record_plan(self, job: Job, cluster: Cluster, plan: Plan, target: list[NodeSpec]) -> None:
        compact = plan.to_compact_json()
        job.record_plan(JobPlanned(
            job_id=str(job.id), mode=self.config.mode,  # type: ignore[arg-type]
            tasks=[PlannedTaskRecord(id=t.id, node=t.node, action=t.action, service=t.service) for t in plan.tasks],
            links=compact["links"], stages=compact["stages"], thrown_in=compact["thrown_in"],
            nodes=target, previous_nodes=list(cluster.nodes.values()), previous_config=cluster.config,
        ))

    async def _fail_unplanned(self, job: Job, cluster: Cluster, reason: str) -> None:
        job.fail(reason)
        status = "failed" if job.operation == "create" else cluster.status
        cluster.set_status(status, str(job.id), reason)
        await execution.save(self, job, cluster)
        log.info("job finished", job=str(job.id), state=job.state, error=reason)

    # -- dry runs: the same decisions, nothing recorded -----------------------------------

    async def _dry_run(self, job: Job, cluster: Cluster, catalog: Catalog, request: LayoutRequested) -> DryRun:
        try:
            reply = await self.nc.request(subjects.solve_request(job.tenant, principal_of(self.nc)), request.model_dump_json().encode(),
                                          timeout=self.config.solve_timeout_s)
        except Exception as err:  # no solver running, or it timed out
            raise Rejection(f"dry run needs a solver and none answered: {type(err).__name__}") from None
        answer = json.loads(reply.data)
        if answer.get("type") != "LayoutSolved":
            raise Rejection(f"no layout: {answer.get('message', answer)}")
        layout = Layout.model_validate(answer["layout"])
        try:
            plan, _ = self._plan_layout(job, cluster, catalog, layout)
        except PlanError as err:
            raise Rejection(f"cannot plan {job.operation}: {err}") from None
        return DryRun(layout=layout, plan=plan.to_json())

    # -- job control ---------------------------------------------------------------------

    async def _control(self, tenant: str, cmd: JobCommand) -> Accepted:
        job = await self.find_job(tenant, cmd.job_id)
        if job is None:
            raise Rejection(f"unknown job {cmd.job_id!r}")
        cluster = self.clusters[job.cluster_id]
        if cmd.request_id and cmd.request_id in job.control_requests:
            return Accepted(job_id=cmd.job_id, cluster_id=job.cluster_id, duplicate=True)
        by, rid = cmd.requested_by, cmd.request_id
        changed = {
            PauseJob: lambda: job.pause(by, rid), ResumeJob: lambda: job.resume(by, rid),
            CancelJob: lambda: job.cancel(by, rid), RetryJob: lambda: job.retry(by, rid),
        }[type(cmd)]()
        if not changed:
            raise Rejection(f"job {cmd.job_id} is {job.view()['state']}: cannot {VERB_OF[cmd.type]} it")  # type: ignore[attr-defined]
        if isinstance(cmd, RetryJob):
            if job.operation not in execution.SHRINKING:
                cluster.change_layout(str(job.id), job.nodes)
            cluster.set_status(cluster.status, str(job.id))
        await execution.advance(self, job, cluster)
        return Accepted(job_id=cmd.job_id, cluster_id=job.cluster_id)

    async def on_task_event(self, recorded: Recorded) -> None:
        await execution.on_task_event(self, recorded)


def _operation_of(cmd: ClusterCommand) -> str:
    verb = VERB_OF[cmd.type]  # type: ignore[attr-defined]
    if isinstance(cmd, ConfigureCluster) and cmd.restart:
        return "configure-restart"
    return verb


def _solver_catalog(catalog: Catalog) -> dict[str, Any]:
    """What a solver needs, without provider fields (which may hold plugin settings)."""
    data = catalog.model_dump(mode="json", include={"hardwaretypes", "imagetypes", "services", "clustertemplates", "partialtemplates"})
    data["providers"] = {n: {"name": p.name, "providertype": p.providertype} for n, p in catalog.providers.items()}
    return data


def _node_factory(cluster: Cluster, catalog: Catalog, existing: list[NodeSpec]) -> resize.NodeFactory:
    provider = cluster.provider
    flavors = {n: hw.flavor(provider) or "" for n, hw in catalog.hardwaretypes.items()}
    images = {n: (img.image(provider) or "", img.providermap.get(provider, {}).get("sshuser", "")) for n, img in catalog.imagetypes.items()}
    return resize.NodeFactory(cluster.name, provider, existing, flavors, images)


def cluster_uuid(job_id: str) -> UUID:
    """Derived from the job id, so a retried create maps to the same cluster."""
    return uuid5(NAMESPACE_URL, f"muster:cluster:{job_id}")
