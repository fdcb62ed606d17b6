"""The planner's answer to a provisioner a segment came to again (contracts/steps.py): the
outcomes the log holds of the segment's steps, read with the planner's rights.

On `muster.q.<tenant>.<provisioner>.steps` (docs/decisions/0058, item 5): so no provisioner
needs a right to read another's task events.

Only the planner acting for the job answers (another keeps silent, as for a job's status); it
answers only a provisioner granted the job's queue (auth on), and only about steps that are
the job's current attempts queued as one segment: with segments off no step is, and nothing
is read for anyone.
"""

from __future__ import annotations

import structlog
from pydantic import ValidationError

from contracts import subjects
from contracts.errors import describe_validation_error
from contracts.events import JobRequested
from contracts.limits import not_strict_json
from contracts.steps import StepOutcomes, StepOutcomesQuery
from muster.stepoutcomes import step_outcomes
from services.auth.domain.buspermissions import provisioner_queues
from services.auth.domain.state import IdentityState

from .app import Planner
from .domain import saga
from .domain.job import Job

log = structlog.get_logger("muster.planner")


class StepReads:
    def __init__(self, planner: Planner, identities: IdentityState | None = None) -> None:
        self.planner, self.identities = planner, identities

    async def answer(self, tenant: str, principal: str, data: bytes) -> StepOutcomes | None:
        if (not_json := not_strict_json(data)) is not None:
            return StepOutcomes(refused=f"not a steps query: the body {not_json}")
        try:
            query = StepOutcomesQuery.model_validate_json(data)
        except ValidationError as err:  # (the first error's words alone: "Field required", naming no field)
            return StepOutcomes(refused=f"not a steps query: {describe_validation_error(err)}"[:2000])
        job = self.planner.acting_for(tenant, query.job_id)
        cluster = self.planner.clusters.get(job.cluster_id) if job is not None else None
        if job is None or cluster is None:
            return await self._earlier(tenant, principal, query)
        refused = self._refused(principal, tenant, saga.queue_class(cluster, self.planner.config.settings))
        if refused:
            log.warning("a segment's steps not read for a requester", requester=principal, job=query.job_id, reason=refused)
            return StepOutcomes(refused=refused)
        if any(s.attempt > job.attempts.get(s.task_id, 0) for s in query.steps):
            return None  # queued by a planner this one has not caught up with: not its to say
        stale = _stale(job, query)
        if stale:
            return StepOutcomes(stale=stale)
        steps = [(s.task_id, s.attempt) for s in query.steps]
        return StepOutcomes(outcomes=await step_outcomes(self.planner.log, tenant, query.job_id, steps))

    async def _earlier(self, tenant: str, principal: str, query: StepOutcomesQuery) -> StepOutcomes | None:
        """A job not loaded here: another planner's (it answers, or nobody and the provisioner
        asks again), or an earlier job of a cluster this planner acts for, which a restart or a
        takeover does not load (each cluster's current job only). One job of a cluster runs at
        a time, so that one has ended: its steps are stale, or the delivery would hear silence
        at every delivery and come back for ever. Its first event names its cluster; the job is
        read, not kept."""
        try:
            history = await self.planner.log.read(subjects.job_events(tenant, query.job_id))
        except subjects.SubjectError:
            return None
        requested = history[0].event if history else None
        if not isinstance(requested, JobRequested) or not self.planner.ownership.owns(tenant, requested.cluster_id):
            return None
        cluster = self.planner.clusters.get(requested.cluster_id)
        if cluster is None or cluster.tenant != tenant or cluster.job_id in ("", query.job_id):
            return None
        refused = self._refused(principal, tenant, saga.queue_class(cluster, self.planner.config.settings))
        if refused:
            return StepOutcomes(refused=refused)
        return StepOutcomes(stale=f"job {query.job_id} is not its cluster's current job ({cluster.job_id}): it has ended")

    def _refused(self, principal: str, tenant: str, klass: str) -> str:
        """Auth on: only a provisioner granted the queue the job's tasks go on may know them."""
        if self.identities is None:
            return ""
        who = self.identities.principals.get(principal)
        if who is None or who.disabled or who.service != "provisioner":
            return f"{principal!r} is not a provisioner"
        if (tenant, klass) not in provisioner_queues(self.identities.grants_of(principal)):
            return f"{principal} is not granted queue:{klass} of tenant {tenant}"
        return ""


def _stale(job: Job, query: StepOutcomesQuery) -> str:
    """Why the steps are not the job's current segment ("" when they are)."""
    for step in query.steps:
        latest = job.attempts[step.task_id]
        if latest != step.attempt:
            return f"{step.task_id}'s attempt {step.attempt} is not its latest ({latest})"
        if job.task_state.get(step.task_id) == "cancelled":
            # Ended unrun (its step before failed or timed out, or a cancel found it unclaimed):
            # a copy that goes on would run it late, decision 58; the lone claim of a segment
            # taken up again after its finished steps carries no step fence, so it is said here.
            return f"{step.task_id}'s attempt {step.attempt} was ended unrun"
    names = [s.task_id for s in query.steps]
    if names[0] not in job.segment_after and names[0] not in job.segment_next:
        return f"{names[0]} was not queued as a step of a segment"
    for before, step_id in zip(names, names[1:], strict=False):
        if job.segment_after.get(step_id) != before:
            return f"{step_id} was not queued after {before}"
    return ""
