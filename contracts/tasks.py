"""The task message a provisioner receives on `TASKS`, and what a plugin returns.

A task carries everything a plugin needs (Coopr's SchedulableTask, coopr-facts §5.2): the node,
the node's accumulated results from earlier tasks (provider id, addresses, host keys...), and a
`nodes` map of every node in the cluster. The map travels by reference (`nodes_ref`, see
`contracts.nodemaps`): the provisioner puts it back before a plugin sees the task, so a task
message stays a few KB however large the cluster. Sensitive provider fields are *not* in it: the
provisioner resolves them locally from its secrets file (docs/secrets.md), so they never reach
the bus or the log.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .catalog import Action, ServiceAction

OUTPUT_LIMIT = 4096
"""Bytes of stdout/stderr kept per task attempt in `TaskFailed`/`TaskSucceeded` (the head and
the tail are kept; Coopr kept only 2048 bytes from the start)."""


def trim_output(text: str, limit: int = OUTPUT_LIMIT) -> str:
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text
    half = limit // 2
    head = data[:half].decode("utf-8", "ignore")
    tail = data[-half:].decode("utf-8", "ignore")
    return f"{head}\n...[{len(data) - limit} bytes trimmed]...\n{tail}"


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class NodeInfo(_Wire):
    """What every task knows about a node (Coopr's NodeProperties)."""

    id: str
    hostname: str
    nodenum: int
    hardwaretype: str
    imagetype: str
    flavor: str = ""
    image: str = ""
    sshuser: str = ""
    services: list[str] = Field(default_factory=list)
    automators: list[str] = Field(default_factory=list)
    ipaddresses: dict[str, str] = Field(default_factory=dict)


class ServiceRef(_Wire):
    name: str
    action: ServiceAction


class ProviderRef(_Wire):
    name: str
    providertype: str
    # Non-sensitive fields only; see the module docstring.
    fields: dict[str, Any] = Field(default_factory=dict)


class TaskStep(_Wire):
    """One task attempt as a provisioner runs it: a message's head, or a step of a segment
    (`TaskMessage.then`)."""

    type: Literal["Task"] = "Task"
    v: Literal[1, 2] = 2
    tenant: str
    cluster_id: str
    job_id: str
    task_id: str
    attempt: int = Field(ge=1)
    action: Action
    provisioner_class: str = "default"
    node: NodeInfo
    service: ServiceRef | None = None
    provider: ProviderRef
    results: dict[str, Any] = Field(default_factory=dict, description="this node's accumulated results")
    nodes: dict[str, NodeInfo] = Field(
        default_factory=dict,
        description="every node of the cluster; on the bus empty, with `nodes_ref` naming the stored map, which the "
        "provisioner resolves before a plugin sees the task",
    )
    nodes_ref: str | None = Field(
        default=None, description="key of the nodes map's manifest in the KV bucket `nodemaps` (contracts/nodemaps.py)"
    )
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="cluster config, as the template and requests set it; the provisioner expands its macros "
        "(`%host.service.x%`...) before a plugin sees the task",
    )
    cluster_owner: str = Field(default="", description="who created the cluster (the `%cluster.owner%` macro)")
    timeout_s: float = Field(default=600, gt=0, description="the action's time limit")
    avoid: list[str] = Field(
        default_factory=list,
        description="provisioners that ran earlier attempts: they let this attempt go on its first "
        "deliveries so that another provisioner can take it, and run it only if nobody else does",
    )
    fence: str | None = Field(
        default=None,
        description="v2: the subject of the job's cancel fence (`ClaimsClosed`, docs/decisions/0046): the claim is "
        "appended only while nothing is stored there, so an attempt of a job cancelled meanwhile is never claimed nor "
        "run; none on a rollback's tasks, which a cancel never stops",
    )
    trace: str | None = Field(
        default=None,
        description="a segment's step after its head (`TaskMessage.then`) of a traced job: its attempt's span (a W3C "
        "traceparent), which its claim and run go in, as a message's `traceparent` header names its head's "
        "(docs/tracing.md); none on a head",
    )


class TaskMessage(TaskStep):
    """A task message on the queue: one attempt, or a segment's steps from its head on
    (docs/decisions/0058)."""

    then: list[TaskStep] = Field(default_factory=list, description=(
        "the rest of a segment (docs/decisions/0058): tasks of the same node, each run once the one before it "
        "succeeded, its claim stored with that one's outcome"))
    segment: str | None = Field(default=None, description=(
        "a segment's message: its first head's `<task>.<attempt>`, the queue's de-duplication key of every message of "
        "the segment (one sent again from a later step too)"))
    again: bool = Field(default=False, description=(
        "a segment sent again by its planner (a restart, a takeover, a lost queue or publish): its provisioner reads "
        "its steps' outcomes first and starts after the last success, as on a redelivery"))


class TaskOutcome(_Wire):
    """What a plugin returns. `ok=False` is a failure of the action, reported, not raised."""

    ok: bool
    result: dict[str, Any] = Field(default_factory=dict, description="merged into the node's results")
    ipaddresses: dict[str, str] = Field(default_factory=dict)
    hostname: str = ""
    stdout: str = ""
    stderr: str = ""
    error: str = ""
    may_have_made: bool = Field(default=False, description=(
        "a failed create only: the machine may exist all the same (the cloud did it and its answer was lost, or the "
        "create timed out); the job's rollback then deletes the node, which has no providerid"))
    permanent: bool = Field(default=False, description=(
        "the failure cannot succeed on a retry (the cloud refused the credentials, no such image or size, parameters "
        "it refuses as invalid): the planner does not try the task again, and the job's reason says so; a failure "
        "that may pass (a timeout, an endpoint that does not answer) leaves it false and is retried"))


class ProvisionerInfo(_Wire):
    """Who a provisioner is, as it registers (recorded as `ProvisionerRegistered`, and inside
    its presence record)."""

    id: str
    session: str = Field(description="unique per process start: tells two lives of one id apart")
    host: str
    pid: int
    capacity: int = Field(ge=1, description="tasks it runs at once")
    provisioner_class: str
    tenants: list[str]
    plugins: list[dict[str, Any]] = Field(
        default_factory=list, description="`PluginRegistry.describe()`: name, type, version, actions, fields"
    )
    started_at: datetime


class ProvisionerPresence(_Wire):
    """The value of key `provisioner.<id>` in the `presence` KV bucket. The provisioner
    rewrites it every `ttl_s / 3` seconds; it expires `ttl_s` after the last write, so a dead
    provisioner disappears on its own. A clean shutdown deletes it."""

    type: Literal["ProvisionerPresence"] = "ProvisionerPresence"
    v: Literal[1] = 1
    info: ProvisionerInfo
    in_flight: int = 0
    completed: int = 0
    draining: bool = False
    ttl_s: float
    refreshed_at: datetime


class HeldAttempts(_Wire):
    """The answer on `muster.q.provisioner.<id>.held`: the attempts the provisioner holds now,
    as `<job>.<task>.<attempt>`, from the moment it takes a task until its outcome is stored
    or the task goes back to the queue. A planner asks every live provisioner after the task
    queue was lost (docs/decisions/0013), and queues again only what none of them holds."""

    type: Literal["HeldAttempts"] = "HeldAttempts"
    v: Literal[1] = 1
    provisioner: str
    attempts: list[str] = Field(default_factory=list)


class DrainProvisioner(BaseModel):
    """The body of a drain request on `muster.q.provisioner.<id>.drain` (only super admins may
    send one): it must name the provisioner it is sent to, so a stray or garbage message drains
    nothing."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    type: Literal["DrainProvisioner"] = "DrainProvisioner"
    v: Literal[1] = 1
    provisioner: str = Field(min_length=1, max_length=128)
    reason: str = Field(default="", max_length=500)
