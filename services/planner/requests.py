"""Operation requests (request/reply): parse, admit, record the job, answer at once.

A request arrives as a `RequestContext` (tenant, verb, body and, once identities exist, the
authenticated principal). Admission loads the facts the operation's rules need (the cluster,
its current job, the catalog), runs the admission checks and the rules the operations table lists,
and either refuses with a reason or records the job. A dry run makes the same decisions and
records only its plan (`previews.py`); `ApplyPlan` runs a saved one; `ExtendLease` records a
cluster's new lease and starts no job (`leases.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import structlog
from pydantic import ValidationError

from contracts import subjects
from contracts.commands import (
    COMMAND_ADAPTER,
    VERB_OF,
    Accepted,
    ApplyPlan,
    ApproveJob,
    CancelJob,
    ConfigureCluster,
    CreateCluster,
    DryRun,
    ExpandCluster,
    ExtendLease,
    JobCommand,
    LeaseExtended,
    Rejected,
    RejectedProblem,
    RejectJob,
    RetryJob,
    RollbackCluster,
)
from contracts.events import ClusterNameClaimed, PlanSaved
from contracts.records import Append
from muster import tracing
from muster.bus.consume import transient
from muster.bus.repository import rebuild
from muster.ports.eventlog import ConcurrencyError, StoreError
from muster.scaling import unserved_warning
from services.governance.sandbox import PolicySandbox

from . import cancels, leases
from .approvals import Approvals
from .config import PlannerConfig
from .domain import admission, planning, saved
from .domain.admission import Facts, Refused, config_notes, size_notes
from .domain.cluster import Cluster
from .domain.job import Job, job_uuid
from .domain.operations import OPERATIONS, Operation, operation_of
from .domain.saga import DispatchPolicy, control, queue_class
from .execution import Execution
from .governance import Governance, Judgement, Rules, digest_of
from .messages import OperationAnswer, RequestContext, parse
from .ports import AdmissionCheck, CallbackCheck, Ownership, Pools, Solver, Workers
from .previews import Preview, Previews
from .spend import Contested, SharedSpend
from .state import PlannerState


class Moved(Refused):
    """The cluster's shard left this planner while the request waited for it (its lease lapsed
    or was handed over): not the requester's doing, so the answer says to send it again
    (`Rejected.retry`), and the new owner acts on it."""

    def __init__(self, cluster_id: str) -> None:
        super().__init__(f"cluster {cluster_id!r} moved to another planner just now; send the request again")


log = structlog.get_logger("muster.planner")


CONTROL_EVENT = {"PauseJob": "JobPaused", "ResumeJob": "JobResumed", "CancelJob": "JobCancelRequested", "RetryJob": "JobRetried"}
EVENT_CONTROL = {e: c for c, e in CONTROL_EVENT.items()}


def _noted(answer: Accepted | DryRun, notes: list[str]) -> Accepted | DryRun:
    if notes and isinstance(answer, Accepted) and not answer.duplicate:
        return answer.model_copy(update={"warnings": [*notes, *answer.warnings]})
    return answer


def same_request(known: Job, cmd: Any, by: str) -> None:
    """A request whose idempotency key made `known` is a retry only if it is the same request;
    another one under the same key is refused, naming the first job (as payment APIs do), never
    answered with a job it did not ask for. Each as sent by its principal (`by`): the log keeps
    that as the request's `requested_by` (an older log the client's claim: its job's requester).
    Another principal's request under the key learns only that it is taken (docs/security.md)."""
    again = {**cmd.model_dump(mode="json"), "requested_by": by}
    try:  # the first one as today's contracts read it (defaults added since then included)
        first = COMMAND_ADAPTER.validate_python(known.request).model_dump(mode="json")
    except ValidationError:
        first = dict(known.request)
    first["requested_by"] = known.requested_by or first.get("requested_by")
    if first["requested_by"] != by:
        # A request_id is the tenant's (it derives the job's id, and a create's cluster's), so
        # another principal's key may meet this one: told it is taken, and nothing of the
        # request that took it (its job, cluster, operation: what `by` may not read).
        raise Refused(f"request_id {cmd.request_id!r} was used already in tenant {known.tenant} by another "
                      "principal's request: use a new request_id (the CLI makes a random one when none is given)",
                      code="conflict", field="request_id")
    if first != again:
        raise Refused(f"request_id {cmd.request_id!r} was used already, for job {known.id} ({known.operation} of "
                      f"cluster {known.cluster_id}), with a different request ({_difference(first, again)}): "
                      "send that same request again to get that job, or use a new request_id",
                      code="conflict", field="request_id", job_id=str(known.id))


def _difference(first: dict[str, Any], again: dict[str, Any]) -> str:
    """What the requester changed, in its own terms: another operation is named as such (its
    fields and the defaults its contract adds would only list the bus's inner names)."""
    if first.get("type") != again.get("type"):
        verb = VERB_OF.get(str(again.get("type")), str(again.get("type")))
        return f"this one is {'an' if verb[:1] in 'aeiou' else 'a'} {verb}"
    return "it differs in " + ", ".join(sorted(k for k in set(first) | set(again) if first.get(k) != again.get(k)))


class Requests:
    def __init__(self, state: PlannerState, execution: Execution, config: PlannerConfig, *, ownership: Ownership,
                 admission: Sequence[AdmissionCheck], dispatch: DispatchPolicy, pools: Pools | None,
                 solver: Solver | None, workers: Workers | None = None, role_of: Callable[[str], str] | None = None,
                 callbacks: CallbackCheck | None = None, spend: SharedSpend | None = None,
                 catalog_reader: Callable[[str | None, str], Callable[[str], bool]] | None = None,
                 totals_reader: Callable[[str | None, str], bool] | None = None) -> None:
        self.state, self.execution, self.solver, self.config = state, execution, solver, config
        self.callbacks = callbacks
        self.catalog_reader = catalog_reader or (lambda principal, tenant: lambda entity: True)
        self.totals_reader = totals_reader or (lambda principal, tenant: True)
        self.ownership, self.admission, self.dispatch, self.pools = ownership, tuple(admission), dispatch, pools
        self.workers = workers
        self.previews = Previews(state, solver, execution.limits)
        self.governance = Governance(state, execution.timers.clock, role_of, PolicySandbox(config.policy_deadline_s), spend,
                                     self.catalog_reader, self.totals_reader)
        self.approvals = Approvals(state, execution, self.previews, self.governance, self._start)

    async def handle(self, ctx: RequestContext, *, system: bool = False) -> OperationAnswer:
        """`system`: asked by the planner itself (a lease's expiry); the admission checks (who
        may ask) are skipped, the operation's own rules are not. Whether this planner acts for
        the request's cluster is checked here, once, before the operation's handler runs."""
        try:
            subjects.token(ctx.tenant, "tenant")
            command = parse(ctx.verb, ctx.body)
            pin = None
            if isinstance(command, ApplyPlan):
                pin = await self.previews.saved(ctx.tenant, command.plan_id)
                # The saved request, asked for by whoever applies it.
                command = COMMAND_ADAPTER.validate_python({**pin.command, "requested_by": command.requested_by})
            if ctx.principal and command.requested_by != ctx.principal:
                # The body's `requested_by` is whatever the client wrote (the CLI: the OS user);
                # with a known caller the job's request and a policy's `input.request` name the caller.
                command = command.model_copy(update={"requested_by": ctx.principal})
            op = operation_of(command)
            for check in () if system else self.admission:
                try:
                    check(ctx, op, command)
                except Refused as refused:
                    await self._no_such_job(ctx, command, refused)
                    raise
            notes = await self._callback_allowed(ctx.tenant, command)
            async with self.state.lock:
                # A new cluster's ids come from the request (its idempotency key, or random): once.
                new = self._new_ids(ctx.tenant, command, pin) if op.target == "new-cluster" else ("", "")
                cluster_id = new[1] or await self._cluster_of(ctx, command)
                if not self.ownership.owns(ctx.tenant, cluster_id):
                    # Forwarded here as its owner, the shard moved while the request waited for
                    # the lock: not the requester's doing, so it is told to send it again.
                    raise Moved(cluster_id)
                await self.state.fresh_cluster(ctx.tenant, cluster_id)  # (a failed save may have left it stale)
                if op.target == "job":
                    return await self._control(ctx, command)
                if op.target == "lease":
                    return await self._extend_lease(ctx, op, command)
                try:
                    if op.target == "new-cluster":
                        return _noted(await self._create(ctx, op, command, pin, *new), notes)
                    return _noted(await self._cluster_operation(ctx, op, command, pin), notes)
                finally:  # what its reservation held is the job's now, if it was recorded
                    if self.governance.shared is not None:
                        self.governance.shared.release(cluster_id)
        except (Moved, Contested) as err:
            return Rejected(reason=str(err), retry=True, code="unavailable")
        except Refused as err:
            return Rejected(reason=str(err), code=err.code, field=err.field, job_id=err.job_id,  # type: ignore[arg-type]
                            problems=[RejectedProblem(field=f, reason=r) for f, r in err.problems])
        except subjects.SubjectError as err:
            return Rejected(reason=str(err), code="invalid")
        except Exception as err:
            # The log did not answer in time, or refused for a moment (a leader election after
            # a partition healed: a read answered 503): what this request wrote may or may not
            # have landed. Its request_id maps a retry to the same job, so the answer is "send
            # it again", not an "internal error" the client would take as final (seen in the
            # partition soak: operations abandoned that a second try would have had accepted).
            if not _unavailable(err):
                raise
            log.warning("request not decided: the log did not answer", tenant=ctx.tenant, verb=ctx.verb,
                        error=str(err) or type(err).__name__)
            return Rejected(reason=f"the event log did not answer in time ({type(err).__name__}); send the request again",
                            retry=True, code="unavailable")

    async def _no_such_job(self, ctx: RequestContext, cmd: Any, refused: Refused) -> None:
        """Job control of a job the tenant does not have is refused as that, not as a missing
        grant on it: `cancel rejected: alice has no execute permission on job 0000...` with a
        `muster grant ... --scope job:0000...` to paste, for a job id mistyped (the tracker's
        reads answer 404 for it, to anyone)."""
        if refused.code == "forbidden" and isinstance(cmd, JobCommand) and await self.state.find_job(ctx.tenant, cmd.job_id) is None:
            raise Refused(f"unknown job {cmd.job_id!r} in tenant {ctx.tenant!r} (`muster job list` lists its jobs)",
                          code="not_found", field="job_id") from None

    async def _callback_allowed(self, tenant: str, cmd: Any) -> list[str]:
        """A pool callback's URL the pool service would never POST to (decision 38) is refused
        before anything is written; its warnings otherwise. Asked before the lock: a name that
        takes seconds to resolve holds up no other request."""
        wait = cmd.pool if isinstance(cmd, CreateCluster | ExpandCluster) else None
        if self.callbacks is None or wait is None or wait.callback is None or wait.callback.url is None:
            return []
        problem, warning = await self.callbacks(wait.callback, tenant)
        if problem:
            raise Refused(f"--callback: {problem}", code="invalid", field="pool.callback")
        return [warning] if warning else []

    @staticmethod
    def _new_ids(tenant: str, cmd: Any, pin: PlanSaved | None) -> tuple[str, str]:
        """A create's job and cluster (a saved plan's job is named by the plan)."""
        if pin is not None:
            return pin.job_id, str(planning.cluster_uuid(pin.job_id))
        return planning.created_ids(tenant, cmd.request_id)

    async def _cluster_of(self, ctx: RequestContext, cmd: Any) -> str:
        """The cluster an operation or a job command is for: one this planner knows (else
        `Refused`)."""
        if isinstance(cmd, JobCommand):
            job = await self.state.find_job(ctx.tenant, cmd.job_id)
            if job is None:
                raise Refused(f"unknown job {cmd.job_id!r}", code="not_found", field="job_id")
            return job.cluster_id
        cluster = self.state.clusters.get(cmd.cluster_id)
        if cluster is None or cluster.tenant != ctx.tenant:
            # In the words of its reads (`muster cluster show`, `GET /v1/clusters/<id>`), the same
            # whether the id is another tenant's cluster or none (was `unknown cluster '<id>'`).
            raise Refused(f"no cluster {cmd.cluster_id} in tenant {ctx.tenant}", code="not_found", field="cluster_id")
        return str(cmd.cluster_id)

    def _check(self, op: Operation, facts: Facts) -> None:
        if found := self._problems(op, facts):
            raise admission.together(found)

    @staticmethod
    def _problems(op: Operation, facts: Facts) -> list[Refused]:
        if op.every_problem:
            return admission.every_refusal(op.rules, facts)
        for rule in op.rules:
            rule(facts)
        return []

    def _job_id(self, tenant: str, cmd: Any, pin: PlanSaved | None) -> str:
        return pin.job_id if pin is not None else str(job_uuid(tenant, cmd.request_id))

    # -- create ------------------------------------------------------------------------------

    async def _create(self, ctx: RequestContext, op: Operation, cmd: CreateCluster, pin: PlanSaved | None,
                      job_id: str, cluster_id: str) -> Accepted | DryRun:
        known = await self.state.find_job(ctx.tenant, job_id)
        if known is not None and not cmd.dry_run:
            if pin is None:  # a saved plan's job is named by the plan, not by a request_id
                same_request(known, cmd, ctx.by(cmd))
            return Accepted(job_id=job_id, cluster_id=known.cluster_id, duplicate=True)
        catalog, seq = await self.state.current_catalog(ctx.tenant, refresh=True)
        facts = Facts(ctx.tenant, op.name, cmd, catalog, job_id, principal=ctx.principal, pools=self.pools, catalog_seq=seq,
                      may_read=self.catalog_reader(ctx.principal, ctx.tenant))
        found = self._problems(op, facts)
        if cmd.dry_run:  # a name taken is one more problem (the rules' first decides the status, as before)
            try:
                await self._claim_name(ctx.tenant, cmd.name, cluster_id, job_id, record=False)
            except Refused as err:
                found.append(err)
        if found:
            raise admission.together(found)
        job = self._new_job(ctx, facts, cluster_id, pin)
        cluster = planning.new_cluster(facts, cluster_id, ctx.by(cmd), self.execution.timers.clock.now())
        rules = await self.governance.load(ctx.tenant)
        if cmd.dry_run:
            return await self.previews.dry_run(ctx.by(cmd), job, None, cluster, facts, notes=self.governance.notes(rules, facts, None, ctx.by(cmd)),
                                               warnings=[*config_notes(facts), *await self._waits_for_workers(cluster)])  # as the request would be told
        preview = await self.previews.pinned(pin, job, None, cluster, facts) if pin is not None else None
        if preview is None and rules.active:  # the policies see the layout and the plan: solved now
            preview = await self.previews.preview(job, cluster, facts)
        judgement = await self._judged(rules, facts, ctx.by(cmd), None, cluster, preview)
        await self._claim_name(ctx.tenant, cmd.name, cluster_id, job_id, record=True)
        if preview is not None:
            self._plan(job, cluster, preview)
        # The cluster (which points to its job) first: see Planner.resume.
        try:
            await self.state.save_cluster(cluster)
        except ConcurrencyError:  # a retry after a crash between the two saves
            cluster = rebuild(Cluster, await self.state.log.read(subjects.cluster_events(ctx.tenant, cluster_id)))  # type: ignore[assignment]
        if judgement is not None and preview is not None:
            self.governance.record(job, cluster, judgement, preview.layout, digest_of(job, preview))
        try:
            await self.state.save_job(job)
        except ConcurrencyError:
            return Accepted(job_id=job_id, cluster_id=cluster_id, duplicate=True)
        self.state.jobs[job_id], self.state.clusters[cluster_id] = job, cluster
        leases.arm(self.execution.timers, cluster)
        if job.awaiting_approval:
            self.approvals.arm(job)
        elif preview is not None:
            await self._start(job, cluster, facts, preview)
        else:
            await self.execution.ask_for_layout(job, planning.layout_request(job_id, cluster, catalog, cmd))
        log.info("accepted", tenant=ctx.tenant, job=job_id, operation="create", nodes=cmd.nodes, plan=pin and pin.plan_id)
        return Accepted(job_id=job_id, cluster_id=cluster_id, warnings=config_notes(facts) + await self._warnings(job, cluster))

    async def _claim_name(self, tenant: str, name: str, cluster_id: str, job_id: str, record: bool) -> None:
        """Cluster names are unique in a tenant among clusters not deleted. The holder of a name
        is the last claim on its subject; a claim is appended fenced by that subject's sequence,
        so of two creates racing for a name (on two planners, say) one is refused."""
        subject = subjects.cluster_name_events(tenant, name)
        history = await self.state.log.read(subject)
        last = history[-1] if history else None
        if last is not None and last.event.cluster_id == cluster_id:
            return  # this create again (a retry)
        if last is not None:
            holder = rebuild(Cluster, await self.state.log.read(subjects.cluster_events(tenant, last.event.cluster_id)))
            if holder is not None and holder.status != "deleted":
                raise Refused(f"cluster name {name!r} is taken in tenant {tenant!r} by cluster {holder.id} ({holder.status}): "
                              "pick another name, or delete that cluster first", code="conflict", field="name")
        if not record:
            return
        claim = ClusterNameClaimed(name=name, cluster_id=cluster_id, job_id=job_id)
        try:
            await self.state.log.append(subject, [Append(claim, msg_id=f"{subject}:{cluster_id}")],
                                        expect_last_seq=last.seq if last is not None else 0)
        except ConcurrencyError:
            raise Refused(f"cluster name {name!r} was taken in tenant {tenant!r} by another create just now: "
                          "pick another name", code="conflict", field="name") from None

    async def _waits_for_workers(self, cluster: Cluster) -> list[str]:
        """Accepted all the same (a provisioner may register any moment), but the requester is
        told when nobody would take the job's tasks now."""
        live = await self.workers.live() if self.workers is not None else None
        if live is None:
            return []
        said = unserved_warning(cluster.tenant, queue_class(cluster, self.config.settings), live,
                                f"the job's tasks wait until one registers, and each attempt times out after "
                                f"{self.config.task_timeout_s:g} s")
        return [said] if said else []

    def _new_job(self, ctx: RequestContext, facts: Facts, cluster_id: str, pin: PlanSaved | None = None) -> Job:
        return planning.new_job(facts, cluster_id, ctx.by(facts.command), self.config.instance, self.config.max_attempts,
                                plan_id=pin.plan_id if pin is not None else None, trace=tracing.new_job(tracing.current()))

    # -- operations on an existing cluster ---------------------------------------------------

    async def _cluster_operation(self, ctx: RequestContext, op: Operation, cmd: Any, pin: PlanSaved | None) -> Accepted | DryRun:
        tenant = ctx.tenant
        cluster = self.state.clusters[cmd.cluster_id]
        job_id = self._job_id(tenant, cmd, pin)
        known = await self.state.find_job(tenant, job_id)
        if known is not None and not cmd.dry_run:
            if pin is None:  # a saved plan's job is named by the plan, not by a request_id
                same_request(known, cmd, ctx.by(cmd))
            return Accepted(job_id=job_id, cluster_id=known.cluster_id, duplicate=True)
        rollback = isinstance(cmd, RollbackCluster)
        catalog, seq = await self.state.current_catalog(tenant, refresh=True)
        facts = Facts(tenant, op.name, cmd, catalog, job_id, cluster=cluster,
                      current=await self.state.find_job(tenant, cluster.job_id), principal=ctx.principal,
                      source=await self.state.find_job(tenant, cmd.to_job) if rollback else None,
                      since=await self.state.jobs_since(tenant, cmd.cluster_id, cmd.to_job) if rollback else (),
                      pools=self.pools, catalog_seq=seq, may_read=self.catalog_reader(ctx.principal, tenant))
        if pin is not None:  # before the rules: "it changed" says more than what the change broke
            saved.check_unchanged(pin, cluster, saved.catalog_version(facts.catalog))
        self._check(op, facts)
        notes = size_notes(facts) + config_notes(facts)
        job = self._new_job(ctx, facts, cmd.cluster_id, pin)
        rules = await self.governance.load(tenant)
        if cmd.dry_run:
            return await self.previews.dry_run(ctx.by(cmd), job, cluster, cluster, facts,
                                               warnings=[*notes, *await self._waits_for_workers(cluster)],
                                               notes=self.governance.notes(rules, facts, cluster, ctx.by(cmd)))
        if pin is not None:
            preview = await self.previews.pinned(pin, job, cluster, cluster, facts)
        elif op.layout and not rules.active:  # the solver answers through the log (Execution.on_layout)
            await self._accept(job, cluster)
            await self.execution.ask_for_layout(job, planning.layout_request(job_id, cluster, facts.catalog, cmd))
            log.info("accepted", tenant=tenant, job=job_id, operation=op.name)
            return Accepted(job_id=job_id, cluster_id=cmd.cluster_id, warnings=notes + await self._waits_for_workers(cluster))
        else:
            preview = await self.previews.preview(job, cluster, facts)
        judgement = await self._judged(rules, facts, ctx.by(cmd), cluster, cluster, preview)
        # The plan is recorded with the job: a job recorded without its plan would wait forever.
        self._plan(job, cluster, preview)

        def then() -> None:
            if judgement is not None:
                self.governance.record(job, cluster, judgement, preview.layout, digest_of(job, preview))

        await self._accept(job, cluster, then)
        if job.awaiting_approval:
            self.approvals.arm(job)
        else:
            await self._start(job, cluster, facts, preview)
        log.info("accepted", tenant=tenant, job=job_id, operation=op.name, plan=pin and pin.plan_id)
        return Accepted(job_id=job_id, cluster_id=cmd.cluster_id, warnings=notes + list(preview.notes) + await self._warnings(job, cluster))

    async def _accept(self, job: Job, cluster: Cluster, then: Callable[[], None] | None = None) -> None:
        """`then`: what the job records once the cluster is (governance: its version)."""
        # The cluster's pointer to its job first: see Planner.resume. A job that only looks (a
        # check) leaves the reason too: the cluster's status is still what the last change left.
        keep = cluster.status_reason if OPERATIONS[job.operation].observes else ""
        cluster.set_status(cluster.status, str(job.id), keep)
        await self.state.save_cluster(cluster)
        if then is not None:
            then()
        try:
            await self.state.save_job(job)
        except ConcurrencyError:
            raise Refused(f"job {job.id} exists already") from None
        self.state.jobs[str(job.id)] = job

    # -- plans: previewed, shown (and saved), recorded ------------------------------------------

    def _plan(self, job: Job, cluster: Cluster, preview: Preview) -> None:
        job.record_plan(planning.planned(job, cluster, preview.plan, preview.target, self.config.mode,
                                         preview.batches, preview.tolerance, preview.stopped, preview.stopped_on))

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

    # -- governance (docs/governance.md) ------------------------------------------------------

    async def _judged(self, rules: Rules, facts: Facts, by: str, before: Cluster | None, after: Cluster,
                      preview: Preview | None) -> Judgement | None:
        """The tenant's policies and approval rules on the request and its plan; a denial is
        recorded and refuses the request."""
        if not rules.active or preview is None:
            return None
        shared = self.governance.shared
        if shared is None or not rules.spends:
            return await self._judged_once(rules, facts, by, before, after, preview)

        # Strict across planners (decision 44): what the job adds is held in its shard's
        # entry, written only if no other planner changed the tenant's spend meanwhile.
        async def judge() -> Judgement:
            return await self._judged_once(rules, facts, by, before, after, preview)

        async def reserve(judgement: Judgement) -> int | None:
            return await shared.reserve(facts.tenant, str(after.id), after.provider, [n.hardwaretype for n in preview.target],
                                        judgement.seen)

        return await shared.fenced(facts.tenant, judge, reserve)

    async def _judged_once(self, rules: Rules, facts: Facts, by: str, before: Cluster | None, after: Cluster,
                           preview: Preview) -> Judgement:
        judgement = await self.governance.judge(rules, facts, by, before, after, preview.target,
                                                [t.action.value for t in preview.plan.tasks])
        if judgement.verdict.denied:
            await self.governance.deny(facts, by, str(after.id), judgement)
        return judgement

    async def _warnings(self, job: Job, cluster: Cluster) -> list[str]:
        return self.governance.warnings(job) + await self._waits_for_workers(cluster)

    async def _extend_lease(self, ctx: RequestContext, op: Operation, cmd: ExtendLease) -> LeaseExtended:
        cluster = self.state.clusters[cmd.cluster_id]
        if not (cmd.request_id and cmd.request_id in cluster.lease_requests):
            self._check(op, Facts(ctx.tenant, op.name, cmd, await self.state.catalog(ctx.tenant), "", cluster=cluster,
                                  principal=ctx.principal))
        return await leases.extend(self.state, self.execution.timers, cluster, cmd, ctx.by(cmd))

    # -- job control ---------------------------------------------------------------------------

    async def _control(self, ctx: RequestContext, cmd: Any) -> Accepted | Rejected | DryRun:
        job = await self.state.find_job(ctx.tenant, cmd.job_id)
        assert job is not None  # (found by `_cluster_of`)
        cluster = self.state.clusters[job.cluster_id]
        if isinstance(cmd, ApproveJob | RejectJob):
            return await self.approvals.decide(ctx.by(cmd), job, cluster, cmd)
        first = job.control_requests.get(cmd.request_id or "")
        if first is not None:
            if first != CONTROL_EVENT[cmd.type]:
                raise Refused(f"request_id {cmd.request_id!r} was used already, to {VERB_OF[EVENT_CONTROL[first]]} job "
                              f"{cmd.job_id}: send that same request again, or use a new request_id",
                              code="conflict", field="request_id", job_id=cmd.job_id)
            return Accepted(job_id=cmd.job_id, cluster_id=job.cluster_id, duplicate=True)
        since: tuple[Job, ...] = ()
        if isinstance(cmd, RetryJob):  # run again with the catalog as it is now: a script fixed there is taken
            catalog, seq = await self.state.current_catalog(job.tenant, refresh=True)
            if cluster.job_id != str(job.id):  # only checks since? (`saga.retriable`)
                since = (await self.state.jobs_since(job.tenant, job.cluster_id, str(job.id)))[1:]
        else:
            catalog, seq = await self.state.catalog_of(job), None
        effects = control(job, cluster, cmd, ctx.by(cmd), catalog.services, self.config.settings, self.dispatch, seq, since)
        await self.execution.execute(job, cluster, effects)
        if isinstance(cmd, CancelJob):  # what nobody claimed ends now, not at its timeout
            await cancels.close_claims(self.execution, job, cluster)
        return Accepted(job_id=cmd.job_id, cluster_id=job.cluster_id)


def _unavailable(err: Exception) -> bool:
    """The log or the bus failed for a moment (`transient`), the log refused the write, or it
    moved on under the request (`ConcurrencyError`: the planner's state was stale, and a failed
    save reloads it; the same request's first try may have landed through another planner whose
    answer was lost). In each case the request, sent again with its id, is decided afresh."""
    return isinstance(err, TimeoutError | StoreError | ConcurrencyError) or transient(err)
