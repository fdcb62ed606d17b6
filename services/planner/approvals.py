"""A job that waits for approval: approved, rejected, or expired (docs/governance.md).

`muster job approve|reject JOB` reaches the planner that owns the job's cluster as any job
control does; the requester's `approve` permission on the job was checked before
(`authz.py`), and `Governance.decision` adds what only governance knows (no self-approval
unless every matching rule allows it, not after the expiry, once). An approval runs the recorded
plan, derived again from the recorded layout: same digest and same cluster version, or the job
fails with the reason (refused, never planned again); then the tenant's policies as they are at
the approval judge it again (decision 42): a denial now fails the job, recorded as denied; an
approval's dry run answers that judgement and decides nothing. A rejection or an expiry ends the
job; nothing ran, and a new cluster it would have made is marked deleted, its name free again.
Each approval's expiry is a timer (kind `approval`, `routing.TIMERS`), armed when the job starts
waiting and again at every resume.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

import structlog

from contracts.commands import COMMAND_ADAPTER, Accepted, ApproveJob, DryRun, Rejected, RejectJob
from contracts.layout import Layout
from muster.ports.clock import Clock
from muster.times import shown_time

from .domain import saved as saving
from .domain.admission import Facts, Refused
from .domain.cluster import Cluster
from .domain.job import Job
from .domain.operations import operation_of
from .domain.saga import Effects
from .execution import Execution
from .governance import Governance, Judgement, digest_of
from .previews import Previews, shown_thrown_in
from .state import PlannerState

log = structlog.get_logger("muster.planner")
Start = Callable[[Job, Cluster, Facts, Any], Awaitable[None]]


class Approvals:
    def __init__(self, state: PlannerState, execution: Execution, previews: Previews, governance: Governance, start: Start) -> None:
        self.state, self.execution, self.previews, self.governance = state, execution, previews, governance
        self.start = start

    @property
    def clock(self) -> Clock:
        return self.execution.timers.clock

    def arm(self, job: Job) -> None:
        if job.awaiting_approval and job.approval is not None:
            self.execution.timers.arm(("approval", str(job.id)), datetime.fromisoformat(job.approval["expires_at"]))

    async def decide(self, by: str, job: Job, cluster: Cluster, cmd: ApproveJob | RejectJob) -> Accepted | Rejected | DryRun:
        if cmd.request_id and cmd.request_id in job.control_requests:  # a retry of a decision taken
            return Accepted(job_id=cmd.job_id, cluster_id=job.cluster_id, duplicate=True)
        why = self.governance.decision(job, cmd, by)
        if why:
            raise Refused(why, code="forbidden" if "may not approve" in why else "conflict")
        if isinstance(cmd, RejectJob):
            job.decide(False, by, cmd.comment, cmd.request_id)
            await self._end(job, cluster, f"rejected by {by}" + (f": {cmd.comment}" if cmd.comment else ""))
            return Accepted(job_id=cmd.job_id, cluster_id=job.cluster_id)
        if cmd.dry_run:
            return await self.foresee(job, cluster, by)
        self.execution.timers.disarm(("approval", str(job.id)))
        facts, preview, problem = await self._again(job, cluster, by)
        if problem:
            job.decide(True, by, cmd.comment, cmd.request_id)
            await self._end(job, cluster, problem)
            return Rejected(reason=f"approved, but {problem}", code="conflict")
        try:
            judgement = await self._judged(job, facts, cluster, preview)
        except BaseException:
            self.arm(job)  # nothing decided (sent again, or the board away): its expiry stands
            raise
        job.decide(True, by, cmd.comment, cmd.request_id, cost=judgement.cost)
        if judgement.verdict.denied:
            reason, answer = await self.governance.deny_approval(job, by, judgement)
            await self._end(job, cluster, reason)
            return Rejected(reason=answer, code="forbidden")  # as a request the policies deny at admission
        news = self.governance.news(job, judgement, by)
        await self.start(job, cluster, facts, preview)
        log.info("job approved", tenant=job.tenant, job=str(job.id), by=by)
        return Accepted(job_id=cmd.job_id, cluster_id=job.cluster_id, warnings=news)

    async def _judged(self, job: Job, facts: Facts, cluster: Cluster, preview: Any) -> Judgement:
        """The policies as they are now (decision 42): the approver decides now, on the tenant as
        it is now. Of a tenant whose policies read its totals, fenced as an admission is
        (decision 44, "An approval is fenced too"): its shard's entry written again, with the
        job's hold, only if no other planner wrote the tenant's spend since the judgement read
        it; else judged again on what that planner wrote."""
        rules = await self.governance.load(job.tenant)
        shared = self.governance.shared
        if shared is None or not rules.spends:
            return await self.governance.again(job, facts, cluster, preview, rules)

        async def judge() -> Judgement:
            return await self.governance.again(job, facts, cluster, preview, rules)

        async def confirm(judgement: Judgement) -> int | None:
            return None if judgement.verdict.denied else await shared.confirm(job, judgement.seen)

        return await shared.fenced(job.tenant, judge, confirm)

    async def _again(self, job: Job, cluster: Cluster, by: str) -> tuple[Facts, Any, str]:
        """The recorded plan derived again, and why it cannot run as approved ('' = it can)."""
        command = COMMAND_ADAPTER.validate_python(job.request)
        op = operation_of(command)
        catalog = await self.state.catalog_of(job)  # the catalog the approved plan was made with
        facts = Facts(job.tenant, op.name, command, catalog, str(job.id), cluster=cluster if op.target != "new-cluster" else None,
                      principal=by, source=await self.state.find_job(job.tenant, getattr(command, "to_job", "") or "-"))
        recorded = (job.approval or {}).get("layout")
        try:
            preview = await self.previews.preview(job, cluster, facts, layout=Layout.model_validate(recorded) if recorded else None)
            return facts, preview, self.governance.unchanged(job, cluster, digest_of(job, preview))
        except Refused as err:
            return facts, None, f"the plan cannot be made again as it was approved: {err}"

    async def foresee(self, job: Job, cluster: Cluster, by: str) -> DryRun:
        """What an approval now would find, deciding and recording nothing: the approver looks
        before deciding (a cost at other prices, a policy that denies now; decision 42)."""
        facts, preview, problem = await self._again(job, cluster, by)
        if problem:
            raise Refused(f"approved now, it would be refused: {problem}", code="conflict")
        judgement = await self.governance.again(job, facts, cluster, preview)
        plan = {**preview.plan.to_json(), "thrown_in": shown_thrown_in(preview.plan)}
        if preview.batches:
            plan["rolling"] = {"batches": preview.batches, "tolerance": preview.tolerance}
        return DryRun(layout=preview.layout, plan=plan, cluster_version=cluster.version if facts.cluster is not None else None,
                      catalog_version=saving.catalog_version(facts.catalog),  # the catalog the approved plan was made with
                      warnings=self.governance.changes(job, judgement, by),
                      # the plan's cost, the totals and the policies' words as the approver may read
                      # them, as `muster status` shows it a waiting job's cost
                      **self.governance.shown(replace(judgement, wait=None), facts, by, facts.cluster, cluster, preview))

    async def _end(self, job: Job, cluster: Cluster, reason: str) -> None:
        self.execution.timers.disarm(("approval", str(job.id)))
        job.fail(reason)
        if job.operation == "create":  # nothing was built: the name is free again
            cluster.set_status("deleted", str(job.id), reason)
        else:
            cluster.set_status(cluster.status, str(job.id), reason)
        await self.execution.execute(job, cluster, Effects())
        log.info("job ended before it ran", tenant=job.tenant, job=str(job.id), reason=reason[:200])

    async def expire(self, job: Job, cluster: Cluster) -> None:
        """An approval's timer fell due (`Planner.approval_expired`: under the planner's lock,
        for a job of a cluster it acts for)."""
        if not job.awaiting_approval:
            return
        expires = (job.approval or {})["expires_at"]
        if self.clock.now() < datetime.fromisoformat(expires):
            self.arm(job)  # moved (a restart armed it early): not yet
            return
        job.expire_approval()
        await self._end(job, cluster, f"nobody approved the job before {shown_time(expires)}")
