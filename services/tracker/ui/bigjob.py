"""What the console shows of a large job (pure): counts by stage instead of a chip per task, and
the tasks one page at a time (docs/ui.md, "Large jobs").

A 10,000-node create has about 110,000 tasks: a row and a chip for each is 110,000 DOM nodes and
seconds of work for the browser, and a status composed for every event of its stream is a pass
over every task each time. Above `BIG` tasks the job page shows instead one group per stage of
each plan (and the cleanups), each with its tasks counted by state; a group opens to at most
`GROUP_TASKS` of its tasks (those that need attention first); the task table is a page of
`PAGE_ROWS` rows, filtered by state and group. `JobFold` is the job folded event by event, kept
between requests (folds.py), so a page or a stream reads only what the log added since.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable
from typing import Any

from contracts.records import Recorded
from muster.readmodel.locations import merge_all, parse_subject, updates_from
from muster.readmodel.progress import JobProgress
from muster.readmodel.timeline import describe, who

from ..planner_view import FIELDS, recorded_for

BIG = 2000
"""Tasks above which the job page aggregates (a job of up to ~180 nodes keeps a chip per task)."""
PAGE_ROWS = 100
GROUP_TASKS = 200
TIMELINE_TAIL = 200
ATTENTION = ("failed", "timed_out", "claimed", "queued", "cancelled", "planned", "succeeded")
"""The order of a large job's task table: what needs a look first."""
REPLAN = frozenset({"JobPlanned", "RollbackPlanned", "CleanupQueued", "JobRetried", "JobLayoutRetried", "JobCancelRequested"})
"""Events that change many tasks at once (or the plan): counted again from scratch."""
TASK_STEPS = frozenset({"TaskQueued", "TaskCompleted", "TaskAttemptFailed", "TaskProgressed"})
"""Job events that change one task and not the job's own state."""


def planned_tasks(history: Iterable[Recorded]) -> int:
    """How many tasks the job's plans have (without folding anything)."""
    return sum(len(r.event.tasks) for r in history if r.type in ("JobPlanned", "RollbackPlanned"))


class JobFold(JobProgress):
    """The progress fold of one job up to log sequence `seq`, with the last timeline lines.
    `add` skips what it has folded already, so several readers may feed it the same events."""

    def __init__(self) -> None:
        super().__init__()
        self.seq = 0
        self.lines: deque[dict[str, Any]] = deque(maxlen=TIMELINE_TAIL)
        self.lines_total = 0
        self.trace: str | None = None
        self._plan: tuple[dict[str, tuple[str, str, int | None]], dict[str, list[list[Any]]]] | None = None
        self._status: tuple[int, dict[str, Any] | None] = (-1, None)

    def add(self, r: Recorded) -> bool:
        if r.seq <= self.seq:
            return False
        self.seq = r.seq
        parsed = parse_subject(r.subject)
        if parsed is not None and parsed[1] == "task":
            # In place: the base class copies every task's record for each task event.
            for u in updates_from(r.seq, r.subject, r.time.isoformat(), r.event):
                task_id = u.ident.get("task_id")
                if task_id is not None:
                    self.locations[task_id] = merge_all(self.locations.get(task_id), [u])  # type: ignore[assignment]
                    self.moved(task_id)
        else:
            self.fold(r)
            if r.type == "JobRequested":
                self.trace = getattr(r.event, "trace", None)
        if r.type in REPLAN:
            self._plan = None
        if r.type != "TaskProgressed":
            self.lines.append(line(r))
            self.lines_total += 1
        return True

    @property
    def size(self) -> int:
        return len(self.job.tasks)

    def now(self) -> dict[str, Any]:
        """The job's status as of `seq` (composed once per sequence: a pass over every task)."""
        if self._status[0] != self.seq:
            self._status = (self.seq, self.status())
        return self._status[1] or {"tasks": [], "state": "running", "error": None, "counts": {}, "tasks_total": 0,
                                   "stage": {"current": None, "total": 0}}

    def plan(self) -> tuple[dict[str, tuple[str, str, int | None]], dict[str, list[list[Any]]]]:
        """Each task's group (`group_keys`) and what each group's tasks do, kept until the plan
        changes."""
        if self._plan is None:
            keys = group_keys(self)
            kinds: dict[str, Counter[str]] = {}
            for task_id, t in self.job.tasks.items():
                kinds.setdefault(keys[task_id][0], Counter())[t["action"] + (f" {t['service']}" if t.get("service") else "")] += 1
            summed = {}
            for key, c in kinds.items():
                top = c.most_common(3)
                summed[key] = [[k, n] for k, n in top] + ([["other", c.total() - sum(n for _, n in top)]] if len(c) > 3 else [])
            self._plan = (keys, summed)
        return self._plan


def line(r: Recorded) -> dict[str, Any]:
    said = {"seq": r.seq, "time": r.time.isoformat(), "type": r.type, "text": describe(r.event), "who": who(r.event), "took_s": None}
    if r.type in FIELDS:  # the fold is shared by every viewer: what a tenant's people read too
        said[NEUTRAL] = describe(recorded_for(r).event)
    return said


NEUTRAL = "text_for_tenant"
"""A line's text with "a planner" for a planner's instance name (planner_view.py), where it differs."""


def lines_for(lines: Iterable[dict[str, Any]], operator: bool) -> list[dict[str, Any]]:
    """Timeline lines as the viewer may read them: a super admin or a service sees a planner's
    name, a tenant's people "a planner"."""
    return [{k: v for k, v in ({**said, "text": said[NEUTRAL]} if NEUTRAL in said and not operator else said).items() if k != NEUTRAL}
            for said in lines]


# -- groups ------------------------------------------------------------------------------------


def group_keys(fold: JobFold) -> dict[str, tuple[str, str, int | None]]:
    """Task id -> (group key, phase, stage): each stage of the forward plan and of the rollback,
    and the cleanups (tasks of neither plan)."""
    job = fold.job
    out: dict[str, tuple[str, str, int | None]] = {}
    for phase, stages in (("forward", job.forward_stages), ("rollback", job.rollback_stages or [])):
        for i, stage in enumerate(stages, 1):
            for task_id in stage:
                out.setdefault(task_id, (f"{phase}:{i}", phase, i))
    for task_id in job.tasks:
        out.setdefault(task_id, ("cleanup", "cleanup", None))
    return out


def group_title(key: str) -> str:
    phase, _, stage = key.partition(":")
    return "cleanup" if phase == "cleanup" else f"{phase} stage {stage}"


def aggregate(fold: JobFold) -> dict[str, Any]:
    """The large job's graph: one group per stage (in plan order: forward, cleanup, rollback)
    with its tasks counted by state and by what they do."""
    keys, kinds = fold.plan()
    status = fold.now()
    counts = Counter((keys[t["id"]][0], t["state"]) for t in status["tasks"])
    groups: dict[str, dict[str, Any]] = {}
    for key, phase, stage in keys.values():
        if key not in groups:
            groups[key] = {"key": key, "title": group_title(key), "phase": phase, "stage": stage, "total": 0, "counts": {}, "kinds": kinds[key]}
    for (key, state), n in sorted(counts.items()):
        groups[key]["total"] += n
        groups[key]["counts"][state] = n
    order = {"forward": 0, "cleanup": 1, "rollback": 2}
    shown = sorted(groups.values(), key=lambda g: (order[g["phase"]], g["stage"] or 0))
    return {"big": True, "groups": shown, "total": len(status["tasks"]), "seq": fold.seq}


# -- tasks, a page at a time -------------------------------------------------------------------


def rows(fold: JobFold, state: str | None = None, group: str | None = None, offset: int = 0,
         limit: int = PAGE_ROWS) -> tuple[list[dict[str, Any]], int]:
    """The tasks that match (a state, a group), those that need attention first, then in plan
    order; one page of them and how many match."""
    keys, _ = fold.plan()
    tasks = fold.now()["tasks"]
    rank = {s: i for i, s in enumerate(ATTENTION)}
    chosen = [(rank.get(t["state"], len(rank)), i) for i, t in enumerate(tasks)
              if (state is None or t["state"] == state) and (group is None or keys[t["id"]][0] == group)]
    chosen.sort()
    out = []
    for _, i in chosen[offset:offset + limit]:
        key, phase, stage = keys[tasks[i]["id"]]
        out.append({**tasks[i], "phase": phase, "stage": stage, "group": key})
    return out, len(chosen)
