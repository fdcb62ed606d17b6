"""A pool's waiting line and hosts as the tracker exports them (services/tracker/backlog.py)."""

from __future__ import annotations

from pool_support import pool, request
from prometheus_client.core import Metric

from services.tracker.backlog import PoolLines


def _values(metric: Metric) -> dict[tuple[str, ...], float]:
    return {tuple(s.labels.values()): s.value for s in metric.samples}


def test_the_waiting_line_counts_requests_and_the_hosts_they_ask_for_per_tenant() -> None:
    p = pool(3)
    for req in (request("r1", 3, tenant="t1"), request("r2", 2, tenant="t2"), request("r3", 1, tenant="t1"), request("r4", 2, tenant="t1")):
        p.request(req)
    p.serve()  # r1 holds every host; the others wait
    metrics = {m.name: m for m in PoolLines(lambda: {"p": p}).collect()}
    assert _values(metrics["muster_pool_waiting_requests"]) == {("p", "t1"): 2, ("p", "t2"): 1}
    assert _values(metrics["muster_pool_waiting_hosts"]) == {("p", "t1"): 3, ("p", "t2"): 2}
    assert _values(metrics["muster_pool_granted_requests"]) == {("p",): 1}
    states = _values(metrics["muster_pool_hosts"])
    assert sum(states.values()) == 3 and ("p", "free") not in states


def test_no_pool_no_samples_but_the_families_are_there() -> None:
    names = [m.name for m in PoolLines(lambda: {}).collect()]
    assert names == ["muster_pool_waiting_requests", "muster_pool_waiting_hosts", "muster_pool_hosts", "muster_pool_granted_requests"]
