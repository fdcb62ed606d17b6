"""The tracker's Prometheus metrics, in a registry of its own (one per app, so several apps in
one process, as in tests, never collide), and the planners' queue metrics.

Hook for other services' metrics: a `Source` is a collector that is refreshed (asynchronously,
over the bus) before each scrape; pass it to `TrackerMetrics(sources=...)`. `PlannerQueues`
is the first: it asks every planner on `muster.metrics.planner` and gathers the answers that
arrive within a short window (see docs/tracker.md, "Metrics").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from contracts import subjects
from muster.scaling import ClassScaling, by_class, unserved

log = structlog.get_logger("muster.tracker")

CONTENT_TYPE = CONTENT_TYPE_LATEST
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class Source(Collector, Protocol):
    async def refresh(self) -> None: ...


class TrackerMetrics:
    def __init__(self, extra: Iterable[Collector] = (), sources: Iterable[Source] = ()) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("muster_tracker_http_requests", "HTTP requests answered", ["method", "route", "status"], registry=r)
        self.latency = Histogram("muster_tracker_http_request_duration_seconds", "HTTP request latency", ["route"],
                                 buckets=BUCKETS, registry=r)
        self.status_source = Counter("muster_tracker_job_status", "Job status answers by source (owner or log)", ["source"], registry=r)
        self.location_events = Counter("muster_tracker_location_events", "Events taken from the log by the index", registry=r)
        self.location_updates = Counter("muster_tracker_location_updates", "Location updates by outcome (applied, superseded)",
                                        ["outcome"], registry=r)
        self.streams = Gauge("muster_tracker_sse_streams", "Open progress streams", registry=r)
        self.index_keys = Gauge("muster_tracker_index_keys", "Records in the location index mirror", registry=r)
        for collector in extra:
            self.add(collector)
        self.sources = list(sources)
        for source in self.sources:
            self.add(source)

    def add(self, collector: Collector) -> None:
        self.registry.register(collector)

    def watch_index(self, size: Callable[[], int]) -> None:
        self.index_keys.set_function(size)

    async def render(self) -> bytes:
        for source in self.sources:
            try:
                await source.refresh()
            except Exception as err:  # noqa: BLE001 - a scrape shows what it can; the tracker's own always
                log.warning("metrics source failed", source=type(source).__name__, error=str(err))
        return generate_latest(self.registry)


class PlannerQueues:
    """The planners' task-queue metrics, asked for over the bus at scrape time (every planner
    answers `muster.metrics.planner`; answers arriving within `window` seconds count)."""

    def __init__(self, nc: Client, window: float = 0.2, expected: int | None = None) -> None:
        self.nc = nc
        self.window = window
        self.expected = expected
        self.answers: list[dict[str, Any]] = []

    async def refresh(self) -> None:
        """Scatter-gather: until `expected` planners answered, or the window closes."""
        answers: list[dict[str, Any]] = []
        enough = asyncio.Event()

        async def on_answer(msg: Msg) -> None:
            try:
                answers.append(json.loads(msg.data))
            except ValueError:
                return
            if self.expected is not None and len(answers) >= self.expected:
                enough.set()

        inbox = self.nc.new_inbox()
        sub = await self.nc.subscribe(inbox, cb=on_answer)
        try:
            await self.nc.publish(subjects.PLANNER_METRICS, b"", reply=inbox)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(enough.wait(), self.window)
        finally:
            await sub.unsubscribe()
        self.answers = [a for a in answers if isinstance(a, dict)]

    def collect(self) -> Iterator[Metric]:
        labels = ["planner", "tenant", "class"]
        gauges = {
            "queue_length": GaugeMetricFamily("muster_planner_queue_length", "Tasks queued, not yet claimed", labels=labels),
            "in_progress": GaugeMetricFamily("muster_planner_tasks_in_progress", "Tasks claimed, not yet finished", labels=labels),
            "arrival_rate_per_s": GaugeMetricFamily("muster_planner_arrival_rate_per_second", "Tasks queued per second", labels=labels),
            "recommended_workers": GaugeMetricFamily("muster_planner_recommended_workers", "Workers the queue needs", labels=labels),
        }
        finished = CounterMetricFamily("muster_planner_tasks_finished", "Tasks finished since the planner started", labels=labels)
        timing = {
            "time_in_queue_s": GaugeMetricFamily("muster_planner_time_in_queue_seconds", "Time tasks waited", labels=[*labels, "stat"]),
            "task_duration_s": GaugeMetricFamily("muster_planner_task_duration_seconds", "Time tasks ran", labels=[*labels, "stat"]),
        }
        for answer in self.answers:
            for q in answer.get("queues") or ():
                try:
                    key = [str(answer.get("planner", "")), str(q["tenant"]), str(q["class"])]
                    for name, family in gauges.items():
                        family.add_metric(key, float(q[name]))
                    finished.add_metric(key, float(q["finished"]))
                    for name, family in timing.items():
                        for stat, value in sorted(q[name].items()):
                            family.add_metric([*key, stat], float(value))
                except (KeyError, TypeError, ValueError, AttributeError):
                    continue  # an answer of another shape: skip it
        yield from gauges.values()
        yield finished
        yield from timing.values()
        yield from _limit_metrics(self.answers)


def _limit_metrics(answers: list[dict[str, Any]]) -> Iterator[Metric]:
    """The planners' concurrency limits (docs/planner.md, "Concurrency limits"): per limit, the
    tasks in flight against it and those held back."""
    labels = ["planner", "kind", "tenant", "provider"]
    families = {
        "limit": GaugeMetricFamily("muster_planner_limit", "A concurrency limit (tasks in flight at once)", labels=labels),
        "in_flight": GaugeMetricFamily("muster_planner_limit_in_flight", "Tasks in flight against a limit", labels=labels),
        "held": GaugeMetricFamily("muster_planner_limit_held", "Ready tasks a limit holds back", labels=labels),
    }
    for answer in answers:
        for entry in answer.get("limits") or ():
            try:
                key = [str(answer.get("planner", "")), str(entry["kind"]), str(entry["tenant"]), str(entry.get("provider", ""))]
                for name, family in families.items():
                    if entry.get(name) is not None:
                        family.add_metric(key, float(entry[name]))
            except (KeyError, TypeError, ValueError, AttributeError):
                continue
    yield from families.values()


class WorkerScaling:
    """Workers to add or remove per provisioner class, for an external autoscaler: the
    planners' recommendations (from `planners`, refreshed first in the same scrape) against
    the live capacity of the registered provisioners (`muster.scaling`)."""

    def __init__(self, nc: Client, planners: PlannerQueues) -> None:
        self.nc = nc
        self.planners = planners
        self.classes: dict[str, ClassScaling] = {}
        self.unserved: dict[tuple[str, str], int] = {}

    async def refresh(self) -> None:
        from services.provisioner.presence import live_provisioners

        live = await live_provisioners(self.nc)
        self.classes = by_class(self.planners.answers, live)
        self.unserved = unserved(self.planners.answers, live)

    def collect(self) -> Iterator[Metric]:
        families = {
            "needed": GaugeMetricFamily("muster_workers_needed", "Worker slots the queued work needs (all planners)", labels=["class"]),
            "capacity": GaugeMetricFamily("muster_workers_capacity", "Worker slots of live provisioners, not draining", labels=["class"]),
            "delta": GaugeMetricFamily("muster_workers_delta", "Slots to add (> 0) or that could go (< 0)", labels=["class"]),
            "provisioners": GaugeMetricFamily("muster_provisioners_live", "Live provisioners, not draining", labels=["class"]),
        }
        for name, c in sorted(self.classes.items()):
            for field_name, family in families.items():
                family.add_metric([name], float(getattr(c, field_name)))
        yield from families.values()
        waiting = GaugeMetricFamily("muster_tasks_unserved", "Tasks queued for a tenant and class no live provisioner serves",
                                    labels=["tenant", "class"])
        for (tenant, klass), n in sorted(self.unserved.items()):
            waiting.add_metric([tenant, klass], float(n))
        yield waiting
