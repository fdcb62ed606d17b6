"""Live progress of one job, folded event by event from its story (pure).

The job part is the planner's own Job aggregate, so the progress after each event is exactly
what the owner would answer at that point; task locations come from the provisioners' claims
and outcomes; the stages are those of the plan being run (forward, or the rollback).
"""

from __future__ import annotations

from typing import Any

from muster.bus.eventstore import Recorded
from muster.bus.repository import to_domain_event
from services.planner.domain.job import Job

from .locations import Record, parse_subject
from .status import compose, task_records
from .timeline import FINAL_EVENTS, describe, place, who


class JobProgress:
    def __init__(self) -> None:
        self.job: Job | None = None
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
            self.job = to_domain_event(Job, r).mutate(self.job)
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
        if e.type in FINAL_EVENTS:
            self.final = r

    def summary(self, r: Recorded) -> dict[str, Any]:
        """What a progress stream sends for `r`, the event folded last."""
        e = r.event
        status = self.status()
        task_id = getattr(e, "task_id", None)
        return {
            "seq": r.seq, "time": r.time.isoformat(), "type": e.type, "text": describe(e), "who": who(e),
            "task_id": task_id,
            "task": next((t for t in status["tasks"] if t["id"] == task_id), None) if status and task_id else None,
            "state": status["state"] if status else "running", "phase": self.phase,
            "counts": status["counts"] if status else {}, "tasks_total": status["tasks_total"] if status else 0,
            "stage": status["stage"] if status else {"current": None, "total": 0},
            "final": self.final is not None,
        }

    def status(self) -> dict[str, Any] | None:
        if self.job is None:
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
                "failed": sum(1 for t in tasks if t["state"] == "failed"),
                "running": [t["id"] + (f" @ {place(t['provisioner'], t['worker'])}" if t["provisioner"] else "") for t in running],
            })
        return out
