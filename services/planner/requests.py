"""Operation requests (request/reply): parse, admit, record the job, answer at once.

A request arrives as a `RequestContext` (tenant, verb, body and, once identities exist, the
authenticated principal). Admission loads the facts the operation's rules need (the cluster,
its current job, the catalog), runs the hooks' checks and the rules the operations table lists,
and either refuses with a reason or records the job. A dry run makes the same decisions and
records nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import structlog
from pydantic import ValidationError

from contracts import subjects
from contracts.commands import (
    COMMAND_ADAPTER,
    VERB_OF,
    Accepted,
    ConfigureCluster,
    CreateCluster,
    DryRun,
    Rejected,
    RollbackCluster,
)
from contracts.errors import describe_validation_error
from contracts.events import LayoutRequested
from contracts.limits import MAX_REQUEST_BYTES, json_size, over_budget
from muster.bus.repository import rebuild
from muster.ports.eventlog import ConcurrencyError

from .config import Hooks, PlannerConfig
from .domain import planning, resize
from .domain.admission import Facts, Refused
from .domain.cluster import Cluster
from .domain.errors import PlanError
from .domain.job import Job, job_uuid
from .domain.operations import Operation, operation_of
from .domain.restore import restore_plan
from .domain.saga import control
from .execution import Execution
from .ports import NoLayout, Solver, SolverUnavailable
from .state import PlannerState

log = structlog.get_logger("muster.planner")
COMMAND_OF_VERB = {verb: command for command, verb in VERB_OF.items()}


@dataclass(frozen=True)
class RequestContext:
    """One request as it reached the planner."""

    tenant: str
    verb: str
    body: bytes
    principal: str | None = None
    """The authenticated caller, when the transport knows one; it becomes the events' `by`."""

    def by(self, command: Any) -> str:
        return self.principal or command.requested_by


def parse(verb: str, data: bytes) -> Any:
    try:
        body = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise Refused(f"request body is not JSON: {err}") from None
    if not isinstance(body, dict):
        raise Refused("request body must be a JSON object")
    if len(data) > MAX_REQUEST_BYTES:  # after parsing: the reason can name the field to blame
        biggest = max(body, key=lambda k: json_size(body[k]), default="")
        raise Refused(f"request {over_budget('body', len(data), MAX_REQUEST_BYTES)}"
                      + (f" (field {biggest!r} alone is {json_size(body[biggest]):,} bytes)" if biggest else ""))
    expected = COMMAND_OF_VERB.get(verb)
    if expected is None:
        raise Refused(f"unknown operation {verb!r}; known: {', '.join(sorted(VERB_OF.values()))}")
    body.setdefault("type", expected)
    if body["type"] != expected:
        raise Refused(f"operation {verb!r} takes a {expected} command, not {body['type']!r}")
    try:
        return COMMAND_ADAPTER.validate_python(body)
    except ValidationError as err:
        raise Refused(f"invalid {expected}: {describe_validation_error(err)}") from None


class Requests:
    def __init__(self, state: PlannerState, execution: Execution, solver: Solver | None, config: PlannerConfig, hooks: Hooks) -> None:
        self.state, self.execution, self.solver, self.config, self.hooks = state, execution, solver, config, hooks

    async def handle(self, ctx: RequestContext) -> Accepted | Rejected | DryRun:
        try:
            subjects.token(ctx.tenant, "tenant")
            command = parse(ctx.verb, ctx.body)
            op = operation_of(command)
            for check in self.hooks.admission:
                check(ctx, op, command)
            async with self.state.lock:
                if op.target == "job":
                    return await self._control(ctx, command)
                if op.target == "new-cluster":
                    return await self._create(ctx, op, command)
                return await self._cluster_operation(ctx, op, command)
        except (Refused, subjects.SubjectError) as err:
            return Rejected(reason=str(err))

    def _check(self, op: Operation, facts: Facts) -> None:
        for rule in op.rules:
            rule(facts)

    # -- create ------------------------------------------------------------------------------

    async def _create(self, ctx: RequestContext, op: Operation, cmd: CreateCluster) -> Accepted | DryRun:
        job_id = str(job_uuid(ctx.tenant, cmd.request_id))
        cluster_id = str(planning.cluster_uuid(job_id))
        if not self.hooks.owns(ctx.tenant, cluster_id):
            raise Refused(f"cluster {cluster_id!r} belongs to another planner")
        known = await self.state.find_job(ctx.tenant, job_id)
        if known is not None and not cmd.dry_run:
            return Accepted(job_id=job_id, cluster_id=known.cluster_id, duplicate=True)
        catalog = await self.state.catalog(ctx.tenant, refresh=True)
        facts = Facts(ctx.tenant, op.name, cmd, catalog, job_id, principal=ctx.principal)
        self._check(op, facts)
        job = self._new_job(ctx, facts, cluster_id)
        cluster = planning.new_cluster(facts, cluster_id)
        request = planning.layout_request(job_id, cluster, catalog, cmd)
        if cmd.dry_run:
            return await self._dry_run(job, cluster, request, cmd)
        # The cluster (which points to its job) first: see Planner.resume.
        try:
            await self.state.save_cluster(cluster)
        except ConcurrencyError:  # a retry after a crash between the two saves
            cluster = rebuild(Cluster, await self.state.log.read(subjects.cluster_events(ctx.tenant, cluster_id)))  # type: ignore[assignment]
        try:
            await self.state.save_job(job)
        except ConcurrencyError:
            return Accepted(job_id=job_id, cluster_id=cluster_id, duplicate=True)
        self.state.jobs[job_id], self.state.clusters[cluster_id] = job, cluster
        await self.execution.ask_for_layout(job, request)
        log.info("accepted", tenant=ctx.tenant, job=job_id, operation="create", nodes=cmd.nodes)
        return Accepted(job_id=job_id, cluster_id=cluster_id)

    def _new_job(self, ctx: RequestContext, facts: Facts, cluster_id: str) -> Job:
        return planning.new_job(facts, cluster_id, ctx.by(facts.command), self.config.instance, self.config.max_attempts)

    # -- operations on an existing cluster ---------------------------------------------------

    async def _cluster_operation(self, ctx: RequestContext, op: Operation, cmd: Any) -> Accepted | DryRun:
        tenant = ctx.tenant
        cluster = self.state.clusters.get(cmd.cluster_id)
        if cluster is None or cluster.tenant != tenant:
            raise Refused(f"unknown cluster {cmd.cluster_id!r}")
        if not self.hooks.owns(tenant, cmd.cluster_id):
            raise Refused(f"cluster {cmd.cluster_id!r} belongs to another planner")
        job_id = str(job_uuid(tenant, cmd.request_id))
        if await self.state.find_job(tenant, job_id) is not None and not cmd.dry_run:
            return Accepted(job_id=job_id, cluster_id=cmd.cluster_id, duplicate=True)
        facts = Facts(tenant, op.name, cmd, await self.state.catalog(tenant, refresh=True), job_id, cluster=cluster,
                      current=await self.state.find_job(tenant, cluster.job_id), principal=ctx.principal,
                      source=await self.state.find_job(tenant, cmd.to_job) if isinstance(cmd, RollbackCluster) else None)
        self._check(op, facts)
        job = self._new_job(ctx, facts, cmd.cluster_id)
        if isinstance(cmd, RollbackCluster):
            return await self._restore(job, cluster, facts)
        if op.layout:
            request = planning.layout_request(job_id, cluster, facts.catalog, cmd)
            if cmd.dry_run:
                return await self._dry_run(job, cluster, request, cmd)
            await self._accept(job, cluster)
            await self.execution.ask_for_layout(job, request)
        else:
            try:
                plan = planning.plan_direct(job, cluster, facts.catalog, cmd)
            except PlanError as err:
                raise Refused(f"cannot plan {job.operation}: {err}") from None
            nodes = list(cluster.nodes.values())
            if cmd.dry_run:
                return DryRun(layout=resize.layout_of(nodes), plan=plan.to_json())
            job.record_plan(planning.planned(job, cluster, plan, nodes, self.config.mode))
            await self._accept(job, cluster)
            if isinstance(cmd, ConfigureCluster):
                cluster.change_config(job_id, cmd.config)
            await self.execution.advance(job, cluster)
        log.info("accepted", tenant=tenant, job=job_id, operation=op.name)
        return Accepted(job_id=job_id, cluster_id=cmd.cluster_id)

    async def _restore(self, job: Job, cluster: Cluster, facts: Facts) -> Accepted | DryRun:
        """Back to the cluster as it was before job `to_job` (its recorded previous state)."""
        cmd: RollbackCluster = facts.command
        source = facts.source
        assert source is not None  # the `restorable` rule
        target, config = source.previous_nodes, source.previous_config
        try:
            restore = restore_plan(facts.catalog.services, list(cluster.nodes.values()), target, config != cluster.config)
        except PlanError as err:
            raise Refused(f"cannot plan the rollback: {err}") from None
        if not restore.plan.tasks:
            raise Refused(f"cluster {job.cluster_id} is already as it was before job {cmd.to_job}")
        if cmd.dry_run:
            return DryRun(layout=resize.layout_of(target), plan=restore.plan.to_json())
        job.record_plan(planning.planned(job, cluster, restore.plan, list(target), self.config.mode))
        await self._accept(job, cluster)
        cluster.change_layout(str(job.id), list(restore.interim))
        cluster.change_config(str(job.id), config)
        await self.execution.advance(job, cluster)
        log.info("accepted", tenant=job.tenant, job=str(job.id), operation="rollback", to_job=cmd.to_job)
        return Accepted(job_id=str(job.id), cluster_id=job.cluster_id)

    async def _accept(self, job: Job, cluster: Cluster) -> None:
        # The cluster's pointer to its job first: see Planner.resume.
        cluster.set_status(cluster.status, str(job.id))
        await self.state.save_cluster(cluster)
        try:
            await self.state.save_job(job)
        except ConcurrencyError:
            raise Refused(f"job {job.id} exists already") from None
        self.state.jobs[str(job.id)] = job

    # -- dry runs: the same decisions, nothing recorded ----------------------------------------

    async def _dry_run(self, job: Job, cluster: Cluster, request: LayoutRequested, cmd: Any) -> DryRun:
        if self.solver is None:
            raise Refused("dry run needs a solver and this planner has none")
        try:
            layout = await self.solver.solve(job.tenant, request)
        except SolverUnavailable as err:
            raise Refused(f"dry run needs a solver and none answered: {err}") from None
        except NoLayout as err:
            raise Refused(f"no layout: {err}") from None
        try:
            plan, _ = planning.plan_layout(job, cluster, await self.state.catalog(job.tenant), layout, cmd)
        except PlanError as err:
            raise Refused(f"cannot plan {job.operation}: {err}") from None
        return DryRun(layout=layout, plan=plan.to_json())

    # -- job control ---------------------------------------------------------------------------

    async def _control(self, ctx: RequestContext, cmd: Any) -> Accepted:
        job = await self.state.find_job(ctx.tenant, cmd.job_id)
        if job is None:
            raise Refused(f"unknown job {cmd.job_id!r}")
        if not self.hooks.owns(ctx.tenant, job.cluster_id):
            raise Refused(f"cluster {job.cluster_id!r} belongs to another planner")
        cluster = self.state.clusters[job.cluster_id]
        if cmd.request_id and cmd.request_id in job.control_requests:
            return Accepted(job_id=cmd.job_id, cluster_id=job.cluster_id, duplicate=True)
        catalog = await self.state.catalog(job.tenant)
        effects = control(job, cluster, cmd, ctx.by(cmd), catalog.services, self.config.settings, self.hooks.dispatch)
        await self.execution.execute(job, cluster, effects)
        return Accepted(job_id=cmd.job_id, cluster_id=job.cluster_id)
