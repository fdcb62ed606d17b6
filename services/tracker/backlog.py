"""What is waiting, for /metrics: how far each durable consumer of the log is behind (a
planner's lag is its consumers'), and each pool's waiting line. The dashboard
(deploy/grafana/muster.json) charts these next to the planners' queue metrics.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from nats.js.client import JetStreamContext
from prometheus_client.core import GaugeMetricFamily, Metric

from contracts import subjects


class LogLag:
    """Per durable consumer of EVENTS (`planner-tasks-<instance>`, `solvers`, `tracker-index`...),
    the events not yet delivered and those delivered but not yet acknowledged, asked of the server
    at scrape time (one request: the consumer list)."""

    def __init__(self, js: JetStreamContext) -> None:
        self.js = js
        self.consumers: list[tuple[str, int, int]] = []

    async def refresh(self) -> None:
        infos = await self.js.consumers_info(subjects.EVENTS_STREAM)
        self.consumers = sorted((i.config.durable_name, int(i.num_pending or 0), int(i.num_ack_pending or 0))
                                for i in infos if i.config.durable_name)  # ordered (ephemeral) readers are not behind anything

    def collect(self) -> Iterator[Metric]:
        pending = GaugeMetricFamily("muster_log_consumer_pending", "Events of the log not yet delivered to a durable consumer",
                                    labels=["consumer"])
        unacked = GaugeMetricFamily("muster_log_consumer_unacked", "Events delivered to a durable consumer, not yet acknowledged",
                                    labels=["consumer"])
        for name, waiting, held in self.consumers:
            pending.add_metric([name], float(waiting))
            unacked.add_metric([name], float(held))
        yield pending
        yield unacked


class PoolLines:
    """Each pool's waiting line (requests and the hosts they ask for, per tenant) and its hosts
    by state, from the tracker's own fold of the pools' events (nothing asked at scrape time)."""

    def __init__(self, pools: Callable[[], Mapping[str, Any]]) -> None:
        self.pools = pools

    def collect(self) -> Iterator[Metric]:
        requests = GaugeMetricFamily("muster_pool_waiting_requests", "Requests waiting in a pool's line", labels=["pool", "tenant"])
        hosts = GaugeMetricFamily("muster_pool_waiting_hosts", "Hosts the requests in a pool's line ask for", labels=["pool", "tenant"])
        states = GaugeMetricFamily("muster_pool_hosts", "A pool's hosts by state", labels=["pool", "state"])
        granted = GaugeMetricFamily("muster_pool_granted_requests", "Requests holding a pool's hosts", labels=["pool"])
        for name, pool in sorted(self.pools().items()):
            line: Counter[str] = Counter()
            asked: Counter[str] = Counter()
            for waiting in pool.queue_view():
                line[waiting["tenant"]] += 1
                asked[waiting["tenant"]] += int(waiting["hosts"])
            for tenant in sorted(line):
                requests.add_metric([name, tenant], float(line[tenant]))
                hosts.add_metric([name, tenant], float(asked[tenant]))
            summary = pool.summary()
            for state, n in sorted(summary["states"].items()):
                states.add_metric([name, str(state)], float(n))
            granted.add_metric([name], float(summary["granted"]))
        yield from (requests, hosts, states, granted)
