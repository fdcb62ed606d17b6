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
    ApplyPlan,
    ConfigureCluster,
    CreateCluster,
    DryRun,
    ExtendLease,
    LeaseExtended,
    Rejected,
    RollbackCluster,
)
from contracts.errors import describe_validation_error
from contracts.events import PlanSaved
from contracts.layout import Layout, NodeSpec
from contracts.limits import MAX_REQUEST_BYTES, json_size, over_budget
from muster.bus.repository import rebuild
from muster.ports.eventlog import Append, ConcurrencyError

from . import leases
from .config import Hooks, PlannerConfig
from .domain import leases as lease_terms
from .domain import planning, resize, saved
from .domain.admission import Facts, Refused, template_of
from .domain.cluster import Cluster
from .domain.errors import PlanError
from .domain.job import Job, job_uuid
from .domain.operations import OPERATIONS, Operation, operation_of
from .domain.plan import Plan
from .domain.restore import restore_plan
from .domain.saga import control
from .execution import Execution
from .ports import NoLayout, Solver, SolverUnavailable
from .state import PlannerState

log = structlog.get_logger("muster.planner")
COMMAND_OF_VERB = {verb: command for command, verb in VERB_OF.items()}


@dataclass(frozen=True)
class Preview:
    """An operation's plan before anything is recorded: what a dry run shows and saves, and
    what an accepted request (or an applied saved plan) records."""

    plan: Plan
    target: list[NodeSpec]
    """The cluster's nodes once the job succeeds."""
    layout: Layout | None = None
    interim: list[NodeSpec] | None = None
    """`rollback`: the layout recorded while it runs (`restore.interim`)."""
    config: dict[str, Any] | None = None
    """`rollback`: the config it puts back."""
    batches: list[list[str]] | None = None
    """A rolling change's batches of node ids."""
    tolerance: int = 0


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

    async def handle(self, ctx: RequestContext, *, system: bool = False) -> Accepted | Rejected | DryRun | LeaseExtended:
        """`system`: asked by the planner itself (a lease's expiry); the hooks' checks (who may
        ask) are skipped, the operation's own rules are not."""
        try:
            subjects.token(ctx.tenant, "tenant")
            command = parse(ctx.verb, ctx.body)
            pin = None
            if isinstance(command, ApplyPlan):
                pin = await self._saved(ctx.tenant, command.plan_id)
                # The saved request, asked for by whoever applies it.
                command = COMMAND_ADAPTER.validate_python({**pin.command, "requested_by": command.requested_by})
            op = operation_of(command)
            for check in () if system else self.hooks.admission:
                check(ctx, op, command)
            async with self.state.lock:
                if op.target == "job":
                    return await self._control(ctx, command)
                if op.target == "lease":
                    return await self._extend_lease(ctx, op, command)
                if op.target == "new-cluster":
                    return await self._create(ctx, op, command, pin)
                return await self._cluster_operation(ctx, op, command, pin)
        except (Refused, subjects.SubjectError) as err:
            return Rejected(reason=str(err))

    def _check(self, op: Operation, facts: Facts) -> None:
        for rule in op.rules:
            rule(facts)

    def _job_id(self, tenant: str, cmd: Any, pin: PlanSaved | None) -> str:
        return pin.job_id if pin is not None else str(job_uuid(tenant, cmd.request_id))

    # -- create ------------------------------------------------------------------------------

    async def _create(self, ctx: RequestContext, op: Operation, cmd: CreateCluster, pin: PlanSaved | None) -> Accepted | DryRun:
        job_id = self._job_id(ctx.tenant, cmd, pin)
        cluster_id = str(planning.cluster_uuid(job_id))
        if not self.hooks.owns(ctx.tenant, cluster_id):
            raise Refused(f"cluster {cluster_id!r} belongs to another planner")
        known = await self.state.find_job(ctx.tenant, job_id)
        if known is not None and not cmd.dry_run:
            return Accepted(job_id=job_id, cluster_id=known.cluster_id, duplicate=True)
        catalog = await self.state.catalog(ctx.tenant, refresh=True)
        facts = Facts(ctx.tenant, op.name, cmd, catalog, job_id, principal=ctx.principal)
        self._check(op, facts)
        job = self._new_job(ctx, facts, cluster_id, pin)
        cluster = planning.new_cluster(facts, cluster_id, ctx.by(cmd))
        self._start_lease(cluster, facts, ctx.by(cmd))
        if cmd.dry_run:
            return await self._dry_run(ctx, job, None, cluster, facts)
        preview = await self._pinned(pin, job, None, cluster, facts) if pin is not None else None
        if preview is not None:
            self._plan(job, cluster, preview)
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
        leases.arm(self.execution.timers, self.hooks.owns, cluster)
        if preview is not None:
            await self._start(job, cluster, facts, preview)
        else:
            await self.execution.ask_for_layout(job, planning.layout_request(job_id, cluster, catalog, cmd))
        log.info("accepted", tenant=ctx.tenant, job=job_id, operation="create", nodes=cmd.nodes, plan=pin and pin.plan_id)
        return Accepted(job_id=job_id, cluster_id=cluster_id)

    def _new_job(self, ctx: RequestContext, facts: Facts, cluster_id: str, pin: PlanSaved | None = None) -> Job:
        return planning.new_job(facts, cluster_id, ctx.by(facts.command), self.config.instance, self.config.max_attempts,
                                plan_id=pin.plan_id if pin is not None else None)

    # -- operations on an existing cluster ---------------------------------------------------

    async def _cluster_operation(self, ctx: RequestContext, op: Operation, cmd: Any, pin: PlanSaved | None) -> Accepted | DryRun:
        tenant = ctx.tenant
        cluster = self.state.clusters.get(cmd.cluster_id)
        if cluster is None or cluster.tenant != tenant:
            raise Refused(f"unknown cluster {cmd.cluster_id!r}")
        if not self.hooks.owns(tenant, cmd.cluster_id):
            raise Refused(f"cluster {cmd.cluster_id!r} belongs to another planner")
        job_id = self._job_id(tenant, cmd, pin)
        if await self.state.find_job(tenant, job_id) is not None and not cmd.dry_run:
            return Accepted(job_id=job_id, cluster_id=cmd.cluster_id, duplicate=True)
        facts = Facts(tenant, op.name, cmd, await self.state.catalog(tenant, refresh=True), job_id, cluster=cluster,
                      current=await self.state.find_job(tenant, cluster.job_id), principal=ctx.principal,
                      source=await self.state.find_job(tenant, cmd.to_job) if isinstance(cmd, RollbackCluster) else None)
        if pin is not None:  # before the rules: "it changed" says more than what the change broke
            saved.check_unchanged(pin, cluster, saved.catalog_version(facts.catalog))
        self._check(op, facts)
        job = self._new_job(ctx, facts, cmd.cluster_id, pin)
        if cmd.dry_run:
            return await self._dry_run(ctx, job, cluster, cluster, facts)
        if pin is not None:
            preview = await self._pinned(pin, job, cluster, cluster, facts)
        elif op.layout:  # the solver answers through the log (Execution.on_layout)
            await self._accept(job, cluster)
            await self.execution.ask_for_layout(job, planning.layout_request(job_id, cluster, facts.catalog, cmd))
            log.info("accepted", tenant=tenant, job=job_id, operation=op.name)
            return Accepted(job_id=job_id, cluster_id=cmd.cluster_id)
        else:
            preview = await self._preview(job, cluster, facts)
        # The plan is recorded with the job: a job recorded without its plan would wait forever.
        self._plan(job, cluster, preview)
        await self._accept(job, cluster)
        await self._start(job, cluster, facts, preview)
        log.info("accepted", tenant=tenant, job=job_id, operation=op.name, plan=pin and pin.plan_id)
        return Accepted(job_id=job_id, cluster_id=cmd.cluster_id)

    async def _accept(self, job: Job, cluster: Cluster) -> None:
        # The cluster's pointer to its job first: see Planner.resume.
        cluster.set_status(cluster.status, str(job.id))
        await self.state.save_cluster(cluster)
        try:
            await self.state.save_job(job)
        except ConcurrencyError:
            raise Refused(f"job {job.id} exists already") from None
        self.state.jobs[str(job.id)] = job

    # -- plans: previewed, shown (and saved), recorded ------------------------------------------

    async def _preview(self, job: Job, cluster: Cluster, facts: Facts, layout: Layout | None = None) -> Preview:
        """The plan the request makes, without recording anything (the solver is asked when the
        operation needs a layout and none is given)."""
        cmd, op = facts.command, OPERATIONS[facts.operation]
        try:
            if isinstance(cmd, RollbackCluster):
                source = facts.source
                assert source is not None  # the `restorable` rule
                target, config = source.previous_nodes, source.previous_config
                restore = restore_plan(facts.catalog.services, list(cluster.nodes.values()), target, config != cluster.config)
                if not restore.plan.tasks:
                    raise Refused(f"cluster {job.cluster_id} is already as it was before job {cmd.to_job}")
                return Preview(restore.plan, list(target), interim=list(restore.interim), config=config)
            if op.layout:
                layout = layout or await self._solve(job, cluster, facts)
                plan, target = planning.plan_layout(job, cluster, facts.catalog, layout, cmd)
                return Preview(plan, target, layout)
            plan, batches, tolerance = planning.rolled(planning.plan_direct(job, cluster, facts.catalog, cmd), cmd)
            return Preview(plan, list(cluster.nodes.values()), batches=batches, tolerance=tolerance)
        except PlanError as err:
            raise Refused(f"cannot plan {job.operation}: {err}") from None

    async def _solve(self, job: Job, cluster: Cluster, facts: Facts) -> Layout:
        if self.solver is None:
            raise Refused("dry run needs a solver and this planner has none")
        request = planning.layout_request(str(job.id), cluster, facts.catalog, facts.command)
        try:
            return await self.solver.solve(job.tenant, request)
        except SolverUnavailable as err:
            raise Refused(f"dry run needs a solver and none answered: {err}") from None
        except NoLayout as err:
            raise Refused(f"no layout: {err}") from None

    async def _dry_run(self, ctx: RequestContext, job: Job, existing: Cluster | None, cluster: Cluster, facts: Facts) -> DryRun:
        """The plan, shown and saved (`PlanSaved`): nothing else is recorded."""
        preview = await self._preview(job, cluster, facts)
        version = existing.version if existing is not None else 0
        catalog = saved.catalog_version(facts.catalog)
        event = saved.save(tenant=job.tenant, job_id=str(job.id), cluster_id=str(cluster.id), operation=job.operation,
                           command=facts.command, layout=preview.layout, cluster_version=version, catalog=catalog,
                           digest=saved.plan_digest(job.operation, preview.plan, preview.target),
                           tasks=len(preview.plan.tasks), by=ctx.by(facts.command))
        try:
            await self.state.log.append(subjects.plan_events(job.tenant, event.plan_id), [Append(event, msg_id=f"plan:{event.plan_id}")], expect_last_seq=0)
        except ConcurrencyError:
            pass  # the same dry run again: saved already
        layout = preview.layout if preview.layout is not None else resize.layout_of(preview.target)
        plan = preview.plan.to_json()
        if preview.batches:
            plan["rolling"] = {"batches": preview.batches, "tolerance": preview.tolerance}
        if self.execution.limits is not None:  # what will hold its tasks back (docs/planner.md, "Limits")
            shown = self.execution.limits.shown(job.tenant, cluster.provider, [t.action.value for t in preview.plan.tasks])
            if shown:
                plan["limits"] = shown
        return DryRun(layout=layout, plan=plan, plan_id=event.plan_id,
                      cluster_version=version if existing is not None else None, catalog_version=catalog)

    async def _saved(self, tenant: str, plan_id: str) -> PlanSaved:
        found = await self.state.log.read(subjects.plan_events(tenant, plan_id))
        if not found or not isinstance(found[0].event, PlanSaved):
            raise Refused(f"unknown plan {plan_id!r}: dry runs save plans (`--dry-run` prints the plan id)")
        return found[0].event

    async def _pinned(self, pin: PlanSaved, job: Job, existing: Cluster | None, cluster: Cluster, facts: Facts) -> Preview:
        """The saved plan derived again on the same state, or a refusal saying what moved."""
        saved.check_unchanged(pin, existing, saved.catalog_version(facts.catalog))
        preview = await self._preview(job, cluster, facts, layout=pin.layout)
        saved.check_digest(pin, saved.plan_digest(job.operation, preview.plan, preview.target))
        return preview

    def _plan(self, job: Job, cluster: Cluster, preview: Preview) -> None:
        job.record_plan(planning.planned(job, cluster, preview.plan, preview.target, self.config.mode,
                                         preview.batches, preview.tolerance))

    async def _start(self, job: Job, cluster: Cluster, facts: Facts, preview: Preview) -> None:
        """What an accepted job's plan changes on the cluster at once; then dispatch."""
        op, cmd = OPERATIONS[facts.operation], facts.command
        if preview.interim is not None:
            cluster.change_layout(str(job.id), preview.interim)
            cluster.change_config(str(job.id), preview.config or {})
        elif op.layout and not op.shrinking:
            cluster.change_layout(str(job.id), preview.target)
        if isinstance(cmd, ConfigureCluster):
            cluster.change_config(str(job.id), cmd.config)
        await self.execution.advance(job, cluster)

    # -- leases --------------------------------------------------------------------------------

    def _start_lease(self, cluster: Cluster, facts: Facts, by: str) -> None:
        try:
            terms = lease_terms.terms_of(template_of(facts).administration)
        except ValueError as err:
            raise Refused(f"template {facts.command.template!r}: {err}") from None
        lease = lease_terms.initial(terms, facts.command.lease_s, self.execution.timers.clock.now())
        cluster.change_lease(lease.expires_at, lease.max_at, lease.step_s, by)

    async def _extend_lease(self, ctx: RequestContext, op: Operation, cmd: ExtendLease) -> LeaseExtended:
        cluster = self.state.clusters.get(cmd.cluster_id)
        if cluster is None or cluster.tenant != ctx.tenant:
            raise Refused(f"unknown cluster {cmd.cluster_id!r}")
        if not self.hooks.owns(ctx.tenant, cmd.cluster_id):
            raise Refused(f"cluster {cmd.cluster_id!r} belongs to another planner")
        if cmd.request_id and cmd.request_id in cluster.lease_requests and cluster.expires_at is not None:
            return LeaseExtended(cluster_id=cmd.cluster_id, expires_at=cluster.expires_at, version=cluster.version)  # a retry
        facts = Facts(ctx.tenant, op.name, cmd, await self.state.catalog(ctx.tenant), "", cluster=cluster, principal=ctx.principal)
        self._check(op, facts)
        current = lease_terms.Lease(cluster.expires_at, cluster.lease_max_at, cluster.lease_step_s)
        until = lease_terms.extended(current, self.execution.timers.clock.now(), by_s=cmd.by_s, until=cmd.until)
        cluster.change_lease(until, cluster.lease_max_at, cluster.lease_step_s, ctx.by(cmd), cmd.request_id)
        try:
            await self.state.save_cluster(cluster)
        except ConcurrencyError:
            await self.state.reload_cluster(ctx.tenant, cmd.cluster_id)
            raise Refused(f"cluster {cmd.cluster_id!r} changed meanwhile: ask again") from None
        leases.arm(self.execution.timers, self.hooks.owns, cluster)
        log.info("lease extended", tenant=ctx.tenant, cluster=cmd.cluster_id, until=until.isoformat(), by=ctx.by(cmd))
        return LeaseExtended(cluster_id=cmd.cluster_id, expires_at=until, version=cluster.version)

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
