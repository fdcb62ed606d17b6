"""Locations: where each job, task and cluster is now, derived from the log (pure).

A record is a set of fields, each stamped with the version of the update that wrote it:
`(rank, seq)`, the log sequence of the event it came from, and for tasks the attempt (rank),
so that an attempt that is no longer current changes nothing even when its event is newer.

The supersede rule: an update writes a field only if its version is greater than the field's
stamp. Merging is then a per-field maximum, so it is idempotent and commutative: any number of
trackers applying the same updates in any order, any number of times, end with the same record.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from contracts import subjects
from contracts.events import FINAL_STATE_OF

JOB, TASK, CLUSTER = "job", "task", "cluster"

_UNSAFE = re.compile(r"[^A-Za-z0-9_\-.]")


def _escape(task_id: str) -> str:
    # KV keys allow [-/_=.a-zA-Z0-9]; a task id's dots become '/' (a key token keeps its
    # meaning) and anything else is written =XX.
    escaped = _UNSAFE.sub(lambda m: "".join(f"={b:02x}" for b in m.group().encode()), task_id)
    return escaped.replace(".", "/")


def job_key(tenant: str, job_id: str) -> str:
    return f"{JOB}.{tenant}.{job_id}"


def task_key(tenant: str, job_id: str, task_id: str) -> str:
    return f"{TASK}.{tenant}.{job_id}.{_escape(task_id)}"


def cluster_key(tenant: str, cluster_id: str) -> str:
    return f"{CLUSTER}.{tenant}.{cluster_id}"


@dataclass(frozen=True, slots=True)
class Update:
    """What one event says about one record."""

    key: str
    kind: str
    ident: Mapping[str, str]
    seq: int
    fields: Mapping[str, Any]
    rank: int = 0

    @property
    def version(self) -> tuple[int, int]:
        return (self.rank, self.seq)


@dataclass(frozen=True, slots=True)
class Stamp:
    value: Any
    seq: int
    rank: int = 0

    @property
    def version(self) -> tuple[int, int]:
        return (self.rank, self.seq)


@dataclass(frozen=True, slots=True)
class Record:
    kind: str
    ident: Mapping[str, str]
    fields: Mapping[str, Stamp] = field(default_factory=dict)

    @property
    def seq(self) -> int:
        """The newest log sequence this record reflects."""
        return max((s.seq for s in self.fields.values()), default=0)

    def get(self, name: str, default: Any = None) -> Any:
        stamp = self.fields.get(name)
        return default if stamp is None else stamp.value

    def stamp(self, name: str) -> Stamp | None:
        return self.fields.get(name)

    def values(self) -> dict[str, Any]:
        return {**self.ident, **{k: s.value for k, s in sorted(self.fields.items())}}

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "ident": dict(self.ident),
            "fields": {k: [s.value, s.seq, s.rank] for k, s in sorted(self.fields.items())},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Record:
        fields = {str(k): Stamp(v[0], int(v[1]), int(v[2])) for k, v in dict(data["fields"]).items()}
        return cls(kind=str(data["kind"]), ident={str(k): str(v) for k, v in dict(data["ident"]).items()}, fields=fields)


def merge(record: Record | None, update: Update) -> Record | None:
    """The record after the update, or None when the update changes nothing (every field it
    writes already carries a version at least as new: a repeat or a superseded update)."""
    current = record.fields if record is not None else {}
    changed: dict[str, Stamp] = {}
    for name, value in update.fields.items():
        old = current.get(name)
        if old is None or update.version > old.version:
            changed[name] = Stamp(value, update.seq, update.rank)
    if not changed:
        return None
    ident = record.ident if record is not None else dict(update.ident)
    return Record(kind=update.kind, ident=ident, fields={**current, **changed})


def merge_all(record: Record | None, updates: list[Update]) -> Record | None:
    for u in updates:
        record = merge(record, u) or record
    return record


# -- from events ----------------------------------------------------------------------------


def parse_subject(subject: str) -> tuple[str, str, list[str]] | None:
    """muster.evt.<tenant>.<aggregate>.<id>[.<sub-id>] -> (tenant, aggregate, ids)."""
    parts = subject.split(".")
    if len(parts) < 5 or f"{parts[0]}.{parts[1]}" != subjects.EVT:
        return None
    return parts[2], parts[3], parts[4:]


LOCATION_EVENTS = frozenset({
    "JobRequested", "LayoutSolved", "JobPlanned", "RollbackPlanned", "JobSucceeded", "JobFailed", "JobRolledBack",
    "JobNeedsAttention", "JobRetried", "JobLayoutRetried", "JobPaused", "JobResumed", "JobAdopted", "JobCancelRequested", "TaskQueued", "CleanupQueued",
    "TaskClaimed", "TaskSucceeded", "TaskFailed", "ClusterRequested", "ClusterStatusChanged", "ClusterLayoutChanged",
    "JobResourcesRequested", "JobResourcesGranted",
    "JobApprovalRequested", "JobApproved", "JobRejected", "JobApprovalExpired",
    "ClusterLeaseChanged",
})
"""The event types `updates_from` turns into location updates (a test keeps the two in step)."""

TASK_EVENTS = frozenset({"TaskQueued", "CleanupQueued", "TaskClaimed", "TaskSucceeded", "TaskFailed"})
"""Those that move only a task's location: folded from the log when asked, not indexed."""
INDEX_EVENTS = LOCATION_EVENTS - TASK_EVENTS
"""What the tracker's index consumes (its routing table takes exactly these)."""


def updates_from(seq: int, subject: str, time: str, event: Any) -> list[Update]:
    """The location updates one recorded event makes (none for most events)."""
    parsed = parse_subject(subject)
    if parsed is None:
        return []
    tenant, _, _ = parsed

    def job(job_id: str, **fields: Any) -> Update:
        return Update(job_key(tenant, job_id), JOB, {"tenant": tenant, "job_id": job_id}, seq, fields)

    def task(job_id: str, task_id: str, attempt: int, **fields: Any) -> Update:
        ident = {"tenant": tenant, "job_id": job_id, "task_id": task_id}
        return Update(task_key(tenant, job_id, task_id), TASK, ident, seq, {"attempt": attempt, **fields}, rank=attempt)

    def cluster(cluster_id: str, **fields: Any) -> Update:
        return Update(cluster_key(tenant, cluster_id), CLUSTER, {"tenant": tenant, "cluster_id": cluster_id}, seq, fields)

    e = event
    match e.type:
        case "JobRequested":
            return [
                job(e.job_id, cluster_id=e.cluster_id, operation=e.operation, owner=e.planner, requested_by=e.requested_by,
                    requested_seq=seq, started_at=time, state="running", paused=False, finished_at=None, error=None),
                cluster(e.cluster_id, job_id=e.job_id),
            ]
        case "LayoutSolved":
            return [job(e.job_id, layout=e.layout.model_dump(mode="json"))]
        case "JobPlanned":
            return [job(e.job_id, tasks_total=len(e.tasks), stages_total=len(e.stages))]
        case "RollbackPlanned":
            return [job(e.job_id, state="rolling_back", error=e.reason)]
        case "JobSucceeded":
            return [job(e.job_id, state="succeeded", finished_at=time)]
        case "JobFailed" | "JobRolledBack" | "JobNeedsAttention":
            return [job(e.job_id, state=FINAL_STATE_OF[e.type], finished_at=time, error=e.reason)]
        case "JobRetried" if e.rollback:  # (v2) the rest of its rollback, again
            return [job(e.job_id, state="rolling_back", paused=False, finished_at=None, error=e.reason)]
        case "JobRetried" | "JobLayoutRetried":
            return [job(e.job_id, state="running", paused=False, finished_at=None, error=None)]
        case "JobPaused" | "JobResumed" | "JobCancelRequested":
            return [job(e.job_id, paused=e.type == "JobPaused")]
        case "JobResourcesRequested" | "JobResourcesGranted":
            return [job(e.job_id, waiting=e.type == "JobResourcesRequested", pool=e.pool)]
        case "JobApprovalRequested" | "JobApproved" | "JobRejected" | "JobApprovalExpired":
            return [job(e.job_id, approving=e.type == "JobApprovalRequested")]
        case "JobAdopted":
            return [job(e.job_id, owner=e.planner)]
        case "TaskQueued":
            return [task(e.job_id, e.task_id, e.attempt, node=e.node, action=e.action.value, service=e.service,
                         state="queued", provisioner=None, worker=None, since=time)]
        case "CleanupQueued":
            return [task(e.job_id, e.task_id, e.attempt, node=e.node, action="delete", service=None,
                         state="queued", provisioner=None, worker=None, since=time)]
        case "TaskClaimed":
            return [task(e.job_id, e.task_id, e.attempt, state="claimed", provisioner=e.provisioner, worker=e.worker, since=time)]
        case "TaskSucceeded" | "TaskFailed":
            state = "succeeded" if e.type == "TaskSucceeded" else "failed"
            return [task(e.job_id, e.task_id, e.attempt, state=state, provisioner=e.provisioner, worker=e.worker, since=time)]
        case "ClusterRequested":
            return [cluster(e.cluster_id, name=e.name, template=e.template, provider=e.provider, job_id=e.job_id,
                            status="pending", created_at=time)]
        case "ClusterStatusChanged":
            return [cluster(e.cluster_id, status=e.status, job_id=e.job_id)]
        case "ClusterLayoutChanged":
            return [cluster(e.cluster_id, job_id=e.job_id, nodes=len(e.nodes))]
        case "ClusterLeaseChanged":
            return [cluster(e.cluster_id, expires_at=e.expires_at.isoformat() if e.expires_at else None)]
    return []


SIZED = frozenset({"JobPlanned", "ClusterLayoutChanged"})
"""Types whose location updates take only the sizes of their lists: read with `sized` when
offloaded (a 10,000-node plan holds 110,000 tasks)."""


def sized(body: bytes) -> Any:
    """An event's body read for `updates_from` alone: its top-level fields, each object within
    them left out (None), so a list of tasks or nodes keeps its length and nothing else: a
    large plan costs a fraction of its model's memory (docs/benchmarks.md, the tracker's memory)."""
    top: list[list[tuple[str, Any]]] = []

    def leave_out(pairs: list[tuple[str, Any]]) -> None:
        top[:] = [pairs]  # objects close inside out: the last one is the body itself

    json.loads(body, object_pairs_hook=leave_out)
    return SimpleNamespace(**dict(top[0])) if top else None


# -- views ----------------------------------------------------------------------------------


def task_location(record: Record) -> dict[str, Any]:
    """Where a task runs now (or ran last), as the API shows it."""
    return {
        "task_id": record.ident["task_id"],
        "node": record.get("node"),
        "attempt": record.get("attempt", 0),
        "state": record.get("state"),
        "provisioner": record.get("provisioner"),
        "worker": record.get("worker"),
        "since": record.get("since"),
        "seq": record.seq,
    }
