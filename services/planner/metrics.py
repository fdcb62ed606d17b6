"""Queue metrics for scaling workers, per tenant and provisioner class (pure).

Fed from the log as the planner reads it: a task attempt is queued (`TaskQueued`), claimed
(`TaskClaimed`) and finished (`TaskSucceeded`/`TaskFailed`). Times come from the events; a
snapshot is taken at a time the caller gives (the planner's clock), so the same log and the
same time give the same figures.

Recommendation (Little's law): workers needed to keep up = arrival rate × mean task duration,
plus enough to drain the current backlog within `drain_target_s`, rounded up; never below the
tasks in progress now. The arrival rate counts the arrivals of the last `window_s` seconds
before the snapshot, so it falls to zero when work stops (it used to be the rate of the last
500 arrivals, which never fell). `scaling.py` turns the recommendation into workers to add or
remove against the live capacity.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

SAMPLES = 500  # recent waits and durations kept per queue
WINDOW_S = 60.0


@dataclass
class Queue:
    queued: dict[tuple[str, str, int], datetime] = field(default_factory=dict)
    claimed: dict[tuple[str, str, int], datetime] = field(default_factory=dict)
    waits: deque[float] = field(default_factory=lambda: deque(maxlen=SAMPLES))
    durations: deque[float] = field(default_factory=lambda: deque(maxlen=SAMPLES))
    arrivals: deque[datetime] = field(default_factory=deque)
    """Arrival times inside the window, oldest first (older ones are dropped as they age)."""
    first_arrival: datetime | None = None
    finished: int = 0


def _mean(values: deque[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _p(values: deque[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class QueueMetrics:
    drain_target_s: float = 60.0
    window_s: float = WINDOW_S
    queues: dict[tuple[str, str], Queue] = field(default_factory=dict)
    where: dict[tuple[str, str, int], tuple[str, str]] = field(default_factory=dict)

    def queued(self, tenant: str, klass: str, job: str, task: str, attempt: int, at: datetime) -> None:
        key = (job, task, attempt)
        q = self.queues.get((tenant, klass)) or self.queues.setdefault((tenant, klass), Queue())  # (not a Queue per call)
        if key not in q.queued and key not in q.claimed:
            q.queued[key] = at
            q.arrivals.append(at)
            q.first_arrival = q.first_arrival or at
            self.where[key] = (tenant, klass)
            self._age(q, at)

    def claimed(self, job: str, task: str, attempt: int, at: datetime) -> None:
        key = (job, task, attempt)
        q = self._queue(key)
        if q is not None and key in q.queued:
            q.waits.append(max(0.0, (at - q.queued.pop(key)).total_seconds()))
            q.claimed[key] = at

    def finished(self, job: str, task: str, attempt: int, at: datetime) -> None:
        key = (job, task, attempt)
        q = self._queue(key)
        if q is None:
            return
        start = q.claimed.pop(key, None) or q.queued.pop(key, None)
        if start is not None:
            q.durations.append(max(0.0, (at - start).total_seconds()))
            q.finished += 1
        self.where.pop(key, None)

    def dropped(self, job: str, task: str, attempt: int) -> None:
        """The attempt is waited for no more: a cancel ended it unclaimed (docs/decisions/0046),
        or it timed out (unclaimed, or its provisioner silent). Out of the backlog and of the
        work in progress, counted neither as finished nor in the durations; a late outcome of
        it changes nothing here."""
        key = (job, task, attempt)
        q = self._queue(key)
        if q is not None:
            q.queued.pop(key, None)
            q.claimed.pop(key, None)
        self.where.pop(key, None)

    def _queue(self, key: tuple[str, str, int]) -> Queue | None:
        where = self.where.get(key)
        return self.queues.get(where) if where else None

    def _age(self, q: Queue, now: datetime) -> None:
        while q.arrivals and (now - q.arrivals[0]).total_seconds() > self.window_s:
            q.arrivals.popleft()

    def rate(self, q: Queue, now: datetime) -> float:
        """Arrivals per second over the window before `now` (over the time since the first
        arrival plus a second while that is shorter: the first minute of work is not diluted)."""
        self._age(q, now)
        if not q.arrivals or q.first_arrival is None:
            return 0.0
        span = min(self.window_s, (now - q.first_arrival).total_seconds() + 1.0)
        return len(q.arrivals) / span

    def snapshot(self, now: datetime) -> list[dict[str, Any]]:
        out = []
        for (tenant, klass), q in sorted(self.queues.items()):
            duration = _mean(q.durations)
            rate = self.rate(q, now)
            backlog = len(q.queued)
            needed = rate * duration + (backlog * duration / self.drain_target_s if duration else backlog)
            out.append({
                "tenant": tenant, "class": klass,
                "queue_length": backlog, "in_progress": len(q.claimed), "finished": q.finished,
                "time_in_queue_s": {"mean": _mean(q.waits), "p50": _p(q.waits, 0.5), "p99": _p(q.waits, 0.99)},
                "task_duration_s": {"mean": duration, "p50": _p(q.durations, 0.5), "p99": _p(q.durations, 0.99)},
                "arrival_rate_per_s": rate,
                "window_s": self.window_s,
                "recommended_workers": max(len(q.claimed), math.ceil(needed - 1e-9)),
            })
        return out
