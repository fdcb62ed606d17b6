"""Commands: requests in the imperative, sent request/reply to `muster.ops.<tenant>.<verb>`.

Every request gets one reply: `Accepted` (with the job id) or `Rejected` (with a reason a person
can act on). A `request_id` is an idempotency key: the same key from the same tenant always maps
to the same job, so a retried request never creates a second job.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter

from .layout import Layout
from .limits import MAX_CONFIG_BYTES, max_json_bytes

MAX_CLUSTER_SIZE = 10_000
ID = r"^[A-Za-z0-9_\-]{1,128}$"
Config = Annotated[dict[str, Any], AfterValidator(max_json_bytes(MAX_CONFIG_BYTES))]
"""A cluster config: at most `MAX_CONFIG_BYTES` as JSON (contracts/limits.py)."""


class Command(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    request_id: str | None = Field(default=None, pattern=ID, description="idempotency key")
    requested_by: str = Field(default="anonymous", max_length=128)


class CreateCluster(Command):
    type: Literal["CreateCluster"] = "CreateCluster"
    v: Literal[1] = 1
    name: str = Field(pattern=ID)
    template: str = Field(min_length=1, max_length=128)
    nodes: int = Field(ge=1, le=MAX_CLUSTER_SIZE)
    services: list[Annotated[str, Field(max_length=128)]] | None = Field(default=None, max_length=1000)
    provider: str | None = Field(default=None, max_length=128)
    hardwaretype: str | None = Field(default=None, max_length=128)
    imagetype: str | None = Field(default=None, max_length=128)
    config: Config = Field(default_factory=dict)
    dry_run: bool = Field(default=False, description="answer with the layout and plan; execute nothing")


class ClusterCommand(Command):
    cluster_id: str = Field(pattern=ID)
    dry_run: bool = Field(default=False, description="answer with the layout and plan; execute nothing")


class DeleteCluster(ClusterCommand):
    type: Literal["DeleteCluster"] = "DeleteCluster"
    v: Literal[1] = 1


class ExpandCluster(ClusterCommand):
    """Grow to `nodes` nodes in total; existing nodes are not touched."""

    type: Literal["ExpandCluster"] = "ExpandCluster"
    v: Literal[1] = 1
    nodes: int = Field(ge=1, le=MAX_CLUSTER_SIZE, description="the new total")


class ShrinkCluster(ClusterCommand):
    """Shrink to `nodes` nodes in total; only removes nodes."""

    type: Literal["ShrinkCluster"] = "ShrinkCluster"
    v: Literal[1] = 1
    nodes: int = Field(ge=1, le=MAX_CLUSTER_SIZE, description="the new total")


ServiceList = list[Annotated[str, Field(max_length=128)]]


class AddServices(ClusterCommand):
    type: Literal["AddServices"] = "AddServices"
    v: Literal[1] = 1
    services: ServiceList = Field(min_length=1, max_length=1000)


class RemoveServices(ClusterCommand):
    type: Literal["RemoveServices"] = "RemoveServices"
    v: Literal[1] = 1
    services: ServiceList = Field(min_length=1, max_length=1000)


class ConfigureCluster(ClusterCommand):
    """Replace the cluster's config; with `restart`, services are stopped and started again."""

    type: Literal["ConfigureCluster"] = "ConfigureCluster"
    v: Literal[1] = 1
    config: Config
    restart: bool = False


class StartServices(ClusterCommand):
    type: Literal["StartServices"] = "StartServices"
    v: Literal[1] = 1
    services: ServiceList | None = Field(default=None, description="default: all")


class StopServices(ClusterCommand):
    type: Literal["StopServices"] = "StopServices"
    v: Literal[1] = 1
    services: ServiceList | None = Field(default=None, description="default: all")


class RestartServices(ClusterCommand):
    type: Literal["RestartServices"] = "RestartServices"
    v: Literal[1] = 1
    services: ServiceList | None = Field(default=None, description="default: all")


class UpgradeService(ClusterCommand):
    """Run the service's current catalog definition on its nodes: stop, install, configure,
    start."""

    type: Literal["UpgradeService"] = "UpgradeService"
    v: Literal[1] = 1
    service: str = Field(max_length=128)


class RollbackCluster(ClusterCommand):
    """Bring the cluster back to its layout and config as they were before job `to_job`."""

    type: Literal["RollbackCluster"] = "RollbackCluster"
    v: Literal[1] = 1
    to_job: str = Field(pattern=ID)


class JobCommand(Command):
    job_id: str = Field(pattern=ID)


class PauseJob(JobCommand):
    """Dispatch nothing new; tasks in flight finish."""

    type: Literal["PauseJob"] = "PauseJob"
    v: Literal[1] = 1


class ResumeJob(JobCommand):
    type: Literal["ResumeJob"] = "ResumeJob"
    v: Literal[1] = 1


class CancelJob(JobCommand):
    """Stop the job and roll back what it did."""

    type: Literal["CancelJob"] = "CancelJob"
    v: Literal[1] = 1


class RetryJob(JobCommand):
    """Run a failed job's remaining tasks again (fresh attempts)."""

    type: Literal["RetryJob"] = "RetryJob"
    v: Literal[1] = 1


AnyCommand = Annotated[
    CreateCluster | DeleteCluster | ExpandCluster | ShrinkCluster | AddServices | RemoveServices | ConfigureCluster | StartServices | StopServices | RestartServices | UpgradeService | RollbackCluster | PauseJob | ResumeJob | CancelJob | RetryJob,
    Field(discriminator="type"),
]
COMMAND_ADAPTER: TypeAdapter[Any] = TypeAdapter(AnyCommand)

VERB_OF: dict[str, str] = {
    "CreateCluster": "create", "DeleteCluster": "delete", "ExpandCluster": "expand", "ShrinkCluster": "shrink",
    "AddServices": "add-services", "RemoveServices": "remove-services", "ConfigureCluster": "configure",
    "StartServices": "start", "StopServices": "stop", "RestartServices": "restart", "UpgradeService": "upgrade",
    "RollbackCluster": "rollback", "PauseJob": "pause", "ResumeJob": "resume", "CancelJob": "cancel", "RetryJob": "retry",
}


class Accepted(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["Accepted"] = "Accepted"
    v: Literal[1] = 1
    job_id: str
    cluster_id: str
    duplicate: bool = Field(default=False, description="true if this request_id was seen before")


class DryRun(BaseModel):
    """The answer to a dry run: what would be built and how; nothing was executed or logged."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["DryRun"] = "DryRun"
    v: Literal[1] = 1
    layout: Layout | None = None
    plan: dict[str, Any] = Field(description="tasks, edges and stages, as `muster plan` prints them")


class Rejected(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["Rejected"] = "Rejected"
    v: Literal[1] = 1
    reason: str


Reply = Annotated[Accepted | Rejected | DryRun, Field(discriminator="type")]
REPLY_ADAPTER: TypeAdapter[Any] = TypeAdapter(Reply)
