"""Events: facts in the past tense, one JSON document per message in the `EVENTS` stream.

Every event has a `type` literal and a schema version `v`. The message body is exactly the
model's JSON; who/when/which-aggregate travel in headers (see `contracts.records`). An old
version is upcast on read by a `model_validator(mode="before")` on the current model; stored
events are never rewritten.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from contracts.base import DEFERRED

from .approvals import JobApprovalExpired, JobApprovalRequested, JobApproved, JobRejected, PolicyWarned, RequestDenied
from .base import Event as Event  # re-exported: every event module's base
from .catalog import Action
from .governance import GovernanceDeleted, GovernancePut, ScheduleAnswered, ScheduleFired
from .identity import (
    IDENTITY_EVENTS,
    PermissionGranted,
    PermissionRevoked,
    PrincipalCreated,
    PrincipalDisabled,
    TenantCreated,
    TokenIssued,
    TokenRevoked,
)
from .layout import Layout, NodeSpec
from .notifications import NotificationAttempted, NotificationQueued
from .pools import (
    AmbiguityDetected,
    AmbiguityResolved,
    CallbackDelivered,
    HostFailed,
    HostRemoved,
    HostReset,
    HostsAdded,
    HostsConfirmed,
    HostsGranted,
    HostsReleased,
    HostsReleaseStarted,
    PoolConfigured,
    PoolCreated,
    PoolDynamicHostCreated,
    PoolHostsRequested,
    PoolNodesReported,
    PoolRequestCancelled,
    PoolRequestClosed,
    RequestAccepted,
    RequestCancelled,
    RequestClosed,
    RequestExpired,
    RequestRefused,
)
from .tasks import ProvisionerInfo

# -- jobs (written by the planner) -------------------------------------------------------------

JobState = Literal["running", "paused", "succeeded", "failed", "rolling_back", "rolled_back", "needs_attention"]
"""A job's state in the log. Views also show `waiting_for_resources` (running, hosts asked of
a pool and not granted yet) and `paused`."""
TaskState = Literal["planned", "queued", "claimed", "succeeded", "failed", "timed_out", "cancelled"]
"""A task of a job as the views show it (docs/planner.md, "Task states"): `planned` (not queued
yet), `queued`, `claimed` (a worker runs it), `succeeded`, `failed` (its last attempt failed),
`timed_out` (its last attempt had no outcome within the attempt timeout), `cancelled` (never
queued, or queued and never claimed, when the job was cancelled: it never ran)."""
TIMED_OUT_PREFIX = "timed out: no outcome within"
"""How a v1 `TaskAttemptFailed` said that its attempt timed out (in `error` only)."""
STRANDED_PREFIX = "its segment stopped before it:"
"""How the error of a `cancelled` attempt begins when no cancel ended it: the step before it in
its segment did not succeed, so it never ran (docs/decisions/0058)."""
LOST_PREFIX = "provisioner lost:"
"""How the error of a claimed attempt begins when the planner ended it because every process that
claimed it has stopped (its job cancelled; docs/decisions/0054): maybe made, and undone."""

FINAL_STATE_OF: dict[str, JobState] = {
    "JobSucceeded": "succeeded", "JobFailed": "failed", "JobRolledBack": "rolled_back", "JobNeedsAttention": "needs_attention",
}
"""A job's story ends with one of these events, in this state (a failed or rolled-back job may
be retried: `JobRetried` and a later end follow). The one definition of "final"."""
FINAL_JOB_EVENTS: frozenset[str] = frozenset(FINAL_STATE_OF)
FINAL_JOB_STATES: frozenset[str] = frozenset(FINAL_STATE_OF.values())
FENCE_MARKERS: frozenset[str] = frozenset({"TasksRecorded"})
"""Events on a job's subject that are not the job's (no version): they move its fence
(`TasksRecorded`, docs/decisions/0033). Folds and timelines pass over them."""


class JobRequested(Event):
    """v2 adds `trace` and `trace_parent` (docs/tracing.md); a v1 event has neither, and its
    job is traced from where a planner takes it up, in a trace of its own."""

    type: Literal["JobRequested"] = "JobRequested"
    v: Literal[1, 2] = 2
    tenant: str
    job_id: str
    cluster_id: str
    operation: str
    request: dict[str, Any] = Field(description="the accepted command, as sent")
    requested_by: str = "anonymous"
    planner: str = Field(default="", description="the planner instance that owns the job")
    max_attempts: int = Field(default=3, ge=1, description="attempts per task before the job rolls back")
    plan_id: str | None = Field(default=None, description="the saved plan this job runs (`ApplyPlan`)")
    trace: str | None = Field(default=None, description="v2: the job's span as a W3C traceparent, when traced: every span "
                              "of the job is in its trace, the planner's under it")
    trace_parent: str | None = Field(default=None, description="v2: the span of the request the job's span continues "
                                     "(a traceparent), if the requester sent one")
    relayout: int = Field(default=0, ge=0, description="other layouts the job may ask for after a failure past its retries")
    catalog_seq: int | None = Field(
        default=None, ge=0, description="the catalog the job runs with: the tenant's catalog as the log had it at this "
        "sequence (its last catalog event when the job was admitted); every task, layout and rollback of the job reads "
        "it there, whatever is applied meanwhile. None (a job admitted before it was recorded): the planner's current one")


class PlannedTaskRecord(Event):
    id: str
    node: str
    action: Action
    service: str | None = None


class JobPlanned(Event):
    """The job's task DAG. `links` are `[sources, targets]` pairs: every source finishes
    before every target (linear in size where a fan-in would be quadratic as edges). v2 adds
    `previous_stopped` and `stopped` (a v1 plan did not record which services were stopped); v3
    their per-node part (`previous_stopped_on`, `stopped_on`; a v2 plan's state was cluster-wide)."""

    type: Literal["JobPlanned"] = "JobPlanned"
    v: Literal[1, 2, 3] = 3
    job_id: str
    mode: Literal["eager", "staged"] = "eager"
    tasks: list[PlannedTaskRecord]
    links: list[tuple[list[str], list[str]]]
    stages: list[list[str]]
    thrown_in: list[str] = Field(default_factory=list)
    nodes: list[NodeSpec] = Field(default_factory=list, description="the cluster the job builds")
    previous_nodes: list[NodeSpec] = Field(default_factory=list, description="the cluster before the job: the rollback target")
    previous_config: dict[str, Any] = Field(default_factory=dict)
    previous_stopped: list[str] | None = Field(
        default=None, description="v2: the services meant to be stopped before the job (with previous_nodes and "
                                  "previous_config, a later rollback's target); null in v1: not recorded")
    stopped: list[str] | None = Field(
        default=None, description="v2, rollback: the services meant to be stopped once the job succeeds (its target's); "
                                  "null: as the plan's starts and stops imply")
    previous_stopped_on: dict[str, list[str]] | None = Field(
        default=None, description="v3: with previous_stopped, the services meant to be stopped on some nodes only "
                                  "(service -> nodes); null before v3: none")
    stopped_on: dict[str, list[str]] | None = Field(
        default=None, description="v3, rollback: with stopped, the services meant to be stopped on some nodes only")
    batches: list[list[str]] = Field(default_factory=list, description="a rolling change's batches of node ids, in order")
    tolerance: int = Field(default=0, ge=0, description="nodes that may fail before the job stops (rolling changes, checks)")


class RollbackPlanned(Event):
    """A task exhausted its retries (or the job was cancelled): undo what completed."""

    type: Literal["RollbackPlanned"] = "RollbackPlanned"
    v: Literal[1] = 1
    job_id: str
    reason: str
    tasks: list[PlannedTaskRecord]
    links: list[tuple[list[str], list[str]]]
    stages: list[list[str]]


class CleanupQueued(Event):
    """A failed create/confirm left a machine behind: delete it before creating again."""

    type: Literal["CleanupQueued"] = "CleanupQueued"
    v: Literal[1] = 1
    job_id: str
    task_id: str
    node: str
    for_task: str
    attempt: int = 1


class JobPaused(Event):
    type: Literal["JobPaused"] = "JobPaused"
    v: Literal[1] = 1
    job_id: str
    by: str = "anonymous"
    request_id: str | None = Field(default=None, description="the request's idempotency key")


class JobResumed(Event):
    type: Literal["JobResumed"] = "JobResumed"
    v: Literal[1] = 1
    job_id: str
    by: str = "anonymous"
    request_id: str | None = Field(default=None, description="the request's idempotency key")


class TasksRecorded(Event):
    """The planner appended task records of the job (`count` of them, on the job's task
    subject) in the same batch, which had no other event of the job: it moves the job's fence,
    so a planner whose view of the job is older than this batch cannot append to it
    (docs/decisions/0033). Not an event of the job's aggregate (no version): a fold skips it."""

    type: Literal["TasksRecorded"] = "TasksRecorded"
    v: Literal[1] = 1
    job_id: str
    count: int = Field(ge=1, description="task records in the same batch")


class JobAdopted(Event):
    """A planner took over an unfinished job that another planner drove (it restarted, or took
    over a dead planner's share): from this event on, `planner` owns the job."""

    type: Literal["JobAdopted"] = "JobAdopted"
    v: Literal[1] = 1
    job_id: str
    planner: str = Field(description="the planner instance that owns the job from now on")
    previous: str = Field(default="", description="the planner that owned it before")


class JobCancelRequested(Event):
    """Nothing new is dispatched; what is in flight finishes, then the job rolls back. The
    forward tasks not queued yet are `cancelled` from here on (until a `JobRetried`); so are
    the queued ones no provisioner claimed before the cancel's `ClaimsClosed` (decision 46)."""

    type: Literal["JobCancelRequested"] = "JobCancelRequested"
    v: Literal[1] = 1
    job_id: str
    by: str = "anonymous"
    request_id: str | None = Field(default=None, description="the request's idempotency key")


class ClaimsClosed(Event):
    """A cancel's fence (docs/decisions/0046): after this, no provisioner can claim an attempt
    queued in the job's cancel round `round`. Each such attempt's task message names this event's
    subject (`TaskMessage.fence`, `subjects.claims_closed`), and a claim is appended only while
    nothing is stored there, so the planner knows from the log which attempts were claimed
    before it (they run to their end and the rollback undoes them) and ends the others at once."""

    type: Literal["ClaimsClosed"] = "ClaimsClosed"
    v: Literal[1] = 1
    job_id: str
    round: int = Field(ge=0, description="how many cancels the job had before this one (a retried job's attempts "
                                         "are fenced by its next cancel's subject)")


class StepClosed(Event):
    """An attempt the planner ended with no outcome: a segment's follower ended unrun (its step
    before failed, or timed out: docs/decisions/0058), stored in the save that ends it; or an
    attempt that timed out (docs/decisions/0059), stored just before the save that ends it. On
    the attempt's own subject (`subjects.step_closed`). A provisioner stores a claim of the
    attempt only in one batch with a message expecting nothing stored there (the step before's
    outcome, or a `StepOpened`), so the attempt is never claimed after its end: a late copy of
    its segment, or its message taken late, stops there."""

    type: Literal["StepClosed"] = "StepClosed"
    v: Literal[1] = 1
    job_id: str
    task_id: str
    attempt: int = Field(ge=1)


class StepOpened(Event):
    """A provisioner about to claim an attempt with no step outcome before its claim (a lone
    task, a segment's head, a segment taken up after its finished steps: docs/decisions/0059):
    stored on `subjects.step_opened`, expecting the attempt's `StepClosed` subject empty, in one
    atomic batch with the claim (which expects its cancel fence: a message carries one
    expectation). So an attempt the planner has ended (timed out) is never claimed after its
    end. Refused, it is not stored; no consumer receives it (one token under the attempt's
    `StepClosed` subject, naming the provisioner: the only subject there it may write)."""

    type: Literal["StepOpened"] = "StepOpened"
    v: Literal[1] = 1
    job_id: str
    task_id: str
    attempt: int = Field(ge=1)
    provisioner: str
    delivery: int = 1


class JobLayoutRetried(Event):
    """The job's layout failed (a task ran out of attempts, and what it did was rolled back): the
    solver is asked for another one, excluding every layout tried (`LayoutRequested.round`)."""

    type: Literal["JobLayoutRetried"] = "JobLayoutRetried"
    v: Literal[1] = 1
    job_id: str
    round: int = Field(ge=1, description="the layout request this job now waits for: 1 for its first other layout")
    reason: str = Field(description="why the layout failed")
    exclude: list[Layout] = Field(description="every layout tried so far, the failed one last")


class JobRetried(Event):
    """A failed or rolled-back job starts its plan over (`running`); v2: a job that needs attention
    (its rollback failed) runs the rest of its rollback again instead (`rollback`, back to
    `rolling_back`): the rollback's tasks that did not succeed, with fresh attempts."""

    type: Literal["JobRetried"] = "JobRetried"
    v: Literal[1, 2] = 2
    job_id: str
    by: str = "anonymous"
    request_id: str | None = Field(default=None, description="the request's idempotency key")
    catalog_seq: int | None = Field(
        default=None, ge=0, description="the catalog the retried job runs with from here (JobRequested.catalog_seq): the "
        "one of the retry's time, so a script fixed in the catalog is the one run again; None: the job's own")
    rollback: bool = Field(default=False, description=(
        "v2: the job needed attention and retries its rollback's failed (and never run) tasks, not its plan"))
    reason: str = Field(default="", description=(
        "v2, with `rollback`: why the rollback started (`RollbackPlanned.reason`): the job's error again while it runs"))


class JobResourcesRequested(Event):
    """The job asked a pool for hosts (docs/pools.md); it waits for the grant."""

    type: Literal["JobResourcesRequested"] = "JobResourcesRequested"
    v: Literal[1] = 1
    job_id: str
    pool: str
    request_id: str
    hosts: int = Field(ge=1)


class JobResourcesGranted(Event):
    """The pool granted the hosts; the job's nodes take them (`pool_host` in their results)."""

    type: Literal["JobResourcesGranted"] = "JobResourcesGranted"
    v: Literal[1] = 1
    job_id: str
    pool: str
    request_id: str
    assignments: dict[str, str] = Field(description="node id -> host id")


class JobRolledBack(Event):
    type: Literal["JobRolledBack"] = "JobRolledBack"
    v: Literal[1] = 1
    job_id: str
    reason: str


class JobNeedsAttention(Event):
    type: Literal["JobNeedsAttention"] = "JobNeedsAttention"
    v: Literal[1] = 1
    job_id: str
    reason: str


class TaskQueued(Event):
    """v2 adds `after`: the attempt is a segment's step (docs/decisions/0058); a task queued
    alone stays v1."""

    type: Literal["TaskQueued"] = "TaskQueued"
    v: Literal[1, 2] = 1
    job_id: str
    task_id: str
    attempt: int = Field(ge=1)
    node: str
    action: Action
    service: str | None = None
    provisioner_class: str = "default"
    after: str | None = Field(default=None, description=(
        "v2: the task of the same node this one follows in its segment (queued in the same save, sent in one message, "
        "run once that one succeeded, docs/decisions/0058); none on a segment's head or a task queued alone"))


class TaskCompleted(Event):
    """The planner took a task's success into the job (idempotency marker for redelivery)."""

    type: Literal["TaskCompleted"] = "TaskCompleted"
    v: Literal[1] = 1
    job_id: str
    task_id: str
    attempt: int
    result: dict[str, Any] = Field(default_factory=dict)
    ipaddresses: dict[str, str] = Field(default_factory=dict)
    hostname: str = ""


class TaskAttemptFailed(Event):
    """The planner took a task attempt's failure into the job. v2 adds `state`; a v1 event said
    that its attempt timed out only in `error` ("timed out: no outcome within ..."), and reads
    as `timed_out` then. v3 adds `may_have_made`, v4 `permanent`, v5 the state `cancelled`."""

    type: Literal["TaskAttemptFailed"] = "TaskAttemptFailed"
    v: Literal[1, 2, 3, 4, 5] = 5
    job_id: str
    task_id: str
    attempt: int
    error: str
    state: Literal["failed", "timed_out", "cancelled"] = Field(
        default="failed", description="v2: `timed_out` when no outcome came within the attempt timeout (the planner "
                                      "decided so), `failed` when the attempt failed; v5: `cancelled` when the job "
                                      "was cancelled and no provisioner had claimed the attempt before the cancel's "
                                      "`ClaimsClosed` (none can claim it after: it never runs)")
    may_have_made: bool = Field(default=False, description=(
        "v3: the attempt's `TaskFailed.may_have_made`: a failed create whose machine may exist; the rollback deletes "
        "its node"))
    permanent: bool = Field(default=False, description=(
        "v4: the attempt's `TaskFailed.permanent`: no retry can succeed, so the task has no attempt left and stops the "
        "job (its reason says it was not retried)"))

    @model_validator(mode="before")
    @classmethod
    def _upcast(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("v", 1) == 1 and "state" not in data \
                and str(data.get("error", "")).startswith(TIMED_OUT_PREFIX):
            return {**data, "state": "timed_out"}
        return data


class JobSucceeded(Event):
    type: Literal["JobSucceeded"] = "JobSucceeded"
    v: Literal[1] = 1
    job_id: str


class JobFailed(Event):
    type: Literal["JobFailed"] = "JobFailed"
    v: Literal[1] = 1
    job_id: str
    reason: str


# -- layouts (request by the planner, answer by a solver) --------------------------------------


class LayoutRequested(Event):
    """Self-contained: the solver needs nothing but this event (it keeps no state)."""

    type: Literal["LayoutRequested"] = "LayoutRequested"
    v: Literal[1] = 1
    job_id: str
    cluster_id: str
    template: str
    nodes: int = Field(ge=0)
    services: list[str] | None = None
    provider: str | None = None
    hardwaretype: str | None = None
    imagetype: str | None = None
    existing: Layout | None = None
    add_services: list[str] = Field(default_factory=list)
    remove_services: list[str] = Field(default_factory=list)
    exclude: list[Layout] = Field(default_factory=list)
    round: int = Field(default=0, ge=0, description="0 for a job's first layout; n for its n-th other one (JobLayoutRetried)")
    catalog: dict[str, Any] = Field(description="the catalog entities the solver needs (no secrets)")


class LayoutSolved(Event):
    type: Literal["LayoutSolved"] = "LayoutSolved"
    v: Literal[1] = 1
    job_id: str
    layout: Layout
    solver: str = ""
    round: int = Field(default=0, ge=0, description="the request's round")


class LayoutUnsolvable(Event):
    type: Literal["LayoutUnsolvable"] = "LayoutUnsolvable"
    v: Literal[1] = 1
    job_id: str
    kind: Literal["unsolvable", "invalid"]
    message: str
    fields: list[str] = Field(default_factory=list, description=(
        "the request's fields (LayoutRequested: services, add_services, remove_services) the answer is about, when "
        "it is about some (a service that requires one not chosen): where a form shows it; empty otherwise"))
    solver: str = ""
    round: int = Field(default=0, ge=0, description="the request's round")


# -- task attempts (written by provisioners) ---------------------------------------------------


class TaskClaimed(Event):
    type: Literal["TaskClaimed"] = "TaskClaimed"
    v: Literal[1] = 1
    job_id: str
    task_id: str
    attempt: int
    provisioner: str
    worker: str
    delivery: int = 1


class TaskSucceeded(Event):
    type: Literal["TaskSucceeded"] = "TaskSucceeded"
    v: Literal[1] = 1
    job_id: str
    task_id: str
    attempt: int
    provisioner: str
    worker: str
    result: dict[str, Any] = Field(default_factory=dict)
    ipaddresses: dict[str, str] = Field(default_factory=dict)
    hostname: str = ""
    stdout: str = ""
    stderr: str = ""


class TaskFailed(Event):
    """v2 adds `may_have_made`, v3 `permanent`."""

    type: Literal["TaskFailed"] = "TaskFailed"
    v: Literal[1, 2, 3] = 3
    job_id: str
    task_id: str
    attempt: int
    provisioner: str
    worker: str
    error: str
    stdout: str = ""
    stderr: str = ""
    may_have_made: bool = Field(default=False, description=(
        "v2: a failed create whose machine may exist all the same (the cloud's answer was lost, or the create timed out: "
        "`TaskOutcome.may_have_made`)"))
    permanent: bool = Field(default=False, description=(
        "v3: the plugin says no retry can succeed (`TaskOutcome.permanent`: refused credentials, an unknown image): "
        "the planner does not retry the task"))


PROGRESS_LINE_MAX = 500
"""Characters of one `TaskProgressed` line (a longer one is cut, ending in `…`)."""


class TaskProgressed(Event):
    """A line of a running attempt's output, reported by its plugin as it happens (one per
    Ansible task result, for example), on `task.<job>.<task>.<provisioner>.progress`. At most
    so many per attempt, rate-bounded, secrets masked (docs/plugins.md, "Progress"); the
    outcome's `stdout` still has the whole output. `n` counts the attempt's lines from 1;
    `skipped`: lines the rate bound left out just before this one."""

    type: Literal["TaskProgressed"] = "TaskProgressed"
    v: Literal[1] = 1
    job_id: str
    task_id: str
    attempt: int
    provisioner: str
    worker: str
    n: int = Field(ge=1)
    line: str = Field(max_length=PROGRESS_LINE_MAX)
    skipped: int = Field(default=0, ge=0)


# -- provisioners (written by each provisioner, on every tenant it serves) ----------------------


class ProvisionerRegistered(Event):
    """A provisioner process started taking this tenant's tasks."""

    type: Literal["ProvisionerRegistered"] = "ProvisionerRegistered"
    v: Literal[1, 2] = 2
    provisioner: ProvisionerInfo
    ttl_s: float | None = Field(default=None, gt=0, description=(
        "v2: the TTL of this process's presence record, which its lease keeps within (docs/decisions/0054): a "
        "planner that never saw the process's record knows from it how long the process may run on once replaced; "
        "None (v1, an older provisioner): not known"))


class ProvisionerDeregistered(Event):
    """A provisioner process stopped cleanly (a dead one only lets its presence expire)."""

    type: Literal["ProvisionerDeregistered"] = "ProvisionerDeregistered"
    v: Literal[1] = 1
    provisioner_id: str
    session: str
    reason: Literal["drained", "stopped"]
    completed: int = Field(default=0, description="task attempts it finished in this session")


# -- clusters (written by the planner) ---------------------------------------------------------

ClusterStatus = Literal["pending", "active", "incomplete", "failed", "deleting", "deleted", "needs_attention"]


class ClusterRequested(Event):
    type: Literal["ClusterRequested"] = "ClusterRequested"
    v: Literal[1] = 1
    tenant: str
    cluster_id: str
    name: str
    template: str
    provider: str
    config: dict[str, Any] = Field(default_factory=dict)
    job_id: str
    owner: str = Field(default="", description="who asked for the cluster (`%cluster.owner%`)")
    provisioner_class: str | None = Field(
        default=None, description="where its tasks are queued (the template's or provider's class); none: the planner's")


class ClusterNameClaimed(Event):
    """A new cluster took its name in its tenant, on `muster.evt.<tenant>.clustername.<name>`
    (fenced by that subject's last sequence: of two creates racing for a name, one wins). The
    name is free again once the holder is deleted."""

    type: Literal["ClusterNameClaimed"] = "ClusterNameClaimed"
    v: Literal[1] = 1
    name: str
    cluster_id: str
    job_id: str


class ClusterLayoutChanged(Event):
    type: Literal["ClusterLayoutChanged"] = "ClusterLayoutChanged"
    v: Literal[1] = 1
    cluster_id: str
    job_id: str
    nodes: list[NodeSpec]


class ClusterConfigChanged(Event):
    type: Literal["ClusterConfigChanged"] = "ClusterConfigChanged"
    v: Literal[1] = 1
    cluster_id: str
    job_id: str
    config: dict[str, Any]


class NodeResult(BaseModel):
    """What one task said of its node: merged into the node's results (a later key replaces an
    earlier one), its addresses and host name replaced when given."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    node_id: str
    task_id: str
    result: dict[str, Any] = Field(default_factory=dict)
    ipaddresses: dict[str, str] = Field(default_factory=dict)
    hostname: str = ""


class NodeResultsRecorded(Event):
    """Node results the planner took in, in the order taken. v2 holds every result of one wave
    of outcomes (or one pool grant) for the cluster, so a 10,000-node create writes a few hundred
    of these, not two a node (docs/decisions/0034); a v1 event held one node's and reads as a
    list of one."""

    type: Literal["NodeResultsRecorded"] = "NodeResultsRecorded"
    v: Literal[1, 2] = 2
    cluster_id: str
    nodes: list[NodeResult] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _upcast(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("v", 1) == 1 and "nodes" not in data:
            one = {k: data[k] for k in ("node_id", "task_id", "result", "ipaddresses", "hostname") if k in data}
            return {"type": data.get("type", "NodeResultsRecorded"), "v": 2, "cluster_id": data.get("cluster_id"),
                    "nodes": [one]}
        return data


class ClusterLeaseChanged(Event):
    """A cluster's lease (Coopr's leaseduration): set at create, moved by `ExtendLease`. At
    `expires_at` the owning planner starts a delete job (its timer is rebuilt from this)."""

    type: Literal["ClusterLeaseChanged"] = "ClusterLeaseChanged"
    v: Literal[1] = 1
    cluster_id: str
    expires_at: datetime | None = Field(description="None: forever")
    max_at: datetime | None = Field(default=None, description="no extension past this (the template's max)")
    step_s: float = Field(default=0, ge=0, description="an extension adds at most this (0: any)")
    by: str = "anonymous"
    request_id: str | None = Field(default=None, description="the extension's idempotency key")


ServiceState = Literal["running", "stopped", "failed", "unknown"]


class ServiceStateObserved(Event):
    """What a `status` task found: one service's state on one node (after a start or stop, or
    at a check)."""

    type: Literal["ServiceStateObserved"] = "ServiceStateObserved"
    v: Literal[1] = 1
    cluster_id: str
    job_id: str
    task_id: str
    node_id: str
    service: str
    state: ServiceState
    expected: ServiceState | None = Field(default=None, description="what the job needed (after a start: running)")
    detail: str = Field(default="", description="the plugin's words, or why the check failed")


ServiceLife = Literal["installed", "configured", "running", "stopped"]
"""A service on a node as a state machine (docs/planner.md, "Services on nodes")."""


class ServiceChange(Event):
    service: str
    state: Literal["installed", "configured", "running", "stopped", "removed"]
    configured: str | None = Field(default=None, description="the digest of the config it was last configured with "
                                                              "(null: not known)")
    running: str | None = Field(default=None, description="running: the digest of the config it runs with (null: not "
                                                           "known); it is outdated while that is not the cluster's config")
    nodes: list[str]
    before: ServiceLife | None = Field(default=None, description=(
        "v2: the state these nodes' service was in before the job (null: none known: new on the node, or a v1 event)"))


class ServicesMoved(Event):
    """What a job did to services, recorded on the cluster once, when the job ends (not one event
    per task): each (node, service) its succeeded tasks moved, with the state they left it in and
    (v2) the one it was in before, so a reader of the log sees what moved from where. With config
    changes and checks, the services' states are folded from these."""

    type: Literal["ServicesMoved"] = "ServicesMoved"
    v: Literal[1, 2] = 2
    cluster_id: str
    job_id: str
    changes: list[ServiceChange]


StoppedOn = dict[str, list[str]]
"""service -> the nodes it is meant to be stopped on, for services stopped on some of their nodes only."""


class ServicesDesired(Event):
    """The services meant to be stopped on the cluster (a stop job succeeded), or running again
    (a start); the desired state drift is measured against, per (node, service). v2 adds
    `stopped_on`; a v1 event has only cluster-wide entries and reads as such."""

    type: Literal["ServicesDesired"] = "ServicesDesired"
    v: Literal[1, 2] = 2
    cluster_id: str
    job_id: str
    stopped: list[str] = Field(description="services meant to be stopped on every node that has them")
    stopped_on: StoppedOn = Field(default_factory=dict, description=(
        "v2: services meant to be stopped on these nodes only; every other (node, service) of the layout should run"))


class ClusterStatusChanged(Event):
    type: Literal["ClusterStatusChanged"] = "ClusterStatusChanged"
    v: Literal[1] = 1
    cluster_id: str
    status: ClusterStatus
    job_id: str
    reason: str = ""


# -- saved plans (written by the planner, at a dry run) ---------------------------------------


class PlanSaved(Event):
    """A dry run's plan, kept so that `ApplyPlan` runs exactly it (`muster.evt.<t>.plan.<id>`).
    The plan itself is derived again at apply from the same inputs and must have this digest."""

    type: Literal["PlanSaved"] = "PlanSaved"
    v: Literal[1] = 1
    plan_id: str
    job_id: str = Field(description="the job the plan runs as: applying it twice is one job")
    cluster_id: str
    operation: str
    command: dict[str, Any] = Field(description="the request, as the dry run got it")
    layout: Layout | None = Field(default=None, description="the solver's layout, used as it is at apply")
    cluster_version: int = Field(ge=0, description="0 for a cluster the plan creates")
    catalog_version: str
    digest: str = Field(description="sha256 of the plan's tasks, links and target nodes")
    tasks: int = Field(ge=0)
    by: str = "anonymous"


# -- catalog ------------------------------------------------------------------------------------


class CatalogEntityPut(Event):
    type: Literal["CatalogEntityPut"] = "CatalogEntityPut"
    v: Literal[1] = 1
    kind: str
    name: str
    entity: dict[str, Any]
    by: str = "anonymous"


class CatalogEntityDeleted(Event):
    """A catalog entity removed (`muster catalog delete`): no template and no live cluster used it."""

    type: Literal["CatalogEntityDeleted"] = "CatalogEntityDeleted"
    v: Literal[1] = 1
    kind: str
    name: str
    by: str = "anonymous"


AnyEvent = Annotated[
    JobRequested | JobPlanned | RollbackPlanned | CleanupQueued | JobPaused | JobResumed | JobAdopted | TasksRecorded | JobCancelRequested | ClaimsClosed | StepClosed | StepOpened | JobRetried | JobLayoutRetried | JobResourcesRequested | JobResourcesGranted | JobRolledBack | JobNeedsAttention | TaskQueued | TaskCompleted | TaskAttemptFailed | JobSucceeded | JobFailed | LayoutRequested | LayoutSolved | LayoutUnsolvable | TaskClaimed | TaskSucceeded | TaskFailed | TaskProgressed | ProvisionerRegistered | ProvisionerDeregistered | ClusterRequested | ClusterNameClaimed | ClusterLayoutChanged | ClusterConfigChanged | NodeResultsRecorded | ClusterStatusChanged | ClusterLeaseChanged | ServiceStateObserved | ServicesMoved | ServicesDesired | CatalogEntityPut | CatalogEntityDeleted | PlanSaved
    | PoolCreated | PoolConfigured | HostsAdded | AmbiguityDetected | AmbiguityResolved | HostRemoved | HostReset
    | RequestAccepted | RequestRefused | HostsGranted | HostsConfirmed | HostsReleaseStarted | HostsReleased | HostFailed
    | RequestCancelled | RequestExpired | RequestClosed | CallbackDelivered | PoolHostsRequested | PoolRequestCancelled
    | PoolNodesReported | PoolDynamicHostCreated | PoolRequestClosed | TenantCreated | PrincipalCreated | PrincipalDisabled | TokenIssued | TokenRevoked | PermissionGranted | PermissionRevoked
    | JobApprovalRequested | JobApproved | JobRejected | JobApprovalExpired | PolicyWarned | RequestDenied
    | GovernancePut | GovernanceDeleted | ScheduleFired | ScheduleAnswered | NotificationQueued | NotificationAttempted,
    Field(discriminator="type"),
]

EVENT_ADAPTER: TypeAdapter[Any] = TypeAdapter(AnyEvent, config=DEFERRED)

EVENT_TYPES: dict[str, type[BaseModel]] = {
    cls.model_fields["type"].default: cls
    for cls in [*Event.__subclasses__(), *IDENTITY_EVENTS]
    if "type" in cls.model_fields
}


def parse_event(data: bytes | str) -> Any:
    """Decode one event message body (raises pydantic.ValidationError naming the field)."""
    return EVENT_ADAPTER.validate_json(data)
