"""The Job aggregate: one operation on one cluster, from request to its final state.

Pure: no IO, no clock reads in apply (times come with the events), no randomness. Commands
return whether they changed anything, so a redelivered message is harmless.

Life of a job: `running` (forward plan) → `succeeded`; or, when a task exhausts its attempts
or the job is cancelled, dispatch stops, in-flight tasks finish, and a rollback plan of inverse
tasks runs (`rolling_back`) → `rolled_back`, or `needs_attention` if the rollback fails too.
`failed` is for jobs that never got a plan (no layout, a planning error).

Longer than our ~300 lines on purpose: an eventsourcing aggregate's event handlers (`@event`)
must be its own methods, and each command sits next to the handler it records; splitting the
class would separate the two halves of every transition.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import NAMESPACE_URL, UUID, uuid4, uuid5

from eventsourcing.domain import Aggregate, event

from contracts.approvals import JobApprovalExpired, JobApprovalRequested, JobApproved, JobRejected, PlanCost, PolicyWarned
from contracts.catalog import Action, Service
from contracts.events import (
    FINAL_JOB_STATES,
    STRANDED_PREFIX,
    CleanupQueued,
    JobAdopted,
    JobCancelRequested,
    JobFailed,
    JobLayoutRetried,
    JobNeedsAttention,
    JobPaused,
    JobPlanned,
    JobRequested,
    JobResourcesGranted,
    JobResourcesRequested,
    JobResumed,
    JobRetried,
    JobRolledBack,
    JobSucceeded,
    PlannedTaskRecord,
    RollbackPlanned,
    TaskAttemptFailed,
    TaskCompleted,
    TaskQueued,
)
from contracts.layout import Layout, NodeSpec
from muster.readmodel import desired
from muster.readmodel.jobs import shown_state, trace_id

from .model import Plan, PlannedTask
from .recording import record
from .rollback import rollback_plan
from .scheduling import ReadyIndex, ready

UNDO = "undo."
"""Prefix of rollback task ids, so they never collide with the forward plan's."""


def job_uuid(tenant: str, request_id: str | None) -> UUID:
    """Derived from the idempotency key when there is one, so a retried request maps to the
    same job; random otherwise."""
    if request_id:
        return uuid5(NAMESPACE_URL, f"muster:{tenant}:request:{request_id}")
    return uuid4()


@dataclass
class _Dispatch:
    """What dispatch asks after every outcome, for the active plan (`key`): the eager index of
    ready tasks (None in staged mode), the tasks queued now, the failed ones in failing order."""

    key: str
    index: ReadyIndex | None
    queued: set[str]
    failed: dict[str, None]


STRANDED = f"{STRANDED_PREFIX} the step before it did not succeed"
"""The error of a segment's follower ended `cancelled` because the step before it failed
(`domain/segments.py`): it never ran, and its attempt is given back (`retry_base`)."""

STRANDED_BY_TIMEOUT = (f"{STRANDED_PREFIX} the step before it timed out (its provisioner may still run "
                       "it late, after that step: a late run changes nothing)")
"""The same when the step before it timed out: that step may still be running, and its provisioner
go on with this one, a stale attempt as a late lone one is (docs/decisions/0058, "What is not
promised"); not waited for, its attempt given back."""

UNRUN = (STRANDED, STRANDED_BY_TIMEOUT)

_QUEUED_FIELDS = {"job_id", "task_id", "attempt", "node", "action", "service", "provisioner_class", "after", "v"}
"""The fields `Job.queue` sets on every `TaskQueued`: shared by them all (a model is frozen, and
a copy of it copies the set before changing it)."""


class Job(Aggregate):
    @staticmethod
    def create_id(payload: JobRequested) -> UUID:
        return UUID(payload.job_id)

    @event("JobRequested")
    def __init__(self, payload: JobRequested) -> None:
        self.tenant = payload.tenant
        self.cluster_id = payload.cluster_id
        self.operation = payload.operation
        self.request: dict[str, Any] = dict(payload.request)
        self.requested_by = payload.requested_by
        self.planner = payload.planner
        self.max_attempts = payload.max_attempts
        self.trace, self.trace_parent = payload.trace, payload.trace_parent
        self.runs = 0
        """Its retries (`JobRetried`): each starts a run of its own, with its own span (docs/tracing.md)."""
        self.run_started: datetime | None = None
        """When the latest retry was recorded (its `JobRetried`'s time); None before any."""
        self.catalog_seq = payload.catalog_seq
        """Where in the log the catalog it runs with is (`PlannerState.catalog_of`); None: the current one."""
        self.state = "running"
        self.error = ""
        self.mode = "eager"
        self._plan_parts: dict[str, Any] | None = None
        self._rollback_parts: dict[str, Any] | None = None
        """The plans as recorded: their task ids (the tasks are in `tasks`), links (and
        thrown-in starts); `plan` and `rollback` derive the `Plan`s from them."""
        self._plans: dict[str, Plan] = {}
        self.tasks: dict[str, PlannedTask] = {}
        """Every task of the job: the plan's, the rollback's and the cleanups', by id."""
        self.nodes: list[NodeSpec] = []
        self.previous_nodes: list[NodeSpec] = []
        self.previous_config: dict[str, Any] = {}
        self.previous_stopped: list[str] | None = None
        """Services meant to be stopped before the job (None: planned before this was recorded)."""
        self.previous_stopped_on: dict[str, list[str]] = {}
        """With `previous_stopped`: services meant to be stopped on some nodes only (`readmodel.desired`)."""
        self.stopped_after: list[str] | None = None
        """A rollback's: the services meant to be stopped once it succeeds (with `stopped_on_after`)."""
        self.stopped_on_after: dict[str, list[str]] = {}
        self.attempts: dict[str, int] = {}
        self._segment_after: dict[str, str] = {}
        self._segment_next: dict[str, str] = {}
        self.retry_base: dict[str, int] = {}
        self.task_state: dict[str, str] = {}
        self.timed_out: set[str] = set()
        """Failed tasks whose last attempt timed out (shown as `timed_out`; `failed` to dispatch)."""
        self.permanent: set[str] = set()
        """Failed tasks whose last attempt no retry can mend (`TaskAttemptFailed.permanent`): no
        attempt left; a job retry gives them fresh ones."""
        self.last_errors: dict[str, str] = {}
        """Each failed task's last error: the job's reason names it when the task stops the job."""
        self.maybe_made: set[str] = set()
        """Creates of this round with a failed attempt that may have made the machine all the same
        (`TaskAttemptFailed.may_have_made`, or timed out): the rollback deletes their nodes."""
        self.cleanups: dict[str, str] = {}  # node -> its running cleanup task
        self.paused = False
        self.cancel_requested = False
        self.cancelled_by = ""
        """Who asked for the cancel being taken (the reason names them)."""
        self.cancels = 0
        """Cancels recorded so far: the round of the cancel fence (`fence_round`)."""
        self.control_requests: dict[str, str] = {}
        """Idempotency key of each job control request -> the event it made (JobPaused...)."""
        self.resources: dict[str, Any] | None = None
        """Hosts asked of a pool: {pool, request_id, hosts, granted} (docs/pools.md)."""
        self.batches: list[list[str]] = []
        self.tolerance = 0
        self._dispatch: _Dispatch | None = None
        self.approval: dict[str, Any] | None = None
        """Waiting for (or decided) approval: the request, then the decision (docs/governance.md)."""
        self.warnings: list[dict[str, Any]] = []
        """What the tenant's policies warned of at admission."""
        self.rollback_reason = ""
        """Why the rollback started (`RollbackPlanned.reason`): the error again when it is retried."""
        self.moved: set[str] = set()
        """Succeeded tasks whose moves (`ServicesMoved`) are recorded already: those of a rollback
        that needed attention, when it is retried (`saga.record_moves` skips them)."""
        self.relayouts = payload.relayout
        """Other layouts the job may ask for after a failure past its retries (`JobLayoutRetried`)."""
        self.layout_round = 0
        self.tried_layouts: list[Layout] = []

    # -- planning -----------------------------------------------------------------------

    @property
    def planned(self) -> bool:
        return self._plan_parts is not None

    # Plans are derived from the recorded JSON on first use: a rebuild of a log full of
    # finished jobs never pays for them.
    @property
    def plan(self) -> Plan | None:
        return self._derived("plan", self._plan_parts)

    @property
    def rollback(self) -> Plan | None:
        return self._derived("rollback", self._rollback_parts)

    def _derived(self, name: str, data: dict[str, Any] | None) -> Plan | None:
        if data is None:
            return None
        if name not in self._plans:
            links = [(tuple(s), tuple(t)) for s, t in data["links"]]
            tasks = [self.tasks[t] for t in data["tasks"]]
            self._plans[name] = Plan.assemble(tasks, links, data.get("thrown_in", ()))
        return self._plans[name]

    @event("JobPlanned")
    def _planned(self, payload: JobPlanned) -> None:
        self.mode = payload.mode
        self.tasks = {t.id: PlannedTask(t.id, t.node, t.action, t.service) for t in payload.tasks}
        self._plan_parts = {"tasks": list(self.tasks), "links": payload.links, "thrown_in": payload.thrown_in}
        self.nodes = list(payload.nodes)
        self.previous_nodes = list(payload.previous_nodes)
        self.previous_config = dict(payload.previous_config)
        self.previous_stopped = None if payload.previous_stopped is None else list(payload.previous_stopped)
        self.stopped_after = None if payload.stopped is None else list(payload.stopped)
        self.previous_stopped_on = dict(payload.previous_stopped_on or {})
        self.stopped_on_after = dict(payload.stopped_on or {})
        self.batches = [list(b) for b in payload.batches]
        self.tolerance = payload.tolerance
        self._dispatch = None

    def record_plan(self, payload: JobPlanned) -> bool:
        if self.planned or self.is_final:
            return False
        self._planned(payload)
        return True

    @property
    def active_plan(self) -> Plan | None:
        return self.rollback if self.state == "rolling_back" else self.plan

    # -- dispatch -----------------------------------------------------------------------

    @event("TaskQueued")
    def _queued(self, payload: TaskQueued) -> None:
        self.attempts[payload.task_id] = payload.attempt
        self._set_state(payload.task_id, "queued")
        if payload.after is not None:
            self.segment_after[payload.task_id] = payload.after
            self.segment_next[payload.after] = payload.task_id
        else:
            self.segment_after.pop(payload.task_id, None)

    # (Read from the instance's dict: a snapshot written before segments has neither.)
    @property
    def segment_after(self) -> dict[str, str]:
        """Each task queued as a segment's step -> the step before it (`TaskQueued.after`,
        docs/decisions/0058; `domain/segments.py`)."""
        links: dict[str, str] = self.__dict__.setdefault("_segment_after", {})
        return links

    @property
    def segment_next(self) -> dict[str, str]:
        """The other way: a step -> the step queued after it (checked against `segment_after`)."""
        links: dict[str, str] = self.__dict__.setdefault("_segment_next", {})
        return links

    def end_follower(self, payload: TaskAttemptFailed) -> None:
        """A segment's follower ends without running (`segments.end_stranded`)."""
        self._attempt_failed(payload)

    def queue(self, task_id: str, provisioner_class: str = "default", after: str | None = None) -> TaskQueued:
        task = self.tasks[task_id]
        payload = TaskQueued(
            job_id=str(self.id), task_id=task_id, attempt=self.attempts.get(task_id, 0) + 1,
            node=task.node, action=task.action, service=task.service, provisioner_class=provisioner_class,
            after=after, v=1 if after is None else 2,
        )
        # Every one names the same fields: one set of their names for all (pydantic keeps a set
        # per model, most of a pending event's size; a big create's first wave holds one for
        # each of its heads and followers: docs/benchmarks.md, "Scale: the planner's CPU a task").
        object.__setattr__(payload, "__pydantic_fields_set__", _QUEUED_FIELDS)
        record(self, "_queued", payload)  # (the short way: a wave records thousands, recording.py)
        return payload

    def ready(self) -> list[str]:
        """Tasks to dispatch now, by the job's mode, never two at once on one node; nothing
        while paused or stopping (a task out of attempts, or a cancel)."""
        plan = self.active_plan
        if plan is None or self.paused or self.stopping or self.state not in ("running", "rolling_back") or self.awaiting_approval:
            return []
        # Written-off tasks (a failure within the tolerance) count as settled: never run again,
        # and the next batch does not wait for them.
        index = self._index()
        if index is not None:
            candidates = index.ready()
        else:  # staged: Coopr's stage barrier looks at the stages in order
            states = {t: s for t, s in self.task_state.items() if t in plan.by_id}
            done = [t for t, s in states.items() if s == "succeeded"] + sorted(self.written_off)
            running = [t for t, s in states.items() if s == "queued"]
            candidates = ready(plan, done, running, self.mode)
        return [t for t in candidates if plan.by_id[t].node not in self.cleanups]

    # What dispatch asks after every outcome, kept up to date by the appliers instead of a scan
    # of every task (a 10,000-node create has 170,000): derived from `task_state`, rebuilt
    # from it whenever dropped (a snapshot does not keep it).

    def _dispatch_state(self) -> _Dispatch:
        key = "rollback" if self.state == "rolling_back" else "plan"
        d = self._dispatch
        if d is None or d.key != key:
            plan = self.active_plan
            queued = {t for t, s in self.task_state.items() if s == "queued"}
            failed = {t: None for t, s in self.task_state.items() if s == "failed"}
            done = [t for t, s in self.task_state.items() if s == "succeeded"]
            index = ReadyIndex(plan, done, queued) if plan is not None and self.mode == "eager" else None
            d = self._dispatch = _Dispatch(key, index, queued, failed)
        return d

    def _index(self) -> ReadyIndex | None:
        """The eager index, with the written-off tasks settled in it (None when staged)."""
        index = self._dispatch_state().index
        if index is not None and self.tolerance:
            for t in self.written_off:
                index.finished(t)
        return index

    def _set_state(self, task_id: str, state: str) -> None:
        self.task_state[task_id] = state
        d = self._dispatch
        if d is None:
            return
        if state == "queued":
            d.queued.add(task_id)
            d.failed.pop(task_id, None)
            if d.index is not None:
                d.index.started(task_id)
        elif state == "succeeded":
            d.queued.discard(task_id)
            d.failed.pop(task_id, None)
            if d.index is not None:
                d.index.finished(task_id)
        elif state == "failed":
            d.queued.discard(task_id)
            d.failed[task_id] = None
            if d.index is not None:
                d.index.released(task_id)
        elif state == "cancelled":  # out of flight, and no failure: the job waits for it no more
            d.queued.discard(task_id)
            d.failed.pop(task_id, None)
            if d.index is not None:
                d.index.released(task_id)

    # -- outcomes -------------------------------------------------------------------------

    def is_current(self, task_id: str, attempt: int) -> bool:
        return self.attempts.get(task_id) == attempt and self.task_state.get(task_id) == "queued"

    @event("TaskCompleted")
    def _completed(self, payload: TaskCompleted) -> None:
        self._set_state(payload.task_id, "succeeded")
        for node, cleanup in list(self.cleanups.items()):
            if cleanup == payload.task_id:
                del self.cleanups[node]

    def complete(self, payload: TaskCompleted) -> bool:
        if not self.is_current(payload.task_id, payload.attempt):
            return False  # a late or repeated result of an attempt that is no longer current
        record(self, "_completed", payload)
        return True

    @event("TaskAttemptFailed")
    def _attempt_failed(self, payload: TaskAttemptFailed) -> None:
        if payload.state == "cancelled":  # never ran: nothing failed, nothing to undo
            self._set_state(payload.task_id, "cancelled")
            if payload.error in UNRUN:  # (a segment's follower: its attempt given back, decision 58)
                self.retry_base[payload.task_id] = self.retry_base.get(payload.task_id, 0) + 1
            return
        self._set_state(payload.task_id, "failed")
        self.last_errors[payload.task_id] = payload.error
        if payload.may_have_made or payload.state == "timed_out":
            self.maybe_made.add(payload.task_id)
        if payload.state == "timed_out":
            self.timed_out.add(payload.task_id)
        else:
            self.timed_out.discard(payload.task_id)
        if payload.permanent:
            self.permanent.add(payload.task_id)

    def fail_attempt(self, payload: TaskAttemptFailed) -> bool:
        if not self.is_current(payload.task_id, payload.attempt):
            return False
        self._attempt_failed(payload)
        return True

    def attempts_left(self, task_id: str) -> int:
        if task_id in self.permanent:
            return 0
        return self.max_attempts - (self.attempts.get(task_id, 0) - self.retry_base.get(task_id, 0))

    @property
    def exhausted(self) -> list[str]:
        """Failed tasks of the current phase with no attempt left (each one stops the job)."""
        undo = self.state == "rolling_back"
        return [t for t in self._dispatch_state().failed if self.attempts_left(t) <= 0 and t.startswith(UNDO) == undo]

    @property
    def written_off(self) -> set[str]:
        """Within the failure tolerance (rolling changes, checks): the forward tasks that ran
        out of attempts and, in their batch, every task that needed them."""
        plan = self.plan
        if not self.tolerance or self.state != "running" or plan is None:
            return set()
        batch = {n: i for i, group in enumerate(self.batches) for n in group}
        out: set[str] = set()
        stack = [t for t in self.exhausted if t in plan.by_id]
        while stack:
            task = stack.pop()
            if task not in out:
                out.add(task)
                here = batch.get(plan.by_id[task].node)
                stack.extend(s for s in plan.successors(task) if batch.get(plan.by_id[s].node) == here)
        return out

    @property
    def failed_nodes(self) -> list[str]:
        """Nodes the change could not finish on (their tasks written off)."""
        plan = self.plan
        return sorted({plan.by_id[t].node for t in self.written_off}) if plan is not None else []

    @property
    def stopping(self) -> bool:
        """Dispatch stops; once nothing is in flight the job rolls back. A tolerance lets that
        many nodes fail first."""
        if self.state != "running":
            return False
        if self.cancel_requested:
            return True
        exhausted = self.exhausted
        if not exhausted:
            return False
        plan = self.plan
        if not self.tolerance or plan is None or any(t not in plan.by_id for t in exhausted):
            return True  # (a cleanup out of attempts is never tolerated)
        return len(self.failed_nodes) > self.tolerance

    @property
    def in_flight(self) -> int:
        return len(self._dispatch_state().queued)

    @property
    def all_done(self) -> bool:
        plan = self.active_plan
        if plan is None:
            return False
        index = self._index()
        if index is not None:
            return index.all_done
        settled = self.written_off if self.state == "running" else set()
        return all(self.task_state.get(t.id) == "succeeded" or t.id in settled for t in plan.tasks)

    # -- a failed create leaves a machine: delete it, then create again ------------------

    @event("CleanupQueued")
    def _cleanup_queued(self, payload: CleanupQueued) -> None:
        self.tasks[payload.task_id] = PlannedTask(payload.task_id, payload.node, Action.DELETE, None)
        self.attempts[payload.task_id] = payload.attempt
        self.task_state[payload.task_id] = "queued"
        self.cleanups[payload.node] = payload.task_id
        create = next((t.id for t in self.plan.tasks if t.node == payload.node and t.action is Action.CREATE), None) if self.plan else None
        if create is not None and create != payload.for_task:
            self.task_state.pop(create, None)  # the machine goes, so create must run again
        self._dispatch = None

    def queue_cleanup(self, failed_task: str) -> CleanupQueued:
        node = self.tasks[failed_task].node
        n = 1 + sum(1 for t in self.tasks if t.startswith(f"{node}.cleanup"))
        payload = CleanupQueued(job_id=str(self.id), task_id=f"{node}.cleanup{n}", node=node, for_task=failed_task)
        self._cleanup_queued(payload)
        return payload

    # -- job control ----------------------------------------------------------------------

    @event("JobPaused")
    def _paused(self, payload: JobPaused) -> None:
        if payload.request_id:
            self.control_requests[payload.request_id] = payload.type
        self.paused = True

    def pause(self, by: str, request_id: str | None = None) -> bool:
        if self.is_final or self.paused:
            return False
        self._paused(JobPaused(job_id=str(self.id), by=by, request_id=request_id))
        return True

    @event("JobResumed")
    def _resumed(self, payload: JobResumed) -> None:
        if payload.request_id:
            self.control_requests[payload.request_id] = payload.type
        self.paused = False

    def resume(self, by: str, request_id: str | None = None) -> bool:
        # A paused job still finishes when its last tasks in flight do (found by the nemesis
        # soak: a resume after that recorded JobResumed after JobSucceeded).
        if self.is_final or not self.paused:
            return False
        self._resumed(JobResumed(job_id=str(self.id), by=by, request_id=request_id))
        return True

    @event("JobAdopted")
    def _adopted(self, payload: JobAdopted) -> None:
        self.planner = payload.planner

    def adopt(self, planner: str) -> bool:
        """This planner now drives the job (it resumed it after the previous owner stopped)."""
        if self.is_final or self.planner == planner:
            return False
        self._adopted(JobAdopted(job_id=str(self.id), planner=planner, previous=self.planner))
        return True

    @event("JobCancelRequested")
    def _cancel_requested(self, payload: JobCancelRequested) -> None:
        if payload.request_id:
            self.control_requests[payload.request_id] = payload.type
        self.cancel_requested = True
        self.cancelled_by = payload.by
        self.cancels += 1
        self.paused = False

    def cancel(self, by: str, request_id: str | None = None) -> bool:
        if self.is_final or self.cancel_requested or self.state == "rolling_back":
            return False
        self._cancel_requested(JobCancelRequested(job_id=str(self.id), by=by, request_id=request_id))
        return True

    def fence_round(self, task_id: str) -> int | None:
        """Which cancel fences this task's attempts (docs/decisions/0046): the round's next
        cancel, or the one that came (then its fence is closed: nothing claims it any more).
        None for a rollback's tasks: a cancel never stops a rollback."""
        if task_id.startswith(UNDO):
            return None
        return self.cancels - 1 if self.cancel_requested else self.cancels

    def cancel_unclaimed(self, claimed: Collection[tuple[str, int]]) -> list[str]:
        """Once the cancel's fence is closed (`ClaimsClosed`): the queued forward attempts no
        provisioner claimed before it (`claimed`: the (task, attempt) pairs with a claim in the
        log before the fence) can never be claimed, so they end now, `cancelled`: the job waits
        neither for them nor for their timeouts, and the rollback has nothing of theirs to undo.
        A claimed attempt runs to its end (the rollback undoes it). Their task ids."""
        if not self.cancel_requested or self.state != "running":
            return []
        ended = [t for t, s in self.task_state.items()
                 if s == "queued" and self.fence_round(t) is not None and (t, self.attempts[t]) not in claimed]
        for t in ended:
            self._attempt_failed(TaskAttemptFailed(job_id=str(self.id), task_id=t, attempt=self.attempts[t], state="cancelled",
                                                   error="cancelled before any provisioner claimed it"))
        return ended

    def lose_claimed(self, lost: Mapping[tuple[str, int], str]) -> list[str]:
        """Once the cancel's fence is closed: the claimed forward attempts whose every claimer is
        gone for good (`lost`: (task, attempt) -> why; docs/decisions/0054) will never report,
        and nothing can claim them again. Each ends failed with its effect unknown
        (`may_have_made`, as a timeout does): the rollback undoes it. Their task ids."""
        if not self.cancel_requested or self.state != "running":
            return []
        ended = [t for (t, a) in lost if self.is_current(t, a) and self.fence_round(t) is not None]
        for t in ended:
            self._attempt_failed(TaskAttemptFailed(job_id=str(self.id), task_id=t, attempt=self.attempts[t],
                                                   error=lost[(t, self.attempts[t])], may_have_made=True))
        return ended

    @property
    def modified_on(self) -> datetime:
        return self._modified_on

    @modified_on.setter
    def modified_on(self, value: datetime) -> None:
        # eventsourcing sets this to each event's time once the event is applied (recorded, or
        # read back): a retry's run starts at its `JobRetried`'s time, with no clock read here.
        self._modified_on = value
        if getattr(self, "runs", 0) and self.run_started is None:
            self.run_started = value

    @event("JobRetried")
    def _retried(self, payload: JobRetried) -> None:
        self.runs, self.run_started = self.runs + 1, None  # set to this event's time once applied (`modified_on`)
        if payload.request_id:
            self.control_requests[payload.request_id] = payload.type
        if payload.catalog_seq is not None:
            self.catalog_seq = payload.catalog_seq
        self.paused = False
        self._dispatch = None
        if payload.rollback:
            # What the rollback undid stays undone; what it could not undo is tried again, with
            # fresh attempts. Its succeeded tasks' moves were recorded when it needed attention.
            rollback = self.rollback
            assert rollback is not None
            self.state, self.error = "rolling_back", payload.reason
            self.moved = {t for t, s in self.task_state.items() if s == "succeeded"}
            for t in rollback.by_id:
                if self.task_state.get(t) != "succeeded":
                    self.task_state.pop(t, None)
                    self.timed_out.discard(t)
                    self.permanent.discard(t)  # a retry is asked for once the cause is mended
                    self.retry_base[t] = self.attempts.get(t, 0)
            return
        # Everything the rollback undid must be done again: start over with fresh attempts.
        self.state, self.error = "running", ""
        if self.resources is not None:  # the last run's pool request ended with it: the run asks again
            self.resources = {**self.resources, "ended": True}
        self._rollback_parts = None
        self._plans.pop("rollback", None)
        self.cancel_requested = False
        self.cleanups, self.maybe_made = {}, set()  # (the rollback that ended the last round deleted those)
        self.retry_base = dict(self.attempts)
        # A node of the cluster that the last round deleted stays deleted (no rollback undoes a
        # delete, and the cluster left it out): what ran there stays done. Started over, its
        # delete had no node to name, and the retry waited for it for good.
        gone = self.deleted_nodes()
        kept = {t: "succeeded" for t, s in self.task_state.items()
                if s == "succeeded" and t in self.tasks and not t.startswith(UNDO) and self.tasks[t].node in gone}
        self.task_state, self.moved, self.permanent = kept, set(kept), set()

    def deleted_nodes(self) -> set[str]:
        """The nodes of the cluster before the job whose forward `delete` succeeded (a delete's,
        a shrink's): their machines are gone, and no rollback brings them back."""
        plan, before = self.plan, {n.id for n in self.previous_nodes}
        if plan is None:
            return set()
        return {t.node for t in plan.tasks
                if t.action is Action.DELETE and t.node in before and self.task_state.get(t.id) == "succeeded"}

    def retry(self, by: str, request_id: str | None = None, catalog_seq: int | None = None) -> bool:
        """A failed or rolled-back job starts its plan over; one that needs attention after its
        rollback failed runs the rest of its rollback again. A job that needs attention without a
        rollback (an event the planner could not take in stopped it mid-plan) has nothing to
        retry: False, as for a job that cannot be retried."""
        if not self.planned or not self.approved:
            return False
        if self.state in ("rolled_back", "failed"):
            self._retried(JobRetried(job_id=str(self.id), by=by, request_id=request_id, catalog_seq=catalog_seq))
            return True
        if self.state == "needs_attention" and self.rollback is not None:
            self._retried(JobRetried(job_id=str(self.id), by=by, request_id=request_id, catalog_seq=catalog_seq,
                                     rollback=True, reason=self.rollback_reason))
            return True
        return False

    # -- another layout, after a failure (docs/planner.md, "Another layout") --------------------

    @property
    def may_relayout(self) -> bool:
        """Rolled back after a task ran out of attempts (not a cancel), with rounds left, and
        nobody's approval needed: an approved plan is the only plan the job may run, and another
        layout is another plan (docs/governance.md)."""
        return self.could_relayout and self.approval is None

    @property
    def could_relayout(self) -> bool:
        """As `may_relayout`, approvals aside."""
        return (self.state == "rolling_back" and not self.cancel_requested and self.layout_round < self.relayouts
                and self.operation in ("create", "expand"))

    @event("JobLayoutRetried")
    def _layout_retried(self, payload: JobLayoutRetried) -> None:
        # What the rollback undid is planned anew on the next layout: fresh attempts (their
        # numbers go on, so every attempt keeps its own id), no plan until the solver answers.
        self.state, self.error = "running", ""
        self.layout_round = payload.round
        self.tried_layouts = list(payload.exclude)
        self._plan_parts = self._rollback_parts = None
        self._plans = {}
        self.tasks, self.nodes, self.batches = {}, [], []
        self.cleanups, self.task_state, self.maybe_made, self.moved, self.permanent = {}, {}, set(), set(), set()
        self.retry_base = dict(self.attempts)
        self._dispatch = None

    def retry_layout(self, failed: Layout) -> JobLayoutRetried | None:
        """Ask for another layout than every one tried (the failed one included)."""
        if not self.may_relayout:
            return None
        payload = JobLayoutRetried(job_id=str(self.id), round=self.layout_round + 1, reason=self.error,
                                   exclude=[*self.tried_layouts, failed])
        self._layout_retried(payload)
        return payload

    def no_other_layout(self, reason: str) -> bool:
        """The solver has no layout left: the job ends rolled back, as its last layout did."""
        if self.state != "running" or self.planned or not self.layout_round:
            return False
        self._rolled_back(JobRolledBack(job_id=str(self.id), reason=reason))
        return True

    # -- pool hosts (docs/pools.md) -------------------------------------------------------

    @event("JobResourcesRequested")
    def _resources_requested(self, payload: JobResourcesRequested) -> None:
        self.resources = {"pool": payload.pool, "request_id": payload.request_id, "hosts": payload.hosts, "granted": False}

    def request_resources(self, pool: str, request_id: str, hosts: int) -> bool:
        """Record that the job asked a pool for hosts (again, after a retry: a new request)."""
        last = self.resources
        if self.is_final or (last is not None and (last["request_id"] == request_id or not (last["granted"] or last.get("ended")))):
            return False
        self._resources_requested(JobResourcesRequested(job_id=str(self.id), pool=pool, request_id=request_id, hosts=hosts))
        return True

    @event("JobResourcesGranted")
    def _resources_granted(self, payload: JobResourcesGranted) -> None:
        assert self.resources is not None
        self.resources = {**self.resources, "granted": True}

    def take_resources(self, assignments: dict[str, str]) -> bool:
        """The pool's grant: False if there was nothing to wait for (or it came before)."""
        if self.resources is None or self.resources["granted"] or self.resources.get("ended") or self.is_final:
            return False
        self._resources_granted(JobResourcesGranted(job_id=str(self.id), pool=self.resources["pool"],
                                                    request_id=self.resources["request_id"], assignments=assignments))
        return True

    @property
    def waiting_for_resources(self) -> bool:
        return (self.resources is not None and not self.resources["granted"] and not self.resources.get("ended")
                and not self.is_final)

    # -- governance (docs/governance.md) ---------------------------------------------------

    @event("JobApprovalRequested")
    def _approval_requested(self, payload: JobApprovalRequested) -> None:
        self.approval = {**payload.model_dump(mode="json", exclude={"type", "v", "job_id"}), "decision": None, "by": None,
                         "comment": ""}

    def await_approval(self, payload: JobApprovalRequested) -> bool:
        if self.approval is not None or self.is_final:
            return False
        self._approval_requested(payload)
        return True

    @property
    def awaiting_approval(self) -> bool:
        return self.approval is not None and self.approval["decision"] is None and not self.is_final

    @property
    def approved(self) -> bool:
        """Runs with nobody's approval needed, or approved."""
        return self.approval is None or self.approval["decision"] == "approved"

    def _decided(self, decision: str, by: str | None, comment: str, request_id: str | None) -> None:
        assert self.approval is not None
        self.approval = {**self.approval, "decision": decision, "by": by, "comment": comment}
        if request_id:
            self.control_requests[request_id] = {"approved": "JobApproved", "rejected": "JobRejected"}.get(decision, "")

    @event("JobApproved")
    def _approved(self, payload: JobApproved) -> None:
        self._decided("approved", payload.by, payload.comment, payload.request_id)
        if payload.cost is not None:
            assert self.approval is not None
            self.approval["approved_cost"] = payload.cost.model_dump(mode="json")

    @event("JobRejected")
    def _rejected(self, payload: JobRejected) -> None:
        self._decided("rejected", payload.by, payload.comment, payload.request_id)

    @event("JobApprovalExpired")
    def _approval_expired(self, payload: JobApprovalExpired) -> None:
        self._decided("expired", None, "", None)

    def decide(self, approve: bool, by: str, comment: str, request_id: str | None = None, cost: PlanCost | None = None) -> bool:
        if not self.awaiting_approval:
            return False
        if approve:
            self._approved(JobApproved(job_id=str(self.id), by=by, comment=comment, request_id=request_id, cost=cost))
        else:
            self._rejected(JobRejected(job_id=str(self.id), by=by, comment=comment, request_id=request_id))
        return True

    def expire_approval(self) -> bool:
        if not self.awaiting_approval:
            return False
        assert self.approval is not None
        self._approval_expired(JobApprovalExpired(job_id=str(self.id), expires_at=self.approval["expires_at"]))
        return True

    @event("PolicyWarned")
    def _policy_warned(self, payload: PolicyWarned) -> None:
        self.warnings = [w.model_dump(mode="json") for w in payload.warnings]

    def warn(self, payload: PolicyWarned) -> bool:
        """Recorded when it says something new: at admission, and at approval a warning the
        policies as they are then give (`payload` carries every warning, the earlier ones too)."""
        if {(w["policy"], w["message"]) for w in self.warnings} >= {(w.policy, w.message) for w in payload.warnings}:
            return False
        self._policy_warned(payload)
        return True

    # -- rollback --------------------------------------------------------------------------

    @event("RollbackPlanned")
    def _rollback_planned(self, payload: RollbackPlanned) -> None:
        self.state = "rolling_back"
        self.error = self.rollback_reason = payload.reason
        self.cleanups = {}  # the rollback deals with those nodes now
        undo = [PlannedTask(t.id, t.node, t.action, t.service) for t in payload.tasks]
        self._rollback_parts = {"tasks": [t.id for t in undo], "links": payload.links}
        self._plans.pop("rollback", None)
        self._dispatch = None
        self.tasks.update({t.id: t for t in undo})

    def plan_rollback(self, reason: str, services: Mapping[str, Service]) -> RollbackPlanned | None:
        """Inverse tasks of what the forward plan completed, in reverse dependency order."""
        if self.plan is None or self.state != "running":
            return None
        completed = [t.id for t in self.plan.tasks if self.task_state.get(t.id) == "succeeded"]
        # A node whose cleanup never succeeded may still have a machine: count its create as
        # done, so the rollback deletes it.
        completed += [t.id for t in self.plan.tasks if t.action is Action.CREATE and t.node in self.cleanups]
        # So may a create whose attempt failed after the cloud was asked for the machine, the answer
        # lost (the endpoint went away, the attempt timed out). Its delete has no providerid; a
        # provider that names its machines finds it by name (libcloud).
        completed += [t.id for t in self.plan.tasks if t.action is Action.CREATE and t.id not in completed
                      and t.id in self.maybe_made]
        had = {(n.id, s) for n in self.previous_nodes for s in n.services}
        stopped: set[tuple[str, str]] | None = None  # (v1 events do not say: every start and stop is undone, as then)
        if self.previous_stopped is not None:
            layout = {n.id: n.services for n in self.previous_nodes}
            stopped = desired.stopped_pairs(layout, self.previous_stopped, self.previous_stopped_on)
        undo = rollback_plan(self.plan, completed, services, had, stopped)
        rename = {t.id: UNDO + t.id for t in undo.tasks}
        payload = RollbackPlanned(
            job_id=str(self.id), reason=reason,
            tasks=[PlannedTaskRecord(id=rename[t.id], node=t.node, action=t.action, service=t.service) for t in undo.tasks],
            links=[([rename[x] for x in s], [rename[x] for x in t]) for s, t in undo.links],
            stages=[[rename[x] for x in st] for st in undo.stages],
        )
        self._rollback_planned(payload)
        return payload

    @event("JobRolledBack")
    def _rolled_back(self, payload: JobRolledBack) -> None:
        self.state = "rolled_back"
        self.error = payload.reason or self.error

    def finish_rollback(self, note: str = "") -> bool:
        if self.state != "rolling_back":
            return False
        self._rolled_back(JobRolledBack(job_id=str(self.id), reason=self.error + note))
        return True

    @event("JobNeedsAttention")
    def _needs_attention(self, payload: JobNeedsAttention) -> None:
        self.state = "needs_attention"
        self.error = payload.reason

    def needs_attention(self, reason: str) -> bool:
        if self.is_final:
            return False
        self._needs_attention(JobNeedsAttention(job_id=str(self.id), reason=reason))
        return True

    # -- views --------------------------------------------------------------------------

    @property
    def shown(self) -> str:
        """The state a person is shown: `running` split by what the job waits for."""
        if self.paused and not self.is_final:
            return "paused"
        if self.awaiting_approval:
            return "waiting_for_approval"
        if self.waiting_for_resources and self.state == "running":
            return "waiting_for_resources"
        return self.state

    def view(self) -> dict[str, Any]:
        """The job as its owner sees it (the tracker adds where each task runs)."""
        forward = self.plan.by_id if self.cancel_requested and self.plan is not None else {}
        tasks = [
            {**t.to_json(), "state": shown_state(self.task_state.get(t.id), t.id in self.timed_out, t.id in forward),
             "attempt": self.attempts.get(t.id, 0)}
            for t in self.tasks.values()
        ]
        counts: dict[str, int] = {}
        for t in tasks:
            counts[t["state"]] = counts.get(t["state"], 0) + 1
        done = {t for t, s in self.task_state.items() if s == "succeeded"}
        plan = self.active_plan
        stages = plan.stages if plan is not None else ()
        current = next((i for i, st in enumerate(stages, 1) if not set(st) <= done), None)
        return {
            "id": str(self.id), "tenant": self.tenant, "cluster_id": self.cluster_id, "operation": self.operation,
            "state": self.shown,
            "error": self.error or None, "owner": self.planner, "mode": self.mode,
            "requested_by": self.requested_by, "started_at": self.created_on.isoformat(),
            "finished_at": self.modified_on.isoformat() if self.is_final else None,
            "counts": dict(sorted(counts.items())), "tasks_total": len(tasks),
            "stage": {"current": current, "total": len(stages)}, "tasks": tasks,
            "resources": dict(self.resources) if self.resources else None,
            "approval": dict(self.approval) if self.approval else None, "policy_warnings": list(self.warnings),
            "trace_id": trace_id(getattr(self, "trace", None)),
        }

    # -- the end --------------------------------------------------------------------------

    @property
    def is_final(self) -> bool:
        return self.state in FINAL_JOB_STATES

    @event("JobSucceeded")
    def _succeeded(self, payload: JobSucceeded) -> None:
        self.state = "succeeded"

    def succeed(self) -> bool:
        if self.state != "running":
            return False
        self._succeeded(JobSucceeded(job_id=str(self.id)))
        return True

    @event("JobFailed")
    def _failed(self, payload: JobFailed) -> None:
        self.state = "failed"
        self.error = payload.reason

    def fail(self, reason: str) -> bool:
        if self.is_final:
            return False
        self._failed(JobFailed(job_id=str(self.id), reason=reason))
        return True
