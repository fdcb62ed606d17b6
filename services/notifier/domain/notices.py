"""Which log events make which notifications, what they say, and when a failed delivery is
tried again (pure).

A job's end (`JobSucceeded`; `JobFailed`, `JobRolledBack`, `JobNeedsAttention`), its wait for an
approval (`JobApprovalRequested`), the drift a `check` job found, and a cluster's lease (a
`ClusterLeaseChanged` makes a notification due `lease_warning_s` before the lease ends).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from pydantic_core import to_jsonable_python

from contracts.events import FINAL_STATE_OF
from contracts.governance import Subscription
from muster.times import shown_time

KIND_OF: dict[str, str] = {
    "JobSucceeded": "job_succeeded", "JobFailed": "job_failed", "JobRolledBack": "job_failed",
    "JobNeedsAttention": "job_failed", "JobApprovalRequested": "needs_approval", "ClusterLeaseChanged": "lease_expiring",
}
"""Event type -> the notification it makes (a `check` job's end also makes `drift_found`)."""
STATE_OF: dict[str, str] = {**FINAL_STATE_OF, "JobApprovalRequested": "waiting_for_approval"}
"""The job's state as the tracker and `muster status` name it (`rolled_back`, not `rolledback`)."""
ENDED = {"failed": "failed", "rolled_back": "was rolled back", "needs_attention": "needs an administrator's attention"}
BACKOFF_S = (1.0, 2.0, 5.0, 15.0, 60.0, 300.0, 900.0)
"""Waits before each retry of a failed delivery; after the last, the notifier gives up (recorded)."""


def kinds_of(event_type: str, operation: str, drifted: bool) -> list[str]:
    kinds = [KIND_OF[event_type]] if event_type in KIND_OF else []
    if operation == "check" and drifted and event_type in ("JobSucceeded", "JobFailed"):
        kinds.append("drift_found")
    return kinds


def state_of(event_type: str) -> str:
    return STATE_OF.get(event_type, event_type.removeprefix("Job").lower())


def wants(sub: Subscription, kind: str, cluster_id: str, cluster_name: str) -> bool:
    if kind not in sub.events:
        return False
    return not sub.clusters or any(c == cluster_id or fnmatch.fnmatchcase(cluster_name, c) for c in sub.clusters)


def notification_id(subscription: str, cause_seq: int, kind: str) -> str:
    return f"{subscription}-{cause_seq}-{kind}"


def due_at(sub: Subscription, kind: str, recorded_at: datetime, lease_ends: datetime | None) -> datetime | None:
    """When to send it; None: never (a lease that ends never, or too soon to warn of)."""
    if kind != "lease_expiring":
        return recorded_at
    if lease_ends is None:
        return None
    return max(recorded_at, lease_ends - timedelta(seconds=sub.lease_warning_s))


def next_attempt(attempt: int, failed_at: datetime) -> datetime | None:
    """After failed attempt number `attempt`: when to try again (None: give up)."""
    if attempt > len(BACKOFF_S):
        return None
    return failed_at + timedelta(seconds=BACKOFF_S[attempt - 1])


TEXT = {
    "job_succeeded": "job {job_id} ({operation} of {cluster}) succeeded",
    "job_failed": "job {job_id} ({operation} of {cluster}) {ended}: {reason}",
    "needs_approval": "job {job_id} ({operation} of {cluster}, asked by {requester}) waits for approval until {expires_at}",
    "lease_expiring": "the lease of cluster {cluster} ends at {expires_at}",
    "drift_found": "a check of cluster {cluster} found {count} service(s) not as they should be: {drift}",
    "test": "a test notification for subscription {subscription}",
}


def body(kind: str, tenant: str, facts: Mapping[str, Any]) -> dict[str, Any]:
    """The muster format: `kind`, `tenant`, `text` (one sentence), and the facts it names, as
    JSON values already (an approval's `expires_at` is a datetime in its event): the body is
    sent as the notifier made it, not as the log gives it back."""
    values = to_jsonable_python({k: v for k, v in facts.items() if v is not None})
    said = {**values, "ended": ENDED.get(str(values.get("state")), str(values.get("state")))}
    if "expires_at" in values:  # the sentence says it as people read times; the field stays ISO 8601
        said["expires_at"] = shown_time(values["expires_at"])
    text = TEXT[kind].format_map(_Blank(said))
    return {"kind": kind, "tenant": tenant, "text": text, **values}


def slack(b: Mapping[str, Any]) -> dict[str, Any]:
    """A body Slack's incoming webhooks (and most chat tools) take."""
    return {"text": f"[muster · {b.get('tenant')}] {b.get('text')}"}


class _Blank(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return "?"


def drift_text(drift: Iterable[Mapping[str, str]], limit: int = 5) -> str:
    items = list(drift)
    shown = ", ".join(f"{d['service']} on {d['node']} {d['observed']} (should be {d['desired']}"
                      + (f"; a repair starts it after {', '.join(d['after'])}" if d.get("after") else "") + ")"
                      for d in items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")
