"""Live progress of one job, folded event by event from its story (pure).

The job part is `jobs.JobView`, the same document the owner answers with, so the progress after
each event is what the owner would have answered at that point; task locations come from the provisioners' claims
and outcomes; a running attempt's progress line is sent as it is (`TaskProgressed`: no state
changed, so no status is composed for it); the stages are those of the plan being run (forward, or the rollback).
"""

from __future__ import annotations

from typing import Any

from contracts.events import FINAL_JOB_EVENTS
from contracts.records import Recorded

from .jobs import JobView
from .locations import Record, parse_subject
from .status import compose, located, task_records
from .timeline import describe, place, who


class JobProgress:
    def __init__(self) -> None:
        self.job = JobView()
        self.locations: dict[str, Record] = {}
        self.layout: Any = None
        self.phase = "forward"
        self.stages: list[list[str]] = []
        self._forward: list[list[str]] = []
        self.final: Recorded | None = None

    def apply(self, r: Recorded) -> dict[str, Any]:
        """Fold one event; returns what a progress stream sends for it."""
        self.fold(r)
        return self.summary(r)

    def fold(self, r: Recorded) -> None:
        """Fold one event without summing up (for events a client has already seen: the
        summary costs a pass over every task)."""
        parsed = parse_subject(r.subject)
        kind = parsed[1] if parsed else ""
        e = r.event
        if kind == "job":
            self.job.apply(r)
        elif kind == "task":
            self.locations = task_records([r], self.locations)
        if e.type == "LayoutSolved":
            self.layout = e.layout.model_dump(mode="json")
        elif e.type == "JobPlanned":
            self.phase, self.stages = "forward", [list(s) for s in e.stages]
            self._forward = self.stages
        elif e.type == "RollbackPlanned":
            self.phase, self.stages = "rollback", [list(s) for s in e.stages]
        elif e.type == "JobRetried":
            self.phase, self.stages = "forward", self._forward
        elif e.type == "JobLayoutRetried":  # a new plan comes with the next layout
            self.phase, self.stages = "forward", []
        if e.type in FINAL_JOB_EVENTS:
            self.final = r

    def summary(self, r: Recorded) -> dict[str, Any]:
        """What a progress stream sends for `r`, the event folded last."""
        e = r.event
        if e.type == "TaskProgressed":  # a line of a running attempt: nothing else changed (and many come)
            return {"seq": r.seq, "time": r.time.isoformat(), "type": e.type, "text": describe(e), "who": who(e),
                    "task_id": e.task_id, "attempt": e.attempt, "n": e.n, "line": e.line, "skipped": e.skipped,
                    "final": self.final is not None}
        status = self.status()
        task_id = getattr(e, "task_id", None)
        return {
            "seq": r.seq, "time": r.time.isoformat(), "type": e.type, "text": describe(e), "who": who(e),
            "task_id": task_id, "task": self.task(task_id),
            "state": status["state"] if status else "running", "phase": self.phase,
            "counts": status["counts"] if status else {}, "tasks_total": status["tasks_total"] if status else 0,
            "stage": status["stage"] if status else {"current": None, "total": 0},
            "final": self.final is not None,
        }

    def task(self, task_id: str | None) -> dict[str, Any] | None:
        """One task as the status shows it (state, attempt, where it runs), without composing
        the whole status."""
        t = self.job.task(task_id) if task_id else None
        return located(t, self.locations.get(str(task_id))) if t is not None else None

    def status(self) -> dict[str, Any] | None:
        if not self.job.requested:
            return None
        return compose(self.job.view(), self.locations, self.layout, "log")

    def stage_progress(self) -> list[dict[str, Any]]:
        """Per stage of the plan being run: its tasks, how many are done, and which run now."""
        status = self.status()
        states = {t["id"]: t for t in (status["tasks"] if status else [])}
        out = []
        for i, stage in enumerate(self.stages, 1):
            tasks = [states[t] for t in stage if t in states]
            running = [t for t in tasks if t["state"] in ("queued", "claimed")]
            out.append({
                "stage": i, "total": len(stage), "done": sum(1 for t in tasks if t["state"] == "succeeded"),
                "failed": sum(1 for t in tasks if t["state"] in ("failed", "timed_out")),
                "running": [t["id"] + (f" @ {place(t['provisioner'], t['worker'])}" if t["provisioner"] else "") for t in running],
            })
        return out
