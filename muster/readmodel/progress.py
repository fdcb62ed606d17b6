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
from .status import compose, located, running_state, task_records
from .timeline import describe, place, who

_ONE_TASK = frozenset({"TaskQueued", "TaskCompleted", "TaskAttemptFailed"})
"""Job events that change one task's state only (every provisioner record does too)."""
_NO_COUNT = frozenset({"TaskProgressed", "TasksRecorded"})


class JobProgress:
    def __init__(self) -> None:
        self.job = JobView()
        self.locations: dict[str, Record] = {}
        self.layout: Any = None
        self.phase = "forward"
        self.stages: list[list[str]] = []
        self._forward: list[list[str]] = []
        self._rollback: list[list[str]] = []
        self.final: Recorded | None = None
        # The counts and the current stage a summary sends, kept as events come: composing the
        # status at each event made a stream of a job from its start cost tasks x events.
        self._shown: dict[str, str] = {}
        self._counts: dict[str, int] = {}
        self._stages_of: dict[str, list[int]] = {}
        self._left: list[int] = []
        self._done: set[str] = set()
        self._stale = True

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
            self._rollback = self.stages
        elif e.type == "JobRetried" and getattr(e, "rollback", False):
            self.phase, self.stages = "rollback", self._rollback
        elif e.type == "JobRetried":
            self.phase, self.stages = "forward", self._forward
        elif e.type == "JobLayoutRetried":  # a new plan comes with the next layout
            self.phase, self.stages = "forward", []
        if e.type in FINAL_JOB_EVENTS:
            self.final = r
        task_id = getattr(e, "task_id", None)
        if e.type in _NO_COUNT or self._stale:
            return
        if isinstance(task_id, str) and (kind == "task" or e.type in _ONE_TASK):
            self._retally(task_id)
        else:
            self._stale = True  # a job-wide change (a plan, a retry, a cancel...): counted again when asked

    def moved(self, task_id: str) -> None:
        """A task's location changed outside `fold` (a subclass that merges them in place)."""
        if not self._stale:
            self._retally(task_id)

    def _shown_state(self, task_id: str) -> str | None:
        t = self.job.task(task_id)
        return None if t is None else self._located(task_id, t["state"], t["attempt"])

    def _located(self, task_id: str, state: str, attempt: int) -> str:
        """The task's state with its current attempt's claim (as `status.located` shows it)."""
        loc = self.locations.get(task_id)
        return str(running_state(state, attempt, *((loc.get("attempt"), loc.get("state")) if loc is not None else (None, None))))

    def _retally(self, task_id: str) -> None:
        old, new = self._shown.get(task_id), self._shown_state(task_id)
        if old != new:
            if old is not None:
                self._counts[old] -= 1
            if new is None:
                self._shown.pop(task_id, None)
            else:
                self._shown[task_id] = new
                self._counts[new] = self._counts.get(new, 0) + 1
        done = self.job.task_state.get(task_id) == "succeeded"
        if done != (task_id in self._done):
            (self._done.add if done else self._done.discard)(task_id)
            for i in self._stages_of.get(task_id, ()):
                self._left[i] += -1 if done else 1

    def _tally(self) -> None:
        # (one pass over `states`: a task's own state asks the whole plan once the job is cancelled)
        self._shown = {task_id: self._located(task_id, state, attempt) for task_id, state, attempt in self.job.states()}
        self._counts = {}
        for state in self._shown.values():
            self._counts[state] = self._counts.get(state, 0) + 1
        self._done = {t for t, s in self.job.task_state.items() if s == "succeeded"}
        self._stages_of = {}
        stages = [set(st) for st in self.job.stages]
        for i, st in enumerate(stages):
            for t in st:
                self._stages_of.setdefault(t, []).append(i)
        self._left = [len(st - self._done) for st in stages]
        self._stale = False

    def counts(self) -> dict[str, Any]:
        """What the status would say of the tasks (`counts`, `tasks_total`, `stage`, `state`),
        without composing it."""
        if self._stale:
            self._tally()
        current = next((i for i, left in enumerate(self._left, 1) if left), None)
        return {"counts": {k: v for k, v in sorted(self._counts.items()) if v}, "tasks_total": len(self.job.tasks),
                "stage": {"current": current, "total": len(self._left)}, "state": self.job.shown()}

    def summary(self, r: Recorded) -> dict[str, Any]:
        """What a progress stream sends for `r`, the event folded last."""
        e = r.event
        if e.type == "TaskProgressed":  # a line of a running attempt: nothing else changed (and many come)
            return {"seq": r.seq, "time": r.time.isoformat(), "type": e.type, "text": describe(e), "who": who(e),
                    "task_id": e.task_id, "attempt": e.attempt, "n": e.n, "line": e.line, "skipped": e.skipped,
                    "final": self.final is not None}
        status = self.counts() if self.job.requested else None
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
