"""The notifier's routing tables: the durable consumers on the log and which handler takes each
event type.

Every notifier joins each consumer's queue group (named as the consumer), so each event reaches one
of them; a new durable starts at the log's end (a first start does not tell of the whole history)."""

from __future__ import annotations

from contracts import subjects
from muster.routing import Route

QUEUE = "notifier"

ROUTES = (
    Route("notifier-jobs", subjects.ALL_JOB_EVENTS, {
        "JobSucceeded": "on_job_event",
        "JobFailed": "on_job_event",
        "JobRolledBack": "on_job_event",
        "JobNeedsAttention": "on_job_event",
        "JobApprovalRequested": "on_job_event",
    }, queue="notifier-jobs"),
    Route("notifier-leases", subjects.ALL_CLUSTER_EVENTS, {
        "ClusterLeaseChanged": "on_lease_event",
    }, queue="notifier-leases"),
)
