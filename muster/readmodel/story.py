"""A cluster's story folded up to a point of the log: what `muster replay` prints, kept in a form
that can go on from a later point (pure).

`muster replay` (and the console's slider) rebuild a cluster as it was at a log sequence or a
time, with each of its jobs as it stood then. Folded from the first event that costs the whole
story; a `Story` snapshot (`muster.snapshots`, kind `story`) holds everything the answer needs
at a sequence S, so a replay to a point after S reads only what follows S:

- the cluster itself: a `ClusterState` (a Story *is* one, plus the rest), its first and last
  event's time and sequence;
- every job its events name, in order, each as a `Mark`: the sequence of its last event up to S
  and its replay line (`state`, `counts`...), or None while it has no `JobRequested`.

A job with no event after S keeps its mark. A job that has any (the job running at S, a late
provisioner outcome, a retry) is folded again from its first event: marks hold no task state,
so a snapshot stays small (a few bytes per job) whatever the size of the jobs.

A point in time (`--at`) cuts each history at its first event recorded after that time; a
snapshot is only used for it if every event it holds was recorded at or before that time
(`latest`), so the cut falls in the events after S just as it would in the whole history.
`tests/unit/readmodel/test_story.py` checks the answers against the full fold, byte for byte.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from contracts.records import Recorded
from muster import snapshots

from .clusters import Catalog, ClusterState, cluster_view_of, job_ids
from .jobs import JobView
from .locations import TASK, parse_subject, updates_from
from .status import running_state

Mark = dict[str, Any]
"""`{"last": seq, "line": {...} | None}`: a job's last event up to S and its replay line."""


class Story(ClusterState):
    def __init__(self) -> None:
        super().__init__()
        self.seq = 0
        """Every event of the story up to this log sequence is folded in."""
        self.latest: datetime | None = None
        """The latest time of any event folded in (events' times need not follow the log's order)."""
        self.first_time: datetime | None = None
        self.last_seq = 0
        self.last_time: datetime | None = None
        """The cluster's own first and last event (`created_at`, `updated_at`, `seq`)."""
        self.jobs: dict[str, Mark] = {}
        """Every job the cluster's events name, in the order they first appear."""

    @property
    def started(self) -> bool:
        return self.first_time is not None

    def fits(self, seq: int | None, at: datetime | None) -> bool:
        """May a replay to this point start from here?"""
        return (seq is None or self.seq <= seq) and (at is None or self.latest is None or self.latest <= at)

    def take_own(self, tail: Sequence[Recorded]) -> list[str]:
        """Fold the cluster's own events after `seq` (already cut at the point); returns the
        jobs they name for the first time."""
        new = [j for j in job_ids(tail) if j not in self.jobs]
        for r in tail:
            self.apply(r.event)
            self.first_time = self.first_time or r.time
            self.last_seq, self.last_time = r.seq, r.time
            self._saw(r)
        for job in new:
            self.jobs[job] = {"last": 0, "line": None}
        return new

    def take_job(self, job_id: str, history: Sequence[Recorded]) -> None:
        """A job's whole history up to the point (it had events after `seq`, or is new)."""
        fold = JobFold()
        for r in history:
            fold.take(r)
        self.take_folded(job_id, fold)

    def take_folded(self, job_id: str, fold: JobFold) -> None:
        """`take_job` for a history folded as it was read (`JobFold`)."""
        if fold.latest is not None:
            self.latest = fold.latest if self.latest is None or fold.latest > self.latest else self.latest
        self.jobs[job_id] = fold.mark()

    def covers(self, seq: int) -> None:
        """Every event of the story up to `seq` is in (the point of a snapshot)."""
        self.seq = max(self.seq, seq)

    def _saw(self, r: Recorded) -> None:
        self.latest = r.time if self.latest is None or r.time > self.latest else self.latest

    def answer(self, seq: int | None, at: datetime | None, catalog: Catalog | None = None) -> dict[str, Any] | None:
        """What `muster replay` prints for this point (None: the cluster had no event yet);
        `catalog`: the tenant's services at that point, for the drift's repairs."""
        if self.first_time is None or self.last_time is None:
            return None
        included = self.last_seq
        jobs = []
        for job_id, m in self.jobs.items():
            if m["line"] is not None:
                included = max(included, m["last"])
                jobs.append({"id": job_id, **m["line"]})
        view = cluster_view_of(self, self.first_time, self.last_time, self.last_seq, catalog)
        if view is None:
            return None
        return {"as_of": {"seq": seq if seq is not None else included, "at": at.isoformat() if at else None,
                          "cluster_event_seq": self.last_seq, "cluster_event_time": self.last_time.isoformat()},
                "cluster": view, "jobs": jobs}


STORY = snapshots.register("story", Story)
"""Snapshots of stories: their fingerprint covers the read model's source and the events'."""


class JobFold:
    """A job's mark folded one event at a time, in log order, as `mark` folds the whole history:
    a job of 10,000 nodes has ~440,000 events, which need not all be held at once. Of a task's
    claims and outcomes only the latest attempt's state is kept (all a mark counts): every
    location update of a task writes its attempt and state, so the newest one is its record's."""

    def __init__(self) -> None:
        self.view = JobView()
        self.runs: dict[str, tuple[tuple[int, int], Any, Any]] = {}
        """task id -> (version, attempt, state) of its newest claim or outcome."""
        self.last = 0
        self.latest: datetime | None = None

    def take(self, r: Recorded) -> None:
        parsed = parse_subject(r.subject)
        kind = parsed[1] if parsed is not None else ""
        if kind == "job":
            self.view.apply(r)
        elif kind == "task":
            for u in updates_from(r.seq, r.subject, r.time.isoformat(), r.event):
                task_id = u.ident.get("task_id")
                held = self.runs.get(task_id) if task_id is not None else None
                if u.kind == TASK and task_id is not None and (held is None or u.version > held[0]):
                    self.runs[task_id] = (u.version, u.fields.get("attempt"), u.fields.get("state"))
        self.last = r.seq
        self.latest = r.time if self.latest is None or r.time > self.latest else self.latest

    def mark(self) -> Mark:
        if not self.view.requested:
            return {"last": self.last, "line": None}
        counts: dict[str, int] = {}
        for task_id, state, attempt in self.view.states():
            _, run_attempt, run_state = self.runs.get(task_id, (None, None, None))
            shown = running_state(state, attempt, run_attempt, run_state)
            counts[shown] = counts.get(shown, 0) + 1
        line = {"operation": self.view.operation, "state": self.view.shown(), "error": self.view.error or None,
                "counts": dict(sorted(counts.items())), "tasks_total": len(self.view.tasks)}
        return {"last": self.last, "line": line}


def job_of(subject: str) -> str | None:
    """The job a job, layout or task subject belongs to (`muster.evt.<tenant>.<kind>.<job>...`)."""
    parts = subject.split(".", 5)
    return parts[4] if len(parts) > 4 and parts[3] in ("job", "layout", "task") else None
