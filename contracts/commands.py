"""Commands: requests in the imperative, sent request/reply to `muster.ops.<tenant>.<verb>`.

Every request gets one reply: `Accepted` (with the job id) or `Rejected` (with a reason a person
can act on). A `request_id` is an idempotency key: the same key from the same tenant always maps
to the same job, so a retried request never creates a second job.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

MAX_CLUSTER_SIZE = 10_000
ID = r"^[A-Za-z0-9_\-]{1,128}$"


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
    config: dict[str, Any] = Field(default_factory=dict)


class DeleteCluster(Command):
    type: Literal["DeleteCluster"] = "DeleteCluster"
    v: Literal[1] = 1
    cluster_id: str = Field(pattern=ID)


AnyCommand = Annotated[Union[CreateCluster, DeleteCluster], Field(discriminator="type")]
COMMAND_ADAPTER: TypeAdapter[Any] = TypeAdapter(AnyCommand)

VERB_OF: dict[str, str] = {"CreateCluster": "create", "DeleteCluster": "delete"}


class Accepted(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["Accepted"] = "Accepted"
    v: Literal[1] = 1
    job_id: str
    cluster_id: str
    duplicate: bool = Field(default=False, description="true if this request_id was seen before")


class Rejected(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["Rejected"] = "Rejected"
    v: Literal[1] = 1
    reason: str


Reply = Annotated[Union[Accepted, Rejected], Field(discriminator="type")]
REPLY_ADAPTER: TypeAdapter[Any] = TypeAdapter(Reply)
