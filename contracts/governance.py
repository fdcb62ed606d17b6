"""Governance on the wire (docs/governance.md): approval rules, policies, notification
subscriptions and schedules, the events that keep them in the log, and the requests that change
them.

Each entity is an aggregate of its own, `muster.evt.<tenant>.gov.<kind>.<name>` (kinds: `rule`,
`policy`, `subscription`, `schedule`), with one `GovernancePut` per version and a
`GovernanceDeleted` at the end; a schedule's subject also carries its ticks (`ScheduleFired`,
`ScheduleAnswered`), so that a fire is fenced on the schedule's last sequence like every other write.
The governance service answers the requests (`muster.gov.<tenant>.<principal>.<verb>`): it
checks the requester's rights, validates (a policy must compile), and appends with the requester
as `by`. The approval and policy decisions about one job are the job's own events
(`contracts.approvals`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .base import Event
from .commands import RejectionCode
from .secrets import REFERENCE

NAME = r"^[A-Za-z0-9_\-]{1,64}$"
NAME_RULE = "1 to 64 letters, digits, '-' and '_'"
"""What NAME takes, as a refusal says it (the CLI's, HTTP's, the governance service's)."""
MAX_POLICY_BYTES = 64 * 1024
MAX_APPROVAL_S = 30 * 86400.0
GovernanceKind = Literal["rule", "policy", "subscription", "schedule"]
GOVERNANCE_KINDS: tuple[GovernanceKind, ...] = ("rule", "policy", "subscription", "schedule")
NotificationKind = Literal["job_succeeded", "job_failed", "needs_approval", "lease_expiring", "drift_found"]
NOTIFICATION_KINDS: tuple[NotificationKind, ...] = ("job_succeeded", "job_failed", "needs_approval", "lease_expiring",
                                                    "drift_found")
MAX_LEASE_WARNING_S = 30 * 86400
"""A `lease_expiring` warning comes at most this long before the lease ends."""
MAX_EVERY_S = 366 * 86400
"""A schedule's interval is at most this long (`--every`)."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


# -- the entities ---------------------------------------------------------------------------------


class ApprovalRule(_Model):
    """Which requests wait for an approver before they run. A request matches when every
    condition given holds (none given: every operation); any matching rule makes the job wait."""

    name: str = Field(pattern=NAME)
    description: str = Field(default="", max_length=500)
    operations: list[Annotated[str, Field(max_length=32)]] = Field(
        default_factory=list, max_length=32, description="operation verbs (create, delete, expand...); empty: any")
    min_nodes: int | None = Field(default=None, ge=1, description="the cluster has at least this many nodes once the job is done")
    clusters: list[Annotated[str, Field(max_length=128)]] = Field(
        default_factory=list, max_length=64, description="cluster names (shell patterns: `prod-*`); empty: any")
    labels: dict[Annotated[str, Field(max_length=64)], Annotated[str, Field(max_length=128)]] = Field(
        default_factory=dict, max_length=16, description="cluster labels that must all be set so (`env: prod`)")
    allow_self_approval: bool = Field(default=False, description="the requester may approve its own job")
    expires_after_s: float = Field(default=86400.0, gt=0, le=MAX_APPROVAL_S,
                                   description="a job not approved within this long is refused")


class Policy(_Model):
    """A Rego module. Its `deny` (a set of messages, or true) refuses a request with the messages;
    its `warn` is recorded with the job and shown. Input: `docs/governance.md`."""

    name: str = Field(pattern=NAME)
    description: str = Field(default="", max_length=500)
    source: str = Field(min_length=1, max_length=MAX_POLICY_BYTES)


class Webhook(_Model):
    url: str = Field(max_length=2000, pattern=r"^(https?|secret)://",
                     description="where to POST; or `secret://<name>`, the URL in the notifier's secrets file (a URL "
                     "that is itself a credential, as a Slack incoming webhook's is)")
    secret: str = Field(description="`secret://<name>`: the signing key, from the notifier's secrets file")
    format: Literal["muster", "slack"] = Field(default="muster", description="`slack`: a body Slack's incoming webhooks take")

    @field_validator("secret")
    @classmethod
    def _reference(cls, value: str) -> str:
        if not REFERENCE.fullmatch(value):
            raise ValueError("the webhook's secret must be a reference, secret://<name>, to the notifier's secrets file "
                             "(docs/secrets.md): the log keeps everything in clear")
        return value


class Subscription(_Model):
    """Who is told of what: a webhook, or a bus subject of the tenant's (`muster.cb.<tenant>.…`)."""

    name: str = Field(pattern=NAME)
    events: list[NotificationKind] = Field(min_length=1, max_length=len(NOTIFICATION_KINDS))
    webhook: Webhook | None = None
    subject: str | None = Field(default=None, max_length=256, pattern=r"^muster\.cb\.[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)+$")
    clusters: list[Annotated[str, Field(max_length=128)]] = Field(
        default_factory=list, max_length=64, description="cluster ids or names; empty: every cluster of the tenant")
    lease_warning_s: float = Field(default=3600.0, gt=0, le=MAX_LEASE_WARNING_S, description="`lease_expiring`: this long before")

    @model_validator(mode="after")
    def _one_target(self) -> Subscription:
        if (self.webhook is None) == (self.subject is None):
            raise ValueError("a subscription has exactly one of webhook and subject")
        return self


class Schedule(_Model):
    """An operation request sent at every tick, as its owner: the same request the CLI sends."""

    name: str = Field(pattern=NAME)
    cron: str | None = Field(default=None, max_length=120, description="5 fields (minute first), or 6 (second first)")
    every_s: float | None = Field(default=None, ge=1, le=MAX_EVERY_S, description="or a tick every this many seconds")
    timezone: str = Field(default="UTC", max_length=64)
    verb: str = Field(pattern=r"^[a-z][a-z\-]{1,31}$")
    command: dict[str, Any] = Field(description="the operation's command, as the CLI built it (no request_id)")
    text: str = Field(default="", max_length=500, description="the command as it was typed (`cluster check c1`)")
    owner: str = Field(default="", max_length=128, description="who the requests are sent as (the creator)")
    missed: Literal["skip", "once"] = Field(
        default="once", description="ticks missed while no scheduler ran: `once` runs the latest of them once, `skip` none")
    paused: bool = False

    @model_validator(mode="after")
    def _one_timing(self) -> Schedule:
        if (self.cron is None) == (self.every_s is None):
            raise ValueError("a schedule has exactly one of cron and every_s")
        if "request_id" in self.command:
            raise ValueError("a schedule's command carries no request_id: each tick gets its own")
        return self


ENTITY_OF: dict[str, type[_Model]] = {"rule": ApprovalRule, "policy": Policy, "subscription": Subscription,
                                      "schedule": Schedule}


# -- events -----------------------------------------------------------------------------------------


class GovernancePut(Event):
    """A version of a governance entity (the first creates it)."""

    type: Literal["GovernancePut"] = "GovernancePut"
    v: Literal[1] = 1
    kind: GovernanceKind
    name: str
    entity: dict[str, Any]
    version: int = Field(ge=1)
    by: str = "anonymous"


class GovernanceDeleted(Event):
    type: Literal["GovernanceDeleted"] = "GovernanceDeleted"
    v: Literal[1] = 1
    kind: GovernanceKind
    name: str
    by: str = "anonymous"


class ScheduleFired(Event):
    """A scheduler took this tick (fenced on the schedule's subject: one taker per tick); the
    request goes out next, with a request_id derived from the tick, so sending it again after a
    crash is the same request."""

    type: Literal["ScheduleFired"] = "ScheduleFired"
    v: Literal[1] = 1
    name: str
    tick: datetime
    request_id: str
    scheduler: str = ""
    late_s: float = Field(default=0, ge=0, description="how long after the tick it was taken (missed while down)")
    skipped: int = Field(default=0, ge=0, description="earlier ticks missed while down and not run")


class ScheduleAnswered(Event):
    """The answer to a tick's request: the job it started, what it did without a job (`done`: an
    extended lease), or why it was refused; `ended`: the refusal ends the schedule (its cluster
    is deleted: no tick of it can run again), and it fires no more."""

    type: Literal["ScheduleAnswered"] = "ScheduleAnswered"
    v: Literal[1] = 1
    name: str
    tick: datetime
    job_id: str | None = None
    rejected: str = ""
    done: str = Field(default="", description="what a request that makes no job did (`lease extended: expires at ...`)")
    ended: str = Field(default="", max_length=500, description=(
        "the schedule ends with this answer, and why (`cluster web was deleted (job ...)`): no tick is taken after it"))


def ran_text(job_id: str | None, rejected: str, done: str) -> str:
    """How a tick's answer reads (`muster schedule list`, `muster history --governance`)."""
    return f"job {job_id}" if job_id else done or f"refused: {rejected}"


GOVERNANCE_EVENTS: tuple[type[Event], ...] = (GovernancePut, GovernanceDeleted, ScheduleFired, ScheduleAnswered)


# -- requests to the governance service: muster.gov.<tenant>.<principal>.<verb> -------------------

GOV_VERBS = ("put", "delete", "list", "pause", "resume", "notify-test", "notify-check")


class GovernanceRequest(_Model):
    """`put` (entities, all or none), `delete` (one), `list` (of a kind), `pause` and `resume` (a
    schedule, by `name`: its owner needs no `read` on the tenant); to the notifier,
    `notify-test` (a subscription: send it a test notification now) and `notify-check` (may
    these subscriptions be delivered: the secrets they name, where their webhooks go)."""

    kind: GovernanceKind
    entities: list[dict[str, Any]] = Field(default_factory=list, max_length=100)
    name: str | None = Field(default=None, pattern=NAME)
    requested_by: str = Field(default="anonymous", max_length=128, description="on a bus without authorization only")


class GovernanceAnswer(_Model):
    type: Literal["GovernanceAnswer"] = "GovernanceAnswer"
    v: Literal[1] = 1
    ok: bool
    reason: str = ""
    items: list[dict[str, Any]] = Field(default_factory=list, description="what was written, listed or tested")
    problems: list[str] = Field(default_factory=list, description="why nothing was written (every problem found)")
    warnings: list[str] = Field(default_factory=list, description=(
        "written, but something may not work as meant (a subscription the notifier could not check, a webhook's "
        "host that does not resolve now)"))
    code: RejectionCode | None = Field(default=None, description=(
        "what kind of refusal: `forbidden` (the requester's rights), `invalid`, `not_found`, `conflict`; `unavailable` "
        "(a test notification that was not delivered)"))

