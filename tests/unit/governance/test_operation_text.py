"""A schedule put over HTTP without `text` was listed as its bare verb (`check`); it reads as the
command line that would send it (services/governance/domain/operation_text.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from services.governance.domain.operation_text import operation_text
from services.tracker.governance import schedule_runs


def test_a_cluster_operation_reads_as_its_command_line_with_what_it_sets() -> None:
    assert operation_text("check", {"type": "CheckCluster", "cluster_id": "c1"}, "web") == "cluster check web"
    restart = {"type": "RestartServices", "cluster_id": "c1", "services": ["hbase", "zookeeper"], "rolling": {"batch": 2}}
    assert operation_text("restart", restart) == 'cluster restart c1 --services hbase,zookeeper --rolling {"batch":2}'
    assert operation_text("extend-lease", {"type": "ExtendLease", "cluster_id": "c1", "by_s": 604800.0}) == \
        "cluster extend-lease c1 --by-s 604800"


def test_defaults_given_in_full_are_left_out_and_jobs_and_creates_are_named() -> None:
    create = {"type": "CreateCluster", "name": "web", "template": "hadoop-small", "nodes": 3, "config": {}, "services": None}
    assert operation_text("create", create) == "cluster create web --template hadoop-small --nodes 3"
    assert operation_text("retry", {"type": "RetryJob", "job_id": "j1"}) == "job retry j1"


def test_a_schedule_stored_without_text_lists_its_operation() -> None:
    item: dict[str, Any] = {"entity": {"name": "n", "cron": "0 3 * * *", "verb": "check", "command": {"type": "CheckCluster", "cluster_id": "c1"}},
            "created_at": "2026-11-30T00:00:00+00:00", "runs": []}
    assert schedule_runs(item, datetime(2026, 11, 30, tzinfo=UTC))["operation"] == "cluster check c1"
    typed = {**item, "entity": {**item["entity"], "text": "cluster check web"}}
    assert schedule_runs(typed, datetime(2026, 11, 30, tzinfo=UTC))["operation"] == "cluster check web"
