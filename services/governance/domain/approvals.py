"""Approval rules: which requests wait for an approver, and who may decide (pure).

A rule matches a request when every condition it gives holds: the operation is one of its
`operations`, the cluster will have at least `min_nodes` nodes, its name matches one of
`clusters` (shell patterns), it carries every label of `labels`. A request that any rule
matches waits in `waiting_for_approval`; the shortest `expires_after_s` of the matching rules
bounds the wait, and self-approval is allowed only when every matching rule allows it.

Who may decide is checked by the planner with the identities (`approve` on the job, which a
grant on its cluster or tenant covers; an approver of another tenant never can): `refusal`
adds what only governance knows. A decision refused for who asks is said in one sentence,
`not_to_decide`, whoever asks and wherever (the bus's answer, the API's 403, the CLI, the
console): until session 35 a requester and a user without the grant were told in two shapes.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from contracts.governance import ApprovalRule
from muster.times import shown_time


@dataclass(frozen=True)
class Request:
    """What the rules look at, about one request."""

    operation: str
    """The operation's verb (create, delete, expand...)."""
    cluster_name: str
    labels: Mapping[str, str]
    nodes_after: int
    """The cluster's nodes once the job is done (a delete: the nodes it has now)."""


def matches(rule: ApprovalRule, request: Request) -> bool:
    if rule.operations and request.operation not in rule.operations:
        return False
    if rule.min_nodes is not None and request.nodes_after < rule.min_nodes:
        return False
    if rule.clusters and not any(fnmatch.fnmatchcase(request.cluster_name, p) for p in rule.clusters):
        return False
    return all(request.labels.get(k) == v for k, v in rule.labels.items())


@dataclass(frozen=True)
class Wait:
    """How a matched request waits."""

    rules: tuple[str, ...]
    expires_at: datetime
    allow_self_approval: bool


def wait_for(rules: Iterable[ApprovalRule], request: Request, now: datetime) -> Wait | None:
    """None when no rule matches: the request runs at once."""
    matched = sorted((r for r in rules if matches(r, request)), key=lambda r: r.name)
    if not matched:
        return None
    return Wait(tuple(r.name for r in matched), now + timedelta(seconds=min(r.expires_after_s for r in matched)),
                all(r.allow_self_approval for r in matched))


def not_to_decide(who: str, verb: str, job_id: str, why: str) -> str:
    """`<who> may not approve job <id>: <why>`: a decision refused for who asks, the same
    sentence whether it asked for the job or lacks the grant."""
    return f"{who} may not {verb} job {job_id}: {why}"


def own_job(who: str) -> str:
    """Why a requester may not approve its own job (no grant would help: not a grant to ask for)."""
    return (f"{who} asked for it, and not every rule that matched allows self-approval: another principal with "
            f"approve on its cluster decides ({who} may reject it)")


def refusal(*, approving: bool, waiting: bool, decided_by: str | None, expires_at: datetime | None, allow_self: bool,
            requester: str, approver: str, now: datetime, job_id: str = "") -> str:
    """Why `approver` may not approve (or reject) now ('' = it may), beyond its `approve`
    permission. A requester may always reject its own job (it would cancel it anyway)."""
    if decided_by is not None:
        return f"the job was decided already (by {decided_by})"
    if expires_at is not None and now >= expires_at:  # before "not waiting": an expired job waits no more
        return f"the approval expired at {shown_time(expires_at)}: nobody decided in time; ask again"
    if not waiting:
        return "the job is not waiting for approval"
    if approving and approver == requester and not allow_self:
        return not_to_decide(approver, "approve", job_id or "?", own_job(approver))
    return ""
