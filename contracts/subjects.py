"""Every subject, stream, consumer and bucket name on the bus, in one place (docs/bus.md).

Tokens that come from users (tenant, ids, names) are checked against `TOKEN` so that no input
can inject a wildcard or an extra subject level.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from .errors import name_fault

EVENTS_STREAM = "EVENTS"
TASKS_STREAM = "TASKS"
LOCATIONS_BUCKET = "locations"
PRESENCE_BUCKET = "presence"

EVT = "muster.evt"
TASK = "muster.task"
OPS = "muster.ops"
QUERY = "muster.q"
SHARD = "muster.shard"
"""Requests forwarded by a planner to the holder of a shard (docs/scaling.md)."""

TOKEN = re.compile(r"^[A-Za-z0-9_\-]{1,128}$")
TASK_TOKEN = re.compile(r"^[A-Za-z0-9_\-~]{1,400}$")


class SubjectError(ValueError):
    pass


def token(value: str, what: str) -> str:
    if not isinstance(value, str) or not TOKEN.fullmatch(value):
        fault = name_fault(value, TOKEN.pattern) if isinstance(value, str) else ""
        shown = value if not isinstance(value, str) or len(value) <= 40 else value[:37] + "..."
        raise SubjectError(f"{what} {shown!r} is not a valid name: use 1-128 letters, digits, '-' or '_'"
                           + (f" ({fault})" if fault else ""))
    return value


# -- the log: muster.evt.<tenant>.<aggregate>.<id>[.<sub-id>] -------------------------------


def cluster_events(tenant: str, cluster_id: str) -> str:
    return f"{EVT}.{token(tenant, 'tenant')}.cluster.{token(cluster_id, 'cluster id')}"


def tenant_cluster_events(tenant: str) -> str:
    """Every cluster's events of one tenant (a filter)."""
    return f"{EVT}.{token(tenant, 'tenant')}.cluster.*"


def cluster_name_events(tenant: str, name: str) -> str:
    """Who holds a cluster name in a tenant (names are unique among clusters not deleted): a
    claim is appended only if nothing was appended here since the holder was read."""
    return f"{EVT}.{token(tenant, 'tenant')}.clustername.{token(name, 'cluster name')}"


def job_events(tenant: str, job_id: str) -> str:
    return f"{EVT}.{token(tenant, 'tenant')}.job.{token(job_id, 'job id')}"


JOB_TASKS = "tasks"
"""The last token of a job's records of its tasks (`job_tasks`)."""
JOB_TASK_TYPES = frozenset({"TaskQueued", "TaskCompleted", "TaskAttemptFailed"})
"""The job's events that are about one task: they go on `job_tasks`, the others on `job_events`."""


def job_tasks(tenant: str, job_id: str) -> str:
    """The planner's records of a job's tasks (`JOB_TASK_TYPES`), one token under the job's own
    subject, so that a consumer of job events (`ALL_JOB_EVENTS`) never receives them. Fenced on
    the job's subject, as every append of the job is (`fence_subject`, docs/decisions/0033)."""
    return f"{job_events(tenant, job_id)}.{JOB_TASKS}"


def job_subject(tenant: str, job_id: str, event_type: str) -> str:
    """Where the planner appends a job's event of this type."""
    return job_tasks(tenant, job_id) if event_type in JOB_TASK_TYPES else job_events(tenant, job_id)


def fence_subject(subject: str) -> str:
    """The subject whose last sequence an append on `subject` is fenced on: the job's own for
    its task records (`job_tasks`), the subject itself otherwise."""
    if subject.endswith(f".{JOB_TASKS}"):
        parts = subject.split(".")
        if len(parts) == 6 and parts[3] == "job":
            return subject[: -len(JOB_TASKS) - 1]
    return subject


def job_filters(tenant: str, job_id: str) -> list[str]:
    """Every subject of a job's own history (its events and its task records; a job of a log
    written before the task records had their subject has them all on the first)."""
    return [job_events(tenant, job_id), job_tasks(tenant, job_id)]


CLAIMS = "claims"


def claims_closed(tenant: str, job_id: str, round_: int) -> str:
    """Where a cancel's `ClaimsClosed` goes (docs/decisions/0046): a task message names it
    (`TaskMessage.fence`) and its claim is appended only while nothing is stored here. One per
    cancel round (a retried job's next cancel closes another), two tokens under the job's own
    subject, so no consumer of job events or task records receives it."""
    return f"{job_events(tenant, job_id)}.{CLAIMS}.{int(round_)}"


STEPS = "steps"


def step_closed(tenant: str, job_id: str, task_id: str, attempt: int) -> str:
    """Where the planner's `StepClosed` goes when it ends an attempt with no outcome: a segment's
    follower unrun (its step before failed, or timed out: docs/decisions/0058), or an attempt
    that timed out (docs/decisions/0059). A provisioner stores a claim of the attempt only in one
    batch with a message expecting nothing stored here (the step before's outcome, or its
    `StepOpened`), so an attempt the planner ended is never claimed after. One subject per
    attempt (a retry's follower is another attempt), three tokens under the job's own subject, so
    no consumer of job events or task records receives it."""
    escaped = task_id.replace(".", "~")
    if not TASK_TOKEN.fullmatch(escaped):
        raise SubjectError(f"task id {task_id!r} is not a valid task id")
    return f"{job_events(tenant, job_id)}.{STEPS}.{escaped}.{int(attempt)}"


def step_opened(tenant: str, job_id: str, task_id: str, attempt: int, provisioner_id: str) -> str:
    """Where a provisioner's `StepOpened` goes: the marker stored with a claim that has no step
    outcome before it, expecting the attempt's `step_closed` subject empty (docs/decisions/0059).
    One token under that subject, the last naming the writer (a provisioner may write only
    subjects naming itself, docs/decisions/0009), so no consumer of job events, task records,
    claims or a story's subjects receives it."""
    return f"{step_closed(tenant, job_id, task_id, attempt)}.{token(provisioner_id, 'provisioner id')}"


def layout_events(tenant: str, job_id: str) -> str:
    """Layout requests and answers of one job: written by the planner (request) and the
    solver (answer), so the solver's answer is fenced by the request's sequence."""
    return f"{EVT}.{token(tenant, 'tenant')}.layout.{token(job_id, 'job id')}"


def task_events(tenant: str, job_id: str, task_id: str, provisioner_id: str) -> str:
    """Claims and outcomes of one task of a job, written by provisioners. Task ids are
    `<node>.<action>[.<service>]`; their dots become `~` to stay one subject token. The last
    token is the writing provisioner's id: with auth on, the server lets a provisioner publish
    only on its own (docs/decisions/0009), so the subject says who recorded the outcome."""
    escaped = task_id.replace(".", "~")
    if not TASK_TOKEN.fullmatch(escaped):
        raise SubjectError(f"task id {task_id!r} is not a valid task id")
    return f"{EVT}.{token(tenant, 'tenant')}.task.{token(job_id, 'job id')}.{escaped}.{token(provisioner_id, 'provisioner id')}"


def task_progress(tenant: str, job_id: str, task_id: str, provisioner_id: str) -> str:
    """Lines of a running attempt's output (`TaskProgressed`), beside its task's claims and
    outcomes: one token more, so that a consumer of outcomes (the planner) never receives them."""
    return f"{task_events(tenant, job_id, task_id, provisioner_id)}.{PROGRESS}"


def task_history_filter(tenant: str, job_id: str, task_id: str) -> str:
    """Every claim and outcome of one task, whichever provisioner wrote it."""
    escaped = task_id.replace(".", "~")
    if not TASK_TOKEN.fullmatch(escaped):
        raise SubjectError(f"task id {task_id!r} is not a valid task id")
    return f"{EVT}.{token(tenant, 'tenant')}.task.{token(job_id, 'job id')}.{escaped}.*"


def job_task_events(tenant: str, job_id: str) -> str:
    """Every claim, outcome and progress line of every task of a job."""
    return f"{EVT}.{token(tenant, 'tenant')}.task.{token(job_id, 'job id')}.>"


def job_task_outcomes(tenant: str, job_id: str) -> str:
    """Every claim and outcome of every task of a job (not the progress lines)."""
    return f"{EVT}.{token(tenant, 'tenant')}.task.{token(job_id, 'job id')}.*.*"


def task_event_writer(subject: str) -> str | None:
    """The provisioner id a task event's subject names (None for events written before the
    subject carried it)."""
    parts = subject.split(".")
    writes = len(parts) == 7 or (len(parts) == 8 and parts[7] == PROGRESS)
    return parts[6] if writes and parts[3] == "task" else None


def catalog_events(tenant: str, kind: str, name: str) -> str:
    return f"{EVT}.{token(tenant, 'tenant')}.catalog.{token(kind, 'kind')}.{token(name, 'name')}"


def plan_events(tenant: str, plan_id: str) -> str:
    """A plan a dry run saved (`PlanSaved`), for `ApplyPlan`."""
    return f"{EVT}.{token(tenant, 'tenant')}.plan.{token(plan_id, 'plan id')}"


def provisioner_events(tenant: str, provisioner_id: str) -> str:
    return f"{EVT}.{token(tenant, 'tenant')}.provisioner.{token(provisioner_id, 'provisioner id')}"


def job_history_filters(tenant: str, job_id: str) -> list[str]:
    """Every subject that tells a job's story."""
    return [*job_filters(tenant, job_id), f"{job_events(tenant, job_id)}.{CLAIMS}.*", layout_events(tenant, job_id),
            job_task_events(tenant, job_id)]


# -- governance (docs/governance.md) -------------------------------------------------------------


def governance_events(tenant: str, kind: str, name: str) -> str:
    """An approval rule, policy, subscription or schedule (`kind`: rule, policy, subscription,
    schedule); a schedule's ticks too."""
    return f"{EVT}.{token(tenant, 'tenant')}.gov.{token(kind, 'kind')}.{token(name, 'name')}"


def governance_filter(tenant: str, kind: str = "*") -> str:
    return f"{EVT}.{token(tenant, 'tenant')}.gov.{kind if kind == '*' else token(kind, 'kind')}.*"


def denied_events(tenant: str, job_id: str) -> str:
    """A request the tenant's policies refused (`RequestDenied`): at admission (no job was made), or at its job's approval."""
    return f"{EVT}.{token(tenant, 'tenant')}.denied.{token(job_id, 'job id')}"


def notification_events(tenant: str, subscription: str) -> str:
    """Notifications of one subscription: each one due, and each attempt to deliver it."""
    return f"{EVT}.{token(tenant, 'tenant')}.notify.{token(subscription, 'subscription')}"


ALL_GOVERNANCE_EVENTS = f"{EVT}.*.gov.*.*"
ALL_SCHEDULE_EVENTS = f"{EVT}.*.gov.schedule.*"
ALL_SUBSCRIPTION_EVENTS = f"{EVT}.*.gov.subscription.*"
ALL_NOTIFICATION_EVENTS = f"{EVT}.*.notify.*"
GOV = "muster.gov"


def governance_request(tenant: str, principal: str, verb: str) -> str:
    """Request/reply to the governance service: `muster.gov.<tenant>.<principal>.<verb>`."""
    return f"{GOV}.{token(tenant, 'tenant')}.{token(principal, 'principal')}.{token(verb, 'governance verb')}"


ALL_GOVERNANCE_REQUESTS = f"{GOV}.*.*.*"


ALL_EVENTS = f"{EVT}.>"
BODY = "muster.body"
"""Large event bodies (`muster.bus.bodies`): part `i` of the body of an event on
`muster.evt.<rest>` is on `muster.body.<rest>.<sha256>.<i>` (decision 0057)."""


def body_part(event_subject: str, digest: str, index: int) -> str:
    return f"{BODY}.{event_subject.removeprefix(EVT + '.')}.{digest}.{index}"


def body_filter(event_filter: str) -> str:
    """The subjects of the bodies of the events of `event_filter`."""
    rest = event_filter.removeprefix(EVT + ".")
    return f"{BODY}.{rest}" if rest.endswith(">") else f"{BODY}.{rest}.*.*"


ALL_LAYOUT_EVENTS = f"{EVT}.*.layout.*"
ALL_TASK_EVENTS = f"{EVT}.*.task.>"
ALL_TASK_OUTCOMES = f"{EVT}.*.task.*.*.*"
"""Claims and outcomes of every task (not their progress lines, one token longer)."""
PROGRESS = "progress"
ALL_JOB_EVENTS = f"{EVT}.*.job.*"
"""Every job's own events (not its task records, one token longer: `job_tasks`)."""
ALL_JOB_TASK_RECORDS = f"{EVT}.*.job.*.{JOB_TASKS}"
ALL_CLAIMS_CLOSED = f"{EVT}.*.job.*.{CLAIMS}.*"
ALL_STEPS_CLOSED = f"{EVT}.*.job.*.{STEPS}.*.*"
ALL_CLUSTER_EVENTS = f"{EVT}.*.cluster.*"
ALL_CATALOG_EVENTS = f"{EVT}.*.catalog.>"

# -- identities: muster.evt._auth.<aggregate>.<id> (contracts/identity.py) ----------------------

IDENTITY = "_auth"
ALL_IDENTITY_EVENTS = f"{EVT}.{IDENTITY}.>"


def identity_events(aggregate: str, ident: str) -> str:
    """`tenant.<name>`, `principal.<id>` or `token.<id>` of the pseudo-tenant `_auth`."""
    return f"{EVT}.{IDENTITY}.{token(aggregate, 'identity aggregate')}.{token(ident, 'identity id')}"


# -- task queues: muster.task.<tenant>.<class> -------------------------------------------------


def task_queue(tenant: str, provisioner_class: str) -> str:
    return f"{TASK}.{token(tenant, 'tenant')}.{token(provisioner_class, 'provisioner class')}"


def task_consumer(tenant: str, provisioner_class: str) -> str:
    """One durable consumer per (tenant, class), shared by every worker that serves it:
    work-queue streams allow no two consumers with overlapping filters."""
    return f"workers-{token(tenant, 'tenant')}-{token(provisioner_class, 'provisioner class')}"


# -- request/reply ---------------------------------------------------------------------------
# Every request names its sender: `muster.<ops|q>.<tenant>.<principal>.<...>` and
# `muster.auth.<principal>.<verb>`. With auth on, the server lets a principal publish only with
# its own id (docs/decisions/0009), so a service reads the requester from the subject. Replies
# go to the requester's own inbox, `_INBOX.<principal>.>`.

AUTH = "muster.auth"
ANONYMOUS = "anonymous"
"""The principal of a client that has no token (only where auth is off)."""


def inbox_prefix(principal: str) -> str:
    return f"_INBOX.{token(principal, 'principal')}"


class RequestSubject(NamedTuple):
    tenant: str
    principal: str
    rest: tuple[str, ...]


def parse_request(subject: str) -> RequestSubject:
    """`muster.ops.<tenant>.<principal>.<verb>` or `muster.q.<tenant>.<principal>.<query...>`
    into its parts (SubjectError if it has too few)."""
    parts = subject.split(".")
    if len(parts) < 5 or parts[0] != "muster" or parts[1] not in ("ops", "q"):
        raise SubjectError(f"{subject!r} is not a request subject")
    return RequestSubject(parts[2], parts[3], tuple(parts[4:]))

OPERATION_VERBS = (
    "create", "delete", "expand", "shrink", "add-services", "remove-services", "configure",
    "start", "stop", "restart", "upgrade", "rollback", "pause", "resume", "cancel", "retry", "apply", "extend-lease", "check", "repair",
    "approve", "reject",
)
ALL_OPS = f"{OPS}.>"


def operation(tenant: str, principal: str, verb: str) -> str:
    return f"{OPS}.{token(tenant, 'tenant')}.{token(principal, 'principal')}.{token(verb, 'operation')}"


def shard_operation(shard: int, tenant: str = "*", principal: str = "*", verb: str = "*") -> str:
    """An operation forwarded to the planner holding `shard`: `muster.shard.<n>.ops.<tenant>.<principal>.<verb>`
    (the defaults make the holder's subscription)."""
    return f"{SHARD}.{int(shard)}.ops.{tenant}.{principal}.{verb}"


def job_query(tenant: str, principal: str, job_id: str) -> str:
    return f"{QUERY}.{token(tenant, 'tenant')}.{token(principal, 'principal')}.job.{token(job_id, 'job id')}"


ALL_JOB_QUERIES = f"{QUERY}.*.*.job.*"


def step_outcomes(tenant: str, principal: str) -> str:
    """Request/reply to the planner acting for a job: a segment's steps' outcomes, for the
    provisioner (`principal`) a segment came to again (contracts/steps.py, docs/decisions/0058)."""
    return f"{QUERY}.{token(tenant, 'tenant')}.{token(principal, 'principal')}.steps"


ALL_STEP_OUTCOMES = f"{QUERY}.*.*.steps"


def solve_request(tenant: str, principal: str) -> str:
    """Request/reply to any solver, for dry runs (nothing is logged)."""
    return f"{QUERY}.{token(tenant, 'tenant')}.{token(principal, 'principal')}.solve"


ALL_SOLVE_REQUESTS = f"{QUERY}.*.*.solve"


def auth_request(principal: str, verb: str) -> str:
    """Requests to the auth service (contracts/identity.py: AUTH_VERBS)."""
    return f"{AUTH}.{token(principal, 'principal')}.{token(verb, 'auth verb')}"


ALL_AUTH_REQUESTS = f"{AUTH}.*.*"


def provisioner_drain(provisioner_id: str) -> str:
    """Request/reply to one provisioner: stop taking tasks (only super admins may send it)."""
    return f"{QUERY}.provisioner.{token(provisioner_id, 'provisioner id')}.drain"


def provisioner_held(provisioner_id: str) -> str:
    """Request/reply to one provisioner: the attempts it holds now (only planners may ask,
    after the task queue was lost: docs/decisions/0013)."""
    return f"{QUERY}.provisioner.{token(provisioner_id, 'provisioner id')}.held"


ALL_PROVISIONER_HELD = f"{QUERY}.provisioner.*.held"

PLANNER_METRICS = "muster.metrics.planner"
"""Request/reply: every planner answers with its queue metrics (JSON list, one per tenant and
provisioner class); collect all replies."""


# -- resource pools (docs/pools.md) -----------------------------------------------------------

SYSTEM = "_system"
"""The log's scope for what belongs to no tenant: pools are shared by tenants."""
POOL = "muster.pool"
POOL_VERBS = ("add-hosts", "remove-host", "resolve", "reset", "configure", "request", "cancel", "report", "close", "show",
              "check-callback")


def pool_events(pool: str) -> str:
    """The pool aggregate: hosts, requests and every decision; one writer at a time."""
    return f"{EVT}.{SYSTEM}.pool.{token(pool, 'pool')}"


def pool_request_events(tenant: str, pool: str, request_id: str) -> str:
    """What one requester (a job) asked of a pool and reported back."""
    return f"{EVT}.{token(tenant, 'tenant')}.poolreq.{token(pool, 'pool')}.{token(request_id, 'request id')}"


ALL_POOL_EVENTS = f"{EVT}.{SYSTEM}.pool.*"
ALL_POOL_REQUEST_EVENTS = f"{EVT}.*.poolreq.*.*"


def pool_command(principal: str, pool: str, verb: str) -> str:
    """Request/reply to the pool service (queue group `pools`): `muster.pool.<principal>.<pool>.<verb>`.
    Like the operations, the sender's principal is a subject token the server lets only it use."""
    return f"{POOL}.{token(principal, 'principal')}.{token(pool, 'pool')}.{token(verb, 'pool command')}"


ALL_POOL_COMMANDS = f"{POOL}.*.*.*"
DELIVER = "muster.deliver"
POOL_REQUESTS_DELIVERY = f"{DELIVER}.pool-requests"
"""Where the pool services' shared durable of requesters' facts delivers (queue group
`pool-requests`): a subject every pool service's identity may subscribe to and no principal may
publish on, not the inbox of the one that created the durable (another identity's pool service
may not subscribe there, and every service may publish on `_INBOX.>`, its answers)."""
POOL_LIST = "muster.pools"
ALL_POOL_LISTS = f"{POOL_LIST}.*"


def pool_list(principal: str) -> str:
    """Request/reply `muster.pools.<principal>`: the pool service answers with every pool's summary."""
    return f"{POOL_LIST}.{token(principal, 'principal')}"


def parse_pool_command(subject: str) -> tuple[str, str, str]:
    """`muster.pool.<principal>.<pool>.<verb>` into (principal, pool, verb) (SubjectError if not)."""
    parts = subject.split(".")
    if len(parts) != 5 or f"{parts[0]}.{parts[1]}" != POOL:
        raise SubjectError(f"{subject!r} is not a pool command subject")
    return parts[2], parts[3], parts[4]
