"""Commands to a pool service: core NATS request/reply on `muster.pool.<principal>.<pool>.<verb>`.

Administrators add, remove, reset and resolve hosts and set the pool's terms; requesters that
are not the planner (the planner writes its requests to the log) ask for hosts, report on them,
cancel and close. Every command gets one reply: `PoolAnswer`, or `Rejected` with a reason a
person can act on. Who asks is the subject's principal (the server lets only it use the
subject); `requested_by` names it only on a bus without authorization
(`services/pool/app.py: principal_of`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from contracts.base import DEFERRED

from .pools import HOST_ID, ID, Callback, HostSpec, PoolRequest, PoolTerms

MAX_HOSTS_PER_COMMAND = 500
ANY_POOL = "any"
"""The pool token of a command that is about no pool (`CheckCallback`)."""


class PoolCommand(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    requested_by: str = Field(default="anonymous", max_length=128)


class AddHosts(PoolCommand):
    type: Literal["AddHosts"] = "AddHosts"
    v: Literal[1] = 1
    hosts: list[HostSpec] = Field(min_length=1, max_length=MAX_HOSTS_PER_COMMAND)


class RemoveHost(PoolCommand):
    type: Literal["RemoveHost"] = "RemoveHost"
    v: Literal[1] = 1
    host_id: str = Field(pattern=HOST_ID)
    reason: str = Field(default="", max_length=512)


class ResetHost(PoolCommand):
    type: Literal["ResetHost"] = "ResetHost"
    v: Literal[1] = 1
    host_id: str = Field(pattern=HOST_ID)


class ResolveHost(PoolCommand):
    type: Literal["ResolveHost"] = "ResolveHost"
    v: Literal[1] = 1
    host_id: str = Field(pattern=HOST_ID)
    use_claim: int | None = Field(default=None, ge=1, description="keep this registration (1 = the first)")
    drop: bool = Field(default=False, description="remove the host from the pool instead")


class ConfigurePool(PoolCommand):
    type: Literal["ConfigurePool"] = "ConfigurePool"
    v: Literal[1] = 1
    terms: PoolTerms


class RequestHosts(PoolCommand):
    type: Literal["RequestHosts"] = "RequestHosts"
    v: Literal[1] = 1
    request: PoolRequest


class CancelRequest(PoolCommand):
    type: Literal["CancelRequest"] = "CancelRequest"
    v: Literal[1] = 1
    tenant: str = Field(pattern=ID)
    request_id: str = Field(pattern=ID)
    reason: str = Field(default="", max_length=512)


class ReportNodes(PoolCommand):
    type: Literal["ReportNodes"] = "ReportNodes"
    v: Literal[1] = 1
    tenant: str = Field(pattern=ID)
    request_id: str = Field(pattern=ID)
    cluster_id: str = Field(pattern=ID)
    status: Literal["confirmed", "releasing", "released", "failed"]
    node_ids: list[Annotated[str, Field(pattern=ID)]] = Field(min_length=1, max_length=10_000)
    reason: str = Field(default="", max_length=512)


class CloseRequest(PoolCommand):
    type: Literal["CloseRequest"] = "CloseRequest"
    v: Literal[1] = 1
    tenant: str = Field(pattern=ID)
    request_id: str = Field(pattern=ID)
    outcome: str = Field(default="", max_length=512)


class ShowPool(PoolCommand):
    type: Literal["ShowPool"] = "ShowPool"
    v: Literal[1] = 1
    hosts: bool = Field(default=True, description="include every host")


class CheckCallback(PoolCommand):
    """May the pool service send to this callback? Asked by the planner before it accepts a
    create or expand that names one (decision 38), on `muster.pool.<principal>.any.check-callback`
    (`ANY_POOL`: the rule is the service's, the same for every pool): `Rejected` names the rule
    and the operator's setting; a `PoolAnswer`'s `message` is a warning, if any (the host does
    not resolve now)."""

    type: Literal["CheckCallback"] = "CheckCallback"
    v: Literal[1] = 1
    callback: Callback
    tenant: str = Field(default="", pattern=r"^[A-Za-z0-9_\-]{0,128}$",
                        description="whose callback: the operator's entries for that tenant (`--webhook-allow acme=HOST`) "
                                    "count too; '' (an older planner): only the entries of every tenant")


AnyPoolCommand = Annotated[
    AddHosts | RemoveHost | ResetHost | ResolveHost | ConfigurePool | RequestHosts | CancelRequest | ReportNodes | CloseRequest | ShowPool
    | CheckCallback,
    Field(discriminator="type"),
]
POOL_COMMAND_ADAPTER: TypeAdapter[Any] = TypeAdapter(AnyPoolCommand, config=DEFERRED)

VERB_OF: dict[str, str] = {
    "AddHosts": "add-hosts", "RemoveHost": "remove-host", "ResetHost": "reset", "ResolveHost": "resolve",
    "ConfigurePool": "configure", "RequestHosts": "request", "CancelRequest": "cancel", "ReportNodes": "report",
    "CloseRequest": "close", "ShowPool": "show", "CheckCallback": "check-callback",
}


class PoolAnswer(BaseModel):
    """What a pool service says back. For a request: `state` granted (with `hosts`), waiting
    (with `position`, 1 = next) or known (asked before: the same answer as then)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    type: Literal["PoolAnswer"] = "PoolAnswer"
    v: Literal[1] = 1
    message: str = ""
    changed: list[str] = Field(default_factory=list, description="hosts or requests the command changed")
    state: str = ""
    position: int | None = None
    hosts: list[dict[str, Any]] = Field(default_factory=list, description="granted hosts: node, host, address, port, user, host keys")
    view: dict[str, Any] | None = Field(default=None, description="ShowPool: the pool")
