"""A readable timeline of events (pure): who did what, when, and how long it took.

Used by `muster history` and by the live progress stream. Event types this module does not
know are shown by name, so a newer log never breaks an older reader.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from contracts.events import FENCE_MARKERS, FINAL_JOB_EVENTS, LOST_PREFIX, STRANDED_PREFIX
from contracts.governance import ran_text
from contracts.records import Recorded
from muster.times import lease_end, shown_time


@dataclass(frozen=True)
class Line:
    seq: int
    time: datetime
    offset: float
    type: str
    who: str
    text: str
    took: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "time": self.time.isoformat(), "offset_s": round(self.offset, 3), "type": self.type,
                "who": self.who, "text": self.text, "took_s": None if self.took is None else round(self.took, 3)}

    def render(self) -> str:
        took = f"  ({_duration(self.took)})" if self.took is not None else ""
        who = f"  [{self.who}]" if self.who else ""
        return f"{shown_time(self.time)}  +{self.offset:9.3f}s  #{self.seq:<6} {self.type:<20} {self.text}{who}{took}"


def _duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.2f} s"
    return f"{seconds / 60:.1f} min"


def _layout_text(layout: Any) -> str:
    groups = "; ".join(f"{g.count}× {g.hardwaretype}/{g.imagetype} [{', '.join(g.services)}]" for g in layout.layout)
    return f"{layout.nodes} nodes: {groups}" if groups else f"{layout.nodes} nodes"


def _some(names: list[str], shown: int = 3) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def place(provisioner: str | None, worker: str | None) -> str:
    """`provisioner/worker`, without saying the provisioner twice when the worker's name has it."""
    if not provisioner:
        return worker or ""
    if worker and worker.startswith(f"{provisioner}/"):
        return worker
    return f"{provisioner}/{worker}" if worker else provisioner


def who(e: Any) -> str:
    """Who did it: the requester, the solver, the provisioner and worker."""
    if e.type == "JobRequested":
        return str(e.requested_by)
    if hasattr(e, "provisioner") and hasattr(e, "worker"):
        return place(e.provisioner, e.worker)
    for name in ("solver", "by", "scheduler"):
        value = getattr(e, name, None)
        if value:
            return str(value)
    return ""


def describe(e: Any) -> str:
    """One line saying what an event records."""
    t = e.type
    task = getattr(e, "task_id", "")
    attempt = getattr(e, "attempt", 1)
    match t:
        case "JobRequested":
            req = e.request
            what = f" ({req.get('nodes')} nodes of {req.get('template')})" if "template" in req else ""
            return f"{e.operation} of cluster {e.cluster_id}{what} requested by {e.requested_by}; owner {e.planner or '?'}"
        case "LayoutRequested":
            services = f", services {', '.join(e.services)}" if e.services else ""
            return f"layout requested: {e.nodes} nodes of {e.template}{services}"
        case "LayoutSolved":
            return f"layout: {_layout_text(e.layout)}"
        case "LayoutUnsolvable":
            return f"no layout ({e.kind}): {e.message}"
        case "JobPlanned":
            return f"plan: {len(e.tasks)} tasks in {len(e.stages)} stages ({e.mode})"
        case "RollbackPlanned":
            return f"rollback planned: {len(e.tasks)} tasks in {len(e.stages)} stages, because {e.reason}"
        case "TaskQueued":
            retry = ", a retry" if attempt > 1 else ""
            return f"{task} queued (attempt {attempt}{retry})"
        case "CleanupQueued":
            return f"{task} queued to clean up {e.node} after {e.for_task} failed"
        case "TaskClaimed":
            return f"{task} claimed (attempt {attempt})"
        case "TaskSucceeded":
            return f"{task} succeeded (attempt {attempt})"
        case "TaskFailed":
            return f"{task} failed (attempt {attempt}): {e.error}"
        case "TaskProgressed":
            left_out = f" ({e.skipped} lines left out before it)" if e.skipped else ""
            return f"{task} attempt {attempt} says: {e.line}{left_out}"
        case "TaskCompleted":
            return f"{task} done: taken into the job"
        case "TaskAttemptFailed" if e.state == "cancelled" and e.error.startswith(STRANDED_PREFIX):
            # no cancel there: the step before it in its segment failed (it said the cancel had ended it)
            return f"{task} attempt {attempt} ended: {e.error}"
        case "TaskAttemptFailed" if e.state == "cancelled":
            return f"{task} attempt {attempt} cancelled: no provisioner claimed it before the cancel (it never ran)"
        case "ClaimsClosed":
            return "claims closed: no provisioner may claim the job's queued attempts any more (the cancel's fence)"
        case "TaskAttemptFailed" if e.error.startswith(LOST_PREFIX):
            return f"{task} attempt {attempt} {e.error} (the rollback undoes what it may have made)"
        case "TaskAttemptFailed":
            return f"{task} attempt {attempt} {'timed out' if e.state == 'timed_out' else 'failed'}: taken into the job"
        case "JobResourcesRequested":
            return f"asked pool {e.pool} for {e.hosts} hosts (request {e.request_id}); waiting for the grant"
        case "JobResourcesGranted":
            hosts = ", ".join(f"{n}→{h}" for n, h in sorted(e.assignments.items()))
            return f"pool {e.pool} granted {len(e.assignments)} hosts: {hosts}"
        case "JobSucceeded":
            return "job succeeded"
        case "JobFailed" | "JobRolledBack" | "JobNeedsAttention":
            verb = {"JobFailed": "job failed", "JobRolledBack": "job rolled back", "JobNeedsAttention": "job needs attention"}[t]
            return f"{verb}: {e.reason}"
        case "JobRetried" if getattr(e, "rollback", False):
            return "job retried: its rollback's failed tasks run again"
        case "JobPaused" | "JobResumed" | "JobCancelRequested" | "JobRetried":
            return {"JobPaused": "job paused", "JobResumed": "job resumed", "JobCancelRequested": "cancel requested",
                    "JobRetried": "job retried"}[t]
        case "JobLayoutRetried":
            return f"layout failed ({e.reason}); asking the solver for another one, excluding {len(e.exclude)} tried"
        case "JobAdopted":
            return f"job taken over by {e.planner} (owner was {e.previous or '?'})"
        case "JobApprovalRequested":
            return f"waits for approval (rules {', '.join(e.rules)}) until {shown_time(e.expires_at)}"
        case "JobApproved" | "JobRejected":
            said = f": {e.comment}" if e.comment else ""
            return f"{'approved' if t == 'JobApproved' else 'rejected'} by {e.by}{said}"
        case "JobApprovalExpired":
            return f"nobody approved it before {shown_time(e.expires_at)}"
        case "PolicyWarned":
            return "policy warnings: " + "; ".join(f"{w.message} ({w.policy})" for w in e.warnings)
        case "RequestDenied":
            when = f" when {e.approved_by} approved it" if getattr(e, "approved_by", None) else ""
            return f"{e.operation} (job {e.job_id}) denied by the tenant's policies{when}: " + "; ".join(
                f"{d.message} ({d.policy} v{d.version})" for d in e.denials)
        case "GovernancePut":
            return f"{e.kind} {e.name!r} version {e.version} {'added' if e.version == 1 else 'changed'}"
        case "GovernanceDeleted":
            return f"{e.kind} {e.name!r} deleted"
        case "ScheduleFired":
            late = f", {e.late_s:g} s late" if e.late_s >= 1 else ""  # a timer a few ms late is on time
            skipped = f", {e.skipped} missed tick(s) not run" if e.skipped else ""
            return f"schedule {e.name!r} took its tick {shown_time(e.tick)}{late}{skipped} (request {e.request_id})"
        case "ScheduleAnswered":
            ended = f"; the schedule ended: {e.ended}" if e.ended else ""
            return f"schedule {e.name!r}, tick {shown_time(e.tick)}: {ran_text(e.job_id, e.rejected, e.done)}{ended}"
        case "ClusterRequested":
            return f"cluster {e.name!r} requested: template {e.template}, provider {e.provider}"
        case "ClusterLayoutChanged":
            return f"cluster layout: {len(e.nodes)} nodes"
        case "ClusterConfigChanged":
            return "cluster config changed"
        case "NodeResultsRecorded":
            if len(e.nodes) > 1:
                named = ", ".join(one.node_id for one in e.nodes[:5]) + (", ..." if len(e.nodes) > 5 else "")
                return f"results of {len(e.nodes)} nodes ({named})"
            one = e.nodes[0]
            ips = ", ".join(f"{k} {v}" for k, v in sorted(one.ipaddresses.items()))
            return f"results of {one.node_id} from {one.task_id}" + (f" ({ips})" if ips else "")
        case "ClusterStatusChanged":
            return f"cluster {e.status}" + (f": {e.reason}" if e.reason else "")
        case "CatalogEntityPut":
            return f"catalog {e.kind} {e.name!r} put"
        case "CatalogEntityDeleted":
            return f"catalog {e.kind} {e.name!r} deleted by {e.by}"
        case "ClusterLeaseChanged":
            return f"lease: expires {lease_end(e.expires_at)}"
        case "ServiceStateObserved":
            seen = f"{e.service} on {e.node_id} is {e.state}"
            return seen + (f" (expected {e.expected})" if e.expected and e.expected != e.state else "")
        case "ServicesDesired":
            off = [*e.stopped, *(f"{s} on {', '.join(on)}" for s, on in e.stopped_on.items())]
            return "desired: " + (f"stopped {'; '.join(off)}" if off else "every service running")
        case "TasksRecorded":
            return f"{e.count} task records"
        case "ServicesMoved":
            # Where each service is now, as a sentence naming the job (it read `services left: base
            # running on n1; ...`, no job, and a removal said to be "removed on" its nodes), and
            # where it was (v2's `before`: `b stopped -> running on n1`; none known, as a v1 event
            # reads: new on the node, or an older record).
            moved = "; ".join(f"{c.service} {c.before + ' -> ' if c.before else ''}"
                              f"{'removed from' if c.state == 'removed' else c.state + ' on'} {_some(c.nodes)}"
                              for c in e.changes)
            return f"job {e.job_id[:8]} left {moved}" if e.changes else f"job {e.job_id[:8]} moved no service"
        case "PlanSaved":
            return f"plan {e.plan_id} saved: {e.operation}, {e.tasks} tasks (apply it: muster cluster apply {e.plan_id})"
        case "ClusterNameClaimed":
            return f"name {e.name!r} taken by cluster {e.cluster_id}"
    return str(t)


def _clock_key(e: Any) -> tuple[str, ...]:
    job = str(getattr(e, "job_id", ""))
    if e.type in ("LayoutRequested", "LayoutSolved", "LayoutUnsolvable"):
        return ("layout", job)
    if e.type == "JobRequested" or e.type in FINAL_JOB_EVENTS:
        return ("job", job)
    return ("task", job, str(getattr(e, "task_id", "")), str(getattr(e, "attempt", "")))


STARTS = frozenset({"JobRequested", "LayoutRequested", "TaskQueued", "CleanupQueued", "TaskClaimed"})
ENDS = frozenset({"LayoutSolved", "LayoutUnsolvable", "TaskSucceeded", "TaskFailed"}) | FINAL_JOB_EVENTS


def timeline(history: Iterable[Recorded]) -> list[Line]:
    """Lines in log order; a claim says how long the task waited in its queue, an outcome how
    long the attempt ran, a final event how long the job took. Each line's offset counts from
    the earliest event shown, not the first: each writer stamps its own time when it decides,
    so an event may carry a time a little before the one logged ahead of it (a create's
    `JobRequested` is stamped before its `ClusterRequested` and appended after it), and an
    offset from the first would then be negative."""
    lines: list[Line] = []
    clocks: dict[tuple[str, ...], datetime] = {}
    owners: dict[str, str] = {}  # job -> its planner, who writes the job's and cluster's events
    claims: dict[tuple[str, ...], tuple[str, datetime]] = {}  # attempt -> its open claim's claimer, time
    for r in history:
        e = r.event
        if e.type in FENCE_MARKERS:  # (the fence's, not the story's)
            continue
        key = _clock_key(e)
        text, took = describe(e), None
        if e.type in ENDS and key in clocks:
            took = (r.time - clocks[key]).total_seconds()
        elif e.type == "TaskClaimed" and key in claims:
            # A claim with no outcome before another: without saying so, the story read as if the
            # task had waited in its queue all along (a provisioner killed mid-job).
            before, at = claims[key]
            text += (f" again, {_duration((r.time - at).total_seconds())} after {before} claimed it: that claim "
                     "never reported (its process stopped or lost the task, whose message came back after its ack wait)")
        elif e.type == "TaskClaimed" and key in clocks:
            text += f" after {_duration((r.time - clocks[key]).total_seconds())} in the queue"
        if e.type == "TaskClaimed":
            claims[key] = (who(e), r.time)
        elif e.type in ENDS:
            claims.pop(key, None)
        if e.type in STARTS:
            clocks[key] = r.time
        if e.type in ("JobRequested", "JobAdopted") and e.planner:
            owners[e.job_id] = e.planner
        by = who(e) or owners.get(str(getattr(e, "job_id", "")), "")
        lines.append(Line(r.seq, r.time, 0.0, e.type, by, text, took))
    start = min((line.time for line in lines), default=None)
    return [replace(line, offset=(line.time - start).total_seconds()) for line in lines] if start else lines
