"""An operation's plan before anything is recorded: previewed, shown by a dry run and saved
(`PlanSaved`), derived again when a saved plan is applied (`domain/saved.py`).

The same `preview` serves a request that is accepted (it records what the preview says), a dry
run (nothing but the plan is recorded) and `ApplyPlan` (the saved request and layout, checked by
digest). Layouts come from the solver over request/reply for dry runs; an accepted request for a
layout change asks the solver through the log instead (`Execution.ask_for_layout`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from contracts import subjects
from contracts.commands import DryRun, RollbackCluster
from contracts.events import PlanSaved
from contracts.layout import Layout, NodeSpec
from muster.ports.eventlog import Append, ConcurrencyError
from muster.readmodel import desired, lifecycle

from .domain import planning, resize
from .domain import saved as saving
from .domain.admission import Facts, Refused
from .domain.cluster import Cluster
from .domain.errors import PlanError
from .domain.job import Job
from .domain.limits import Limits
from .domain.operations import OPERATIONS
from .domain.plan import Plan
from .domain.restore import restore_plan
from .ports import NoLayout, Solver, SolverUnavailable
from .state import PlannerState


def shown_thrown_in(plan: Plan) -> list[str]:
    """A dry run's thrown-in starts, in plan order: said apart, since a walk of session 27 read
    an expand's `start hdfs-namenode` on an old node as the expand touching it."""
    return [t.id for t in plan.tasks if t.id in plan.thrown_in]


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
    stopped: list[str] | None = None
    """`rollback`: the services meant to be stopped once it succeeds (with `stopped_on`)."""
    stopped_on: dict[str, list[str]] | None = None
    batches: list[list[str]] | None = None
    """A rolling change's batches of node ids."""
    tolerance: int = 0
    notes: tuple[str, ...] = ()
    """What the request's answer and its dry run say with it (warnings): a restart, what it
    leaves stopped."""


class Previews:
    def __init__(self, state: PlannerState, solver: Solver | None, limits: Limits | None) -> None:
        self.state, self.solver, self.limits = state, solver, limits

    async def preview(self, job: Job, cluster: Cluster, facts: Facts, layout: Layout | None = None) -> Preview:
        """The plan the request makes, without recording anything (the solver is asked when the
        operation needs a layout and none is given); refused when it would move a service in a
        way its state does not allow."""
        preview = await self._preview(job, cluster, facts, layout)
        problem = lifecycle.invalid(cluster.services_state, [(t.node, t.service, t.action) for t in preview.plan.tasks])
        if problem:
            raise Refused(f"cannot plan {job.operation}: {problem}", code="conflict")
        return preview

    async def _preview(self, job: Job, cluster: Cluster, facts: Facts, layout: Layout | None = None) -> Preview:
        cmd, op = facts.command, OPERATIONS[facts.operation]
        try:
            if isinstance(cmd, RollbackCluster):
                source = facts.source
                assert source is not None  # the `restorable` rule
                target, config = source.previous_nodes, source.previous_config
                stopped, stopped_on = sorted(source.previous_stopped or []), source.previous_stopped_on
                then = desired.stopped_pairs({n.id: n.services for n in target}, stopped, stopped_on)
                restore = restore_plan(facts.catalog.services, list(cluster.nodes.values()), target, config != cluster.config,
                                       cluster.stopped_pairs(), then, config=config)
                if not restore.plan.tasks:
                    raise Refused(f"cluster {job.cluster_id} is already as it was before job {cmd.to_job}")
                return Preview(restore.plan, list(target), interim=list(restore.interim), config=config, stopped=stopped,
                               stopped_on=dict(stopped_on))
            if op.layout:
                layout = layout or await self._solve(job, cluster, facts)
                plan, target = planning.plan_layout(job, cluster, facts.catalog, layout, cmd)
                return Preview(plan, target, layout)
            direct, notes = planning.plan_direct(job, cluster, facts.catalog, cmd)
            plan, batches, tolerance = planning.rolled(direct, cmd, cluster, facts.catalog)
            if op.observes:  # a check looks at every node, whichever fails to answer
                if not cluster.nodes:  # (it said none of its services defines a `status` action)
                    raise Refused(f"nothing to check on cluster {cluster.name!r}: it has no nodes (cluster {cluster.status})")
                if not plan.tasks:
                    raise Refused(f"nothing to check on cluster {cluster.name!r}: none of its services defines a `status` action")
                tolerance = len(cluster.nodes)
            return Preview(plan, list(cluster.nodes.values()), batches=batches, tolerance=tolerance, notes=tuple(notes))
        except PlanError as err:
            raise Refused(f"cannot plan {job.operation}: {err}", code="invalid", field=err.field) from None

    async def _solve(self, job: Job, cluster: Cluster, facts: Facts) -> Layout:
        if self.solver is None:
            raise Refused("dry run needs a solver and this planner has none", code="unavailable")
        request = planning.layout_request(str(job.id), cluster, facts.catalog, facts.command)
        try:
            return await self.solver.solve(job.tenant, request)
        except SolverUnavailable as err:
            raise Refused(f"dry run needs a solver and none answered: {err}", code="unavailable") from None
        except NoLayout as err:
            raise Refused(f"no layout: {err}", code="invalid", field=planning.command_field(facts.command, err.fields)) from None

    async def dry_run(self, by: str, job: Job, existing: Cluster | None, cluster: Cluster, facts: Facts,
                      notes: Callable[[Cluster, Preview], Awaitable[dict[str, Any]]] | None = None,
                      warnings: list[str] | None = None) -> DryRun:
        """The plan, shown and saved (`PlanSaved`): nothing else is recorded. `notes`: its cost
        and what governance would say (docs/governance.md); `warnings`: what the request would be
        accepted with a note of."""
        preview = await self.preview(job, cluster, facts)
        version = existing.version if existing is not None else 0
        catalog = saving.catalog_version(facts.catalog)
        event = saving.save(tenant=job.tenant, job_id=str(job.id), cluster_id=str(cluster.id), operation=job.operation,
                           command=facts.command, layout=preview.layout, cluster_version=version, catalog=catalog,
                           digest=saving.plan_digest(job.operation, preview.plan, preview.target),
                           tasks=len(preview.plan.tasks), by=by)
        try:
            await self.state.log.append(subjects.plan_events(job.tenant, event.plan_id), [Append(event, msg_id=f"plan:{event.plan_id}")], expect_last_seq=0)
        except ConcurrencyError:
            pass  # the same dry run again: saved already
        layout = preview.layout if preview.layout is not None else resize.layout_of(preview.target)
        plan = {**preview.plan.to_json(), "thrown_in": shown_thrown_in(preview.plan)}
        if preview.batches:
            plan["rolling"] = {"batches": preview.batches, "tolerance": preview.tolerance}
        if self.limits is not None:  # what will hold its tasks back (docs/planner.md, "Concurrency limits")
            shown = self.limits.shown(job.tenant, cluster.provider, [t.action for t in preview.plan.tasks])
            if shown:
                plan["limits"] = shown
        return DryRun(layout=layout, plan=plan, plan_id=event.plan_id,
                      cluster_version=version if existing is not None else None, catalog_version=catalog,
                      warnings=[*(warnings or ()), *preview.notes], **(await notes(cluster, preview) if notes is not None else {}))

    async def saved(self, tenant: str, plan_id: str) -> PlanSaved:
        found = await self.state.log.read(subjects.plan_events(tenant, plan_id))
        if not found or not isinstance(found[0].event, PlanSaved):
            raise Refused(f"unknown plan {plan_id!r}: dry runs save plans (`--dry-run` prints the plan id)",
                          code="not_found", field="plan_id")
        return found[0].event

    async def pinned(self, pin: PlanSaved, job: Job, existing: Cluster | None, cluster: Cluster, facts: Facts) -> Preview:
        """The saved plan derived again on the same state, or a refusal saying what moved."""
        saving.check_unchanged(pin, existing, saving.catalog_version(facts.catalog))
        preview = await self.preview(job, cluster, facts, layout=pin.layout)
        saving.check_digest(pin, saving.plan_digest(job.operation, preview.plan, preview.target))
        return preview
