"""The tracker's Prometheus metrics, in a registry of its own (one per app, so several apps in
one process, as in tests, never collide).

Hook for other services' metrics: pass collectors to `TrackerMetrics(extra=...)` (or call
`add`); `/metrics` renders them with the tracker's own. The planner's queue metrics (ready,
in-flight and retried tasks per job and class) are meant to arrive this way: a collector that
asks the planners over the bus at scrape time (see docs/tracker.md, "Metrics").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.registry import Collector

CONTENT_TYPE = CONTENT_TYPE_LATEST
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class TrackerMetrics:
    def __init__(self, extra: Iterable[Collector] = ()) -> None:
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

    def add(self, collector: Collector) -> None:
        self.registry.register(collector)

    def watch_index(self, size: Callable[[], int]) -> None:
        self.index_keys.set_function(size)

    def render(self) -> bytes:
        return generate_latest(self.registry)
