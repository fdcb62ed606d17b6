"""The Grafana dashboard (deploy/grafana/muster.json) charts only what the services export: every
metric its queries name is in the tracker's /metrics, scraped after a real job ran."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from contracts.events import JobSucceeded

from .conftest import Tracked

DASHBOARD = Path(__file__).parents[3] / "deploy" / "grafana" / "muster.json"
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}
WANTED = {  # what the dashboard must show, and the metric that shows it
    "queue lengths": "muster_planner_queue_length", "time in queue": "muster_planner_time_in_queue_seconds",
    "task durations": "muster_planner_task_duration_seconds", "planner lag": "muster_log_consumer_pending",
    "pool waiting line": "muster_pool_waiting_requests",
}


def _queries(doc: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]


def _used(doc: dict[str, Any]) -> set[str]:
    return {name for expr in _queries(doc) for name in re.findall(r"\bmuster_[a-z0-9_]+", expr)}


def test_the_dashboard_is_a_grafana_dashboard_with_a_datasource_to_choose() -> None:
    doc = json.loads(DASHBOARD.read_text())
    assert doc["uid"] and doc["schemaVersion"] >= 36
    assert [v["type"] for v in doc["templating"]["list"]] == ["datasource"]
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    for panel in doc["panels"]:
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}" and target["refId"] and target["expr"], panel["title"]
    assert set(WANTED.values()) <= _used(doc)


async def test_every_metric_the_dashboard_uses_is_exported(tracked: Tracked) -> None:
    reply = await tracked.create(nodes=2)
    assert isinstance(await tracked.client.wait(reply.job_id, timeout=60), JobSucceeded)
    await tracked.indexed_final(reply.job_id)
    text = await (await tracked.http.get("/metrics")).text()
    exported: set[str] = set()
    samples: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(text):
        exported |= {family.name, *(family.name + s for s in SUFFIXES.get(family.type, ())), *(s.name for s in family.samples)}
        samples[family.name] = family.samples
    missing = _used(json.loads(DASHBOARD.read_text())) - exported
    assert not missing, f"the dashboard charts metrics nobody exports: {sorted(missing)}"
    # After a job, the queues' figures and the planner's consumers are there with values.
    for name in ("muster_planner_queue_length", "muster_planner_time_in_queue_seconds", "muster_planner_task_duration_seconds"):
        assert any(s.labels.get("tenant") == "default" for s in samples[name]), name
    lag = {s.labels["consumer"]: s.value for s in samples["muster_log_consumer_pending"]}
    assert any(c.startswith("planner-tasks-") for c in lag) and "tracker-index" in lag, lag
