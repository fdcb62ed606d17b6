"""Resource pools: hosts, requests for hosts, and the facts of both (docs/pools.md).

Two kinds of subject carry them:
- `muster.evt._system.pool.<pool>`: the pool aggregate, written only by a pool service (one
  writer at a time, fenced by expected sequence). Every decision is here: hosts added, frozen
  as ambiguous, granted, released, failed, reset; requests accepted, refused, cancelled, expired.
- `muster.evt.<tenant>.poolreq.<pool>.<request-id>`: what a requester (the planner, or the pool
  service on behalf of a caller) asks or reports: hosts wanted, confirmed, being released,
  released, failed; a cancel; the end. The pool service follows these and decides.

Every fact and decision carries `by`, the principal it was made for.

Longer than most modules: the pool's entities and the two kinds of events that carry them are
read together (an event is mostly its entities).
"""

from __future__ import annotations

import base64
import binascii
import re
import struct
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .base import Event

ID = r"^[A-Za-z0-9_\-]{1,128}$"
HOST_ID = r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$"
ADDRESS = r"^[A-Za-z0-9.\-:%\[\]]{1,253}$"
LABEL = r"^[A-Za-z0-9_.:/=\-]{1,64}$"
PROPERTY = r"^[a-z][a-z0-9_]{0,31}$"
MAX_HOSTS_PER_EVENT = 200
"""Bound on hosts in one `HostsAdded` (an add of more is several events in one atomic batch)."""

HOST_KEY_ALGORITHMS = (
    "ssh-ed25519", "ssh-ed448", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
)
HostState = Literal["unassigned", "assigning", "assigned", "unassigning", "error"]
MEMORY_UNITS = {"": 1, "m": 1, "mb": 1, "mib": 1, "g": 1024, "gb": 1024, "gib": 1024, "t": 1024**2, "tb": 1024**2, "tib": 1024**2}
_MEMORY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")


def parse_memory(value: Any) -> int:
    """`16G`, `16384M`, `16GiB` or a bare number of MiB -> MiB."""
    if isinstance(value, bool):
        raise ValueError("memory must be a size like 16G or a number of MiB")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError("memory must not be negative")
        return int(value)
    m = _MEMORY.match(str(value))
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in MEMORY_UNITS:
        raise ValueError(f"memory {value!r} is not a size: use a number of MiB or a unit M, G or T (e.g. 16G)")
    return int(float(m.group(1)) * MEMORY_UNITS[unit])


def normalize_host_key(line: str) -> str:
    """'algorithm base64 [comment]' -> 'algorithm base64', checked: a known algorithm, valid
    base64, and a key blob that names the same algorithm (the SSH wire format)."""
    parts = str(line).split()
    if len(parts) < 2:
        raise ValueError(f"host key {line[:40]!r}... is not 'algorithm base64' (as in known_hosts or ssh-keyscan)")
    algorithm, data = parts[0], parts[1]
    if algorithm not in HOST_KEY_ALGORITHMS:
        raise ValueError(f"host key algorithm {algorithm!r} is not one of {', '.join(HOST_KEY_ALGORITHMS)}")
    try:
        blob = base64.b64decode(data, validate=True)
        (n,) = struct.unpack(">I", blob[:4])
        named = blob[4 : 4 + n].decode("ascii")
    except (binascii.Error, struct.error, UnicodeDecodeError):
        raise ValueError(f"host key of type {algorithm} is not valid base64 key data") from None
    if named != algorithm:
        raise ValueError(f"host key says {algorithm} but its data is a {named or 'malformed'} key")
    return f"{algorithm} {data}"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class HostProperties(_Model):
    """What a host offers; hardware types ask for it (`cpu >= 8, labels contains ssd`)."""

    cpu: int = Field(default=1, ge=1, le=1_000_000)
    memory: int = Field(default=0, ge=0, description="MiB; given as 16G, 16384M or a number of MiB")
    labels: list[Annotated[str, Field(pattern=LABEL)]] = Field(default_factory=list, max_length=64)
    extra: dict[Annotated[str, Field(pattern=PROPERTY)], str | int | float] = Field(
        default_factory=dict, max_length=32, description="more properties to match on (arch, zone...)"
    )

    @field_validator("memory", mode="before")
    @classmethod
    def _memory(cls, value: Any) -> int:
        return parse_memory(value)

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: list[str]) -> list[str]:
        return sorted(set(value))

    @field_validator("extra")
    @classmethod
    def _extra(cls, value: dict[str, Any]) -> dict[str, Any]:
        reserved = {"cpu", "memory", "labels"} & set(value)
        if reserved:
            raise ValueError(f"extra properties may not be named {sorted(reserved)}")
        return value


class HostSpec(_Model):
    """A host as registered: how to reach it, how to know it is the right one, what it offers."""

    id: str = Field(pattern=HOST_ID, description="unique in the pool (e.g. the FQDN)")
    address: str = Field(pattern=ADDRESS)
    port: int = Field(default=22, ge=1, le=65535)
    user: str = Field(default="root", pattern=r"^[a-z_][a-z0-9_\-]{0,31}$")
    host_keys: list[str] = Field(min_length=1, max_length=8, description="'algorithm base64', as ssh-keyscan prints")
    properties: HostProperties = Field(default_factory=HostProperties)
    kind: Literal["static", "dynamic"] = Field(default="static", description="dynamic: made by a provider, returned at release")
    provider: str = Field(default="", max_length=128, description="dynamic hosts: the provider that made it")

    @field_validator("host_keys", mode="before")
    @classmethod
    def _keys(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            return value
        return sorted({normalize_host_key(v) for v in value})

    def facts(self) -> tuple[str, int, tuple[str, ...]]:
        """What must agree when the same host is registered twice."""
        return (self.address.lower(), self.port, tuple(self.host_keys))


class Holder(_Model):
    """Who holds a host: one node of one cluster, for one request."""

    tenant: str
    cluster_id: str
    node_id: str
    request_id: str


class NodeNeed(_Model):
    node_id: str = Field(pattern=ID)
    hardwaretype: str = Field(default="", max_length=128)
    requires: str = Field(default="", max_length=512, description="host properties, e.g. 'cpu >= 8, labels contains ssd'")


class Callback(_Model):
    """Where to say that hosts were granted and that the request ended: exactly one of a
    subject (`muster.cb.<tenant>.…`) or an http(s) URL (POSTed, with retries)."""

    subject: str | None = Field(default=None, max_length=256, pattern=r"^[A-Za-z0-9_\-.]+$")
    url: str | None = Field(default=None, max_length=2048, pattern=r"^https?://[^\s@]+$")

    @model_validator(mode="after")
    def _one(self) -> Callback:
        if (self.subject is None) == (self.url is None):
            raise ValueError("a callback is exactly one of 'subject' or 'url'")
        return self


class PoolRequest(_Model):
    request_id: str = Field(pattern=ID, description="the requester's key; a job's requests use its job id")
    pool: str = Field(pattern=ID)
    tenant: str = Field(pattern=ID)
    cluster_id: str = Field(pattern=ID)
    job_id: str = Field(default="", pattern=r"^[A-Za-z0-9_\-]{0,128}$")
    nodes: list[NodeNeed] = Field(min_length=1, max_length=10_000)
    urgency: int = Field(default=50, ge=0, le=1000, description="Hedeby's urgency: higher is more urgent")
    deadline: datetime | None = Field(default=None, description="fail the request if not granted by then")
    callback: Callback | None = None
    by: str = Field(default="anonymous", max_length=128)

    @model_validator(mode="after")
    def _check(self) -> PoolRequest:
        ids = [n.node_id for n in self.nodes]
        if len(set(ids)) != len(ids):
            raise ValueError("a node is listed twice in the request")
        if self.deadline is not None and self.deadline.tzinfo is None:
            raise ValueError("deadline needs a time zone (e.g. 2030-01-01T12:00:00Z)")
        if self.callback and self.callback.subject and not self.callback.subject.startswith(f"muster.cb.{self.tenant}."):
            raise ValueError(f"a callback subject must start with muster.cb.{self.tenant}.")
        return self


class Assignment(_Model):
    node_id: str
    host_id: str


class TenantTerms(_Model):
    priority: int = Field(default=1, ge=0, le=1000)
    max_nodes: int | None = Field(default=None, ge=0)
    max_clusters: int | None = Field(default=None, ge=0)


class PoolTerms(_Model):
    """Policy and quotas of a pool, set by an administrator."""

    policy: str = Field(default="urgency-x-priority", max_length=64)
    default_priority: int = Field(default=1, ge=0, le=1000)
    tenants: dict[Annotated[str, Field(pattern=ID)], TenantTerms] = Field(default_factory=dict)
    job_limit: int | None = Field(default=None, ge=1, description="most hosts one request may hold")


# -- the pool aggregate (written by a pool service) -------------------------------------------


class PoolCreated(Event):
    type: Literal["PoolCreated"] = "PoolCreated"
    v: Literal[1] = 1
    pool: str
    by: str = "anonymous"


class PoolConfigured(Event):
    type: Literal["PoolConfigured"] = "PoolConfigured"
    v: Literal[1] = 1
    terms: PoolTerms
    by: str = "anonymous"


class HostsAdded(Event):
    type: Literal["HostsAdded"] = "HostsAdded"
    v: Literal[1] = 1
    hosts: list[HostSpec] = Field(max_length=MAX_HOSTS_PER_EVENT)
    holder: Holder | None = Field(default=None, description="dynamic hosts made for a node: held by it at once")
    by: str = "anonymous"


class AmbiguityDetected(Event):
    """A registration that conflicts with what the pool knows: frozen, lent to nobody, until an
    administrator resolves it. `claim` is the conflicting registration (a new host when its id
    was unknown); `others` are hosts that share its address."""

    type: Literal["AmbiguityDetected"] = "AmbiguityDetected"
    v: Literal[1] = 1
    host_id: str
    claim: HostSpec | None = None
    others: list[str] = Field(default_factory=list)
    reason: str
    by: str = "anonymous"


class AmbiguityResolved(Event):
    type: Literal["AmbiguityResolved"] = "AmbiguityResolved"
    v: Literal[1] = 1
    host_id: str
    use_claim: int | None = Field(default=None, description="which registration of the host is right (1 = the first)")
    dropped: bool = Field(default=False, description="the host was removed from the pool")
    unfrozen: list[str] = Field(default_factory=list, description="hosts no longer ambiguous after this")
    by: str = "anonymous"


class HostRemoved(Event):
    type: Literal["HostRemoved"] = "HostRemoved"
    v: Literal[1] = 1
    host_id: str
    reason: str = ""
    by: str = "anonymous"


class HostReset(Event):
    type: Literal["HostReset"] = "HostReset"
    v: Literal[1] = 1
    host_id: str
    by: str = "anonymous"


class RequestAccepted(Event):
    """The request waits its turn: `score` (from the policy) then arrival order."""

    type: Literal["RequestAccepted"] = "RequestAccepted"
    v: Literal[1] = 1
    request: PoolRequest
    priority: int
    score: float
    policy: str


class RequestRefused(Event):
    type: Literal["RequestRefused"] = "RequestRefused"
    v: Literal[1] = 1
    request_id: str
    tenant: str
    cluster_id: str = ""
    reason: str
    by: str = "anonymous"


class HostsGranted(Event):
    type: Literal["HostsGranted"] = "HostsGranted"
    v: Literal[1] = 1
    request_id: str
    assignments: list[Assignment]
    by: str = Field(description="the policy that decided, e.g. 'policy:urgency-x-priority'")


class HostsConfirmed(Event):
    type: Literal["HostsConfirmed"] = "HostsConfirmed"
    v: Literal[1] = 1
    host_ids: list[str]
    by: str = "anonymous"


class HostsReleaseStarted(Event):
    type: Literal["HostsReleaseStarted"] = "HostsReleaseStarted"
    v: Literal[1] = 1
    host_ids: list[str]
    by: str = "anonymous"


class HostsReleased(Event):
    """v2 adds `granted`: the grants the release let the pool make, recorded in the same
    event (one append, so one disk sync, fewer on the path from a freed host to the waiting
    job: docs/pools.md, "Latency"). A v1 event has none; its grants follow as `HostsGranted`."""

    type: Literal["HostsReleased"] = "HostsReleased"
    v: Literal[1, 2] = 2
    host_ids: list[str] = Field(description="back in the pool (an error host stays in error)")
    returned: list[str] = Field(default_factory=list, description="dynamic hosts: gone back to their provider")
    by: str = "anonymous"
    granted: list[HostsGranted] = Field(
        default_factory=list,
        description="v2: grants decided on the hosts this release freed, in policy order, each as if recorded as its "
                    "own HostsGranted right after the release")


class HostFailed(Event):
    type: Literal["HostFailed"] = "HostFailed"
    v: Literal[1] = 1
    host_id: str
    reason: str
    by: str = "anonymous"


class RequestCancelled(Event):
    type: Literal["RequestCancelled"] = "RequestCancelled"
    v: Literal[1] = 1
    request_id: str
    reason: str = ""
    by: str = "anonymous"


class RequestExpired(Event):
    type: Literal["RequestExpired"] = "RequestExpired"
    v: Literal[1] = 1
    request_id: str
    reason: str


class RequestClosed(Event):
    type: Literal["RequestClosed"] = "RequestClosed"
    v: Literal[1] = 1
    request_id: str
    outcome: str = ""
    by: str = "anonymous"


class CallbackDelivered(Event):
    type: Literal["CallbackDelivered"] = "CallbackDelivered"
    v: Literal[1] = 1
    request_id: str
    on: Literal["grant", "end"]
    target: str
    attempts: int = 1
    ok: bool = True
    error: str = ""


# -- what requesters ask and report (muster.evt.<tenant>.poolreq.<pool>.<request-id>) ---------


class PoolHostsRequested(Event):
    type: Literal["PoolHostsRequested"] = "PoolHostsRequested"
    v: Literal[1] = 1
    request: PoolRequest


class PoolRequestCancelled(Event):
    type: Literal["PoolRequestCancelled"] = "PoolRequestCancelled"
    v: Literal[1] = 1
    request_id: str
    reason: str = ""
    by: str = "anonymous"


class PoolNodesReported(Event):
    """The requester reports what happened to nodes that hold pool hosts: `confirmed` (the host
    is up and is the right one), `releasing` (its delete started), `released` (deleted: the
    host may go back), `failed` (the host is unusable: it goes to error until reset)."""

    type: Literal["PoolNodesReported"] = "PoolNodesReported"
    v: Literal[1] = 1
    request_id: str
    cluster_id: str
    status: Literal["confirmed", "releasing", "released", "failed"]
    node_ids: list[str] = Field(min_length=1)
    reason: str = ""
    by: str = "anonymous"


class PoolDynamicHostCreated(Event):
    """A provider made a machine for a node; the pool keeps it on its books (quotas,
    ambiguity) until the node is deleted, then the host goes back to its provider."""

    type: Literal["PoolDynamicHostCreated"] = "PoolDynamicHostCreated"
    v: Literal[1] = 1
    host: HostSpec
    holder: Holder
    by: str = "anonymous"


class PoolRequestClosed(Event):
    type: Literal["PoolRequestClosed"] = "PoolRequestClosed"
    v: Literal[1] = 1
    request_id: str
    outcome: str = ""
    by: str = "anonymous"


POOL_EVENTS = (
    PoolCreated, PoolConfigured, HostsAdded, AmbiguityDetected, AmbiguityResolved, HostRemoved, HostReset,
    RequestAccepted, RequestRefused, HostsGranted, HostsConfirmed, HostsReleaseStarted, HostsReleased, HostFailed,
    RequestCancelled, RequestExpired, RequestClosed, CallbackDelivered,
    PoolHostsRequested, PoolRequestCancelled, PoolNodesReported, PoolDynamicHostCreated, PoolRequestClosed,
)


def grants_in(event: Event) -> list[HostsGranted]:
    """The grants an event of a pool records: a `HostsGranted`, or those a release made."""
    if isinstance(event, HostsGranted):
        return [event]
    return list(event.granted) if isinstance(event, HostsReleased) else []
