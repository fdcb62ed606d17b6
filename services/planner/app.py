"""The planner's use cases: accept operations, plan, dispatch, fold results, finish.

State is only a fold of the log: `resume()` rebuilds every job and cluster from it, and every
handler is idempotent, so a redelivered event or a restarted planner changes nothing twice.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any
from uuid import NAMESPACE_URL, UUID, uuid5

import structlog
from nats.aio.client import Client
from pydantic import ValidationError

from contracts import subjects
from contracts.catalog import Catalog
from contracts.commands import COMMAND_ADAPTER, VERB_OF, Accepted, CreateCluster, DeleteCluster, Rejected
from contracts.events import (
    ClusterRequested,
    JobPlanned,
    JobRequested,
    LayoutRequested,
    LayoutSolved,
    LayoutUnsolvable,
    PlannedTaskRecord,
    TaskAttemptFailed,
    TaskCompleted,
    TaskFailed,
    TaskSucceeded,
)
from contracts.layout import Layout, NodeSpec
from contracts.templates import TemplateError, resolve_template
from muster.bus.eventstore import Append, ConcurrencyError, EventStore, Recorded
from muster.bus.repository import Repository, rebuild
from muster.catalog_files import describe_validation_error
from muster.catalog_store import read_catalog

from .domain.cluster import Cluster
from .domain.job import Job, job_uuid
from .domain.plan import PlanError, build_plan
from .tasks import task_message

log = structlog.get_logger("muster.planner")


class Rejection(Exception):
    """A request that cannot be accepted; the message is the reply's reason."""


@dataclass
class PlannerConfig:
    instance: str = "planner-1"
    max_attempts: int = 3
    provisioner_class: str = "default"
    mode: str = "eager"


@dataclass
class Planner:
    nc: Client
    store: EventStore
    config: PlannerConfig = field(default_factory=PlannerConfig)
    jobs: dict[str, Job] = field(default_factory=dict)
    clusters: dict[str, Cluster] = field(default_factory=dict)
    catalogs: dict[str, Catalog] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.repo = Repository(self.store)
        self.lock = asyncio.Lock()

    # -- start: rebuild from the log ---------------------------------------------------

    async def resume(self) -> None:
        for cls, pattern, into in ((Job, subjects.ALL_JOB_EVENTS, self.jobs), (Cluster, subjects.ALL_CLUSTER_EVENTS, self.clusters)):
            by_subject: dict[str, list[Recorded]] = {}
            for r in await self.store.read(pattern):
                by_subject.setdefault(r.subject, []).append(r)
            for history in by_subject.values():
                aggregate = rebuild(cls, history)
                if aggregate is not None:
                    into[str(aggregate.id)] = aggregate  # type: ignore[assignment]
        for job in self.jobs.values():
            if not job.is_final and job.planned:
                await self._publish_queued(job)
        log.info("resumed", jobs=len(self.jobs), clusters=len(self.clusters))

    async def catalog(self, tenant: str, refresh: bool = False) -> Catalog:
        if refresh or tenant not in self.catalogs:
            self.catalogs[tenant] = await read_catalog(self.store, tenant)
        return self.catalogs[tenant]

    # -- operations (request/reply) ----------------------------------------------------------

    async def handle_request(self, tenant: str, verb: str, data: bytes) -> Accepted | Rejected:
        try:
            subjects.token(tenant, "tenant")
            command = self._parse(verb, data)
            async with self.lock:
                if isinstance(command, CreateCluster):
                    return await self._create(tenant, command)
                return await self._delete(tenant, command)
        except Rejection as err:
            return Rejected(reason=str(err))
        except subjects.SubjectError as err:
            return Rejected(reason=str(err))

    def _parse(self, verb: str, data: bytes) -> CreateCluster | DeleteCluster:
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
            return COMMAND_ADAPTER.validate_python(body)  # type: ignore[no-any-return]
        except ValidationError as err:
            raise Rejection(f"invalid {expected}: {describe_validation_error(err)}") from None

    async def _create(self, tenant: str, cmd: CreateCluster) -> Accepted:
        job_id = str(job_uuid(tenant, cmd.request_id))
        cluster_id = str(cluster_uuid(job_id))
        if job_id in self.jobs:
            return Accepted(job_id=job_id, cluster_id=self.jobs[job_id].cluster_id, duplicate=True)
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

        request = cmd.model_dump(mode="json")
        job = Job(JobRequested(tenant=tenant, job_id=job_id, cluster_id=cluster_id, operation="create",
                               request=request, requested_by=cmd.requested_by, planner=self.config.instance))
        cluster = Cluster(ClusterRequested(tenant=tenant, cluster_id=cluster_id, name=cmd.name, template=cmd.template,
                                           provider=provider, config={**template.defaults.config, **cmd.config}, job_id=job_id))
        try:
            await self.repo.save(job, subjects.job_events(tenant, job_id))
        except ConcurrencyError:
            return Accepted(job_id=job_id, cluster_id=cluster_id, duplicate=True)
        await self.repo.save(cluster, subjects.cluster_events(tenant, cluster_id))
        self.jobs[job_id], self.clusters[cluster_id] = job, cluster
        layout_request = LayoutRequested(
            job_id=job_id, cluster_id=cluster_id, template=cmd.template, nodes=cmd.nodes, services=list(services),
            provider=provider, hardwaretype=cmd.hardwaretype, imagetype=cmd.imagetype,
            catalog=_solver_catalog(catalog, cmd.template),
        )
        await self.store.append(subjects.layout_events(tenant, job_id), [Append(layout_request, msg_id=f"{job_id}:layout:1")], expect_last_seq=0)
        log.info("accepted", tenant=tenant, job=job_id, operation="create", nodes=cmd.nodes)
        return Accepted(job_id=job_id, cluster_id=cluster_id)

    async def _delete(self, tenant: str, cmd: DeleteCluster) -> Accepted:
        cluster = self.clusters.get(cmd.cluster_id)
        if cluster is None or cluster.tenant != tenant:
            raise Rejection(f"unknown cluster {cmd.cluster_id!r}")
        current = self.jobs.get(cluster.job_id)
        if current is not None and not current.is_final:
            raise Rejection(f"cluster {cmd.cluster_id!r} is busy with job {cluster.job_id} ({current.operation})")
        if cluster.status == "deleted":
            raise Rejection(f"cluster {cmd.cluster_id!r} is already deleted")
        job_id = str(job_uuid(tenant, cmd.request_id))
        if job_id in self.jobs:
            return Accepted(job_id=job_id, cluster_id=cmd.cluster_id, duplicate=True)
        job = Job(JobRequested(tenant=tenant, job_id=job_id, cluster_id=cmd.cluster_id, operation="delete",
                               request=cmd.model_dump(mode="json"), requested_by=cmd.requested_by, planner=self.config.instance))
        catalog = await self.catalog(tenant)
        self._plan(job, cluster, catalog, "delete")
        try:
            await self.repo.save(job, subjects.job_events(tenant, job_id))
        except ConcurrencyError:
            return Accepted(job_id=job_id, cluster_id=cmd.cluster_id, duplicate=True)
        self.jobs[job_id] = job
        cluster.set_status("deleting", job_id)
        await self.repo.save(cluster, subjects.cluster_events(tenant, cmd.cluster_id))
        await self._dispatch(job, cluster)
        log.info("accepted", tenant=tenant, job=job_id, operation="delete")
        return Accepted(job_id=job_id, cluster_id=cmd.cluster_id)

    # -- queries ---------------------------------------------------------------------------

    def job_view(self, tenant: str, job_id: str) -> dict[str, Any] | None:
        job = self.jobs.get(job_id)
        if job is None or job.tenant != tenant:
            return None
        return job.view()

    # -- layouts ---------------------------------------------------------------------------

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
                await self._finish(job, cluster, failed=f"no layout: {event.message}")
                return
            catalog = await self.catalog(job.tenant)
            cluster.change_layout(str(job.id), _nodes(cluster, catalog, event.layout))
            try:
                self._plan(job, cluster, catalog, "create")
            except PlanError as err:
                await self._finish(job, cluster, failed=f"planning failed: {err}")
                return
            await self.repo.save(cluster, subjects.cluster_events(job.tenant, job.cluster_id))
            await self._dispatch(job, cluster)

    def _plan(self, job: Job, cluster: Cluster, catalog: Catalog, operation: str) -> None:
        plan = build_plan(catalog.services, list(cluster.nodes.values()), operation)
        job.record_plan(
            JobPlanned(
                job_id=str(job.id),
                mode=self.config.mode,  # type: ignore[arg-type]
                tasks=[PlannedTaskRecord(id=t.id, node=t.node, action=t.action, service=t.service) for t in plan.tasks],
                edges=[tuple(e) for e in plan.edges],  # type: ignore[misc]
                stages=[list(s) for s in plan.stages],
            )
        )

    # -- dispatch -----------------------------------------------------------------------

    async def _dispatch(self, job: Job, cluster: Cluster) -> None:
        queued = [job.queue(t, self.config.provisioner_class) for t in job.ready()]
        await self.repo.save(job, subjects.job_events(job.tenant, str(job.id)))
        catalog = await self.catalog(job.tenant)
        for q in queued:
            await self._publish(job, cluster, catalog, q.task_id, q.attempt)

    async def _publish(self, job: Job, cluster: Cluster, catalog: Catalog, task_id: str, attempt: int) -> None:
        message = task_message(job, cluster, catalog, task_id, attempt, self.config.provisioner_class)
        await self.store.js.publish(
            subjects.task_queue(job.tenant, self.config.provisioner_class),
            message.model_dump_json().encode(),
            headers={"Nats-Msg-Id": f"{job.id}.{task_id}.{attempt}"},
        )

    async def _publish_queued(self, job: Job) -> None:
        # After a restart: a queued attempt may never have reached TASKS. The message id
        # makes the repeat harmless inside the stream's duplicate window.
        cluster = self.clusters[job.cluster_id]
        catalog = await self.catalog(job.tenant)
        for task_id, state in job.task_state.items():
            if state == "queued":
                await self._publish(job, cluster, catalog, task_id, job.attempts[task_id])

    # -- outcomes ---------------------------------------------------------------------------

    async def on_task_event(self, recorded: Recorded) -> None:
        event = recorded.event
        if not isinstance(event, (TaskSucceeded, TaskFailed)):
            return
        async with self.lock:
            job = self.jobs.get(event.job_id)
            if job is None or job.is_final:
                return
            cluster = self.clusters[job.cluster_id]
            if isinstance(event, TaskSucceeded):
                await self._succeeded(job, cluster, event)
            else:
                await self._failed(job, cluster, event)

    async def _succeeded(self, job: Job, cluster: Cluster, event: TaskSucceeded) -> None:
        done = TaskCompleted(job_id=event.job_id, task_id=event.task_id, attempt=event.attempt,
                             result=event.result, ipaddresses=event.ipaddresses, hostname=event.hostname)
        if not job.complete(done):
            return
        node = job.tasks[event.task_id]["node"]
        if cluster.record_results(node, event.task_id, event.result, event.ipaddresses, event.hostname):
            await self.repo.save(cluster, subjects.cluster_events(job.tenant, job.cluster_id))
        if job.all_done:
            await self._finish(job, cluster)
        else:
            await self._dispatch(job, cluster)

    async def _failed(self, job: Job, cluster: Cluster, event: TaskFailed) -> None:
        if not job.fail_attempt(TaskAttemptFailed(job_id=event.job_id, task_id=event.task_id, attempt=event.attempt, error=event.error)):
            return
        if job.retry_allowed(event.task_id, self.config.max_attempts):
            queued = job.requeue(event.task_id, self.config.provisioner_class)
            await self.repo.save(job, subjects.job_events(job.tenant, str(job.id)))
            await self._publish(job, cluster, await self.catalog(job.tenant), queued.task_id, queued.attempt)
            return
        reason = f"task {event.task_id} failed {job.attempts[event.task_id]} times; last error: {event.error}"
        await self._finish(job, cluster, failed=reason)

    async def _finish(self, job: Job, cluster: Cluster, failed: str | None = None) -> None:
        if failed is None:
            job.succeed()
            status = "deleted" if job.operation == "delete" else "active"
        else:
            job.fail(failed)
            status = "failed" if job.operation == "create" and not cluster.results else "incomplete"
        await self.repo.save(job, subjects.job_events(job.tenant, str(job.id)))
        cluster.set_status(status, str(job.id), failed or "")
        await self.repo.save(cluster, subjects.cluster_events(job.tenant, job.cluster_id))
        log.info("job finished", job=str(job.id), state=job.state, error=failed or "")


def _solver_catalog(catalog: Catalog, template: str) -> dict[str, Any]:
    """What a solver needs, without provider fields (which may hold plugin settings)."""
    data = catalog.model_dump(mode="json", include={"hardwaretypes", "imagetypes", "services", "clustertemplates", "partialtemplates"})
    data["providers"] = {n: {"name": p.name, "providertype": p.providertype} for n, p in catalog.providers.items()}
    return data


def _nodes(cluster: Cluster, catalog: Catalog, layout: Layout) -> list[NodeSpec]:
    nodes: list[NodeSpec] = []
    nodenum = 1000
    for group in layout.layout:
        hw = catalog.hardwaretypes.get(group.hardwaretype)
        img = catalog.imagetypes.get(group.imagetype)
        for _ in range(group.count):
            nodes.append(
                NodeSpec(
                    id=f"n{nodenum}",
                    hardwaretype=group.hardwaretype,
                    imagetype=group.imagetype,
                    services=list(group.services),
                    hostname=f"{cluster.name}-{nodenum}.local",
                    nodenum=nodenum,
                    flavor=(hw.flavor(cluster.provider) if hw else None) or "",
                    image=(img.image(cluster.provider) if img else None) or "",
                    sshuser=(img.providermap.get(cluster.provider, {}).get("sshuser", "") if img else ""),
                )
            )
            nodenum += 1
    return nodes


def cluster_uuid(job_id: str) -> UUID:
    """Derived from the job id, so a retried create maps to the same cluster."""
    return uuid5(NAMESPACE_URL, f"muster:cluster:{job_id}")
