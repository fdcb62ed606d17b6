"""Queue metrics for scaling workers, per tenant and provisioner class (pure).

Fed from the log as the planner reads it: a task attempt is queued (`TaskQueued`), claimed
(`TaskClaimed`) and finished (`TaskSucceeded`/`TaskFailed`). Times come from the events, so the
same log gives the same figures.

Recommendation (Little's law): workers needed to keep up = arrival rate × mean task duration,
plus enough to drain the current backlog within `drain_target_s`, rounded up; never below
the tasks in progress now.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

WINDOW = 500  # recent samples kept per queue


@dataclass
class Queue:
    queued: dict[tuple[str, str, int], datetime] = field(default_factory=dict)
    claimed: dict[tuple[str, str, int], datetime] = field(default_factory=dict)
    waits: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    durations: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    arrivals: deque[datetime] = field(default_factory=lambda: deque(maxlen=WINDOW))
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
    queues: dict[tuple[str, str], Queue] = field(default_factory=dict)
    where: dict[tuple[str, str, int], tuple[str, str]] = field(default_factory=dict)

    def queued(self, tenant: str, klass: str, job: str, task: str, attempt: int, at: datetime) -> None:
        key = (job, task, attempt)
        q = self.queues.setdefault((tenant, klass), Queue())
        if key not in q.queued and key not in q.claimed:
            q.queued[key] = at
            q.arrivals.append(at)
            self.where[key] = (tenant, klass)

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

    def _queue(self, key: tuple[str, str, int]) -> Queue | None:
        where = self.where.get(key)
        return self.queues.get(where) if where else None

    def snapshot(self) -> list[dict[str, Any]]:
        out = []
        for (tenant, klass), q in sorted(self.queues.items()):
            duration = _mean(q.durations)
            span = (q.arrivals[-1] - q.arrivals[0]).total_seconds() if len(q.arrivals) > 1 else 0.0
            rate = (len(q.arrivals) - 1) / span if span > 0 else 0.0
            backlog = len(q.queued)
            needed = rate * duration + (backlog * duration / self.drain_target_s if duration else backlog)
            out.append({
                "tenant": tenant, "class": klass,
                "queue_length": backlog, "in_progress": len(q.claimed), "finished": q.finished,
                "time_in_queue_s": {"mean": _mean(q.waits), "p50": _p(q.waits, 0.5), "p99": _p(q.waits, 0.99)},
                "task_duration_s": {"mean": duration, "p50": _p(q.durations, 0.5), "p99": _p(q.durations, 0.99)},
                "arrival_rate_per_s": rate,
                "recommended_workers": max(len(q.claimed), math.ceil(needed)),
            })
        return out
