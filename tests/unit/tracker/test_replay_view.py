"""`muster replay`'s cluster view (services/tracker/render.render_replay), found in session 35's walk
through the real catalog: it said `current job <id>` of a job that had ended, and a long operation's
name pushed the jobs table's columns right."""

from __future__ import annotations

from typing import Any

from services.tracker.render import render_replay

J1, J2 = "11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222"


def state(job_id: str, jobs: list[tuple[str, str, str]]) -> dict[str, Any]:
    cluster = {"id": "c1", "name": "n1", "tenant": "default", "status": "active", "status_reason": "", "job_id": job_id,
               "template": "nats-cluster", "provider": "ns", "nodes": []}
    return {"cluster": cluster, "as_of": {"at": None, "seq": 40, "cluster_event_seq": 39, "cluster_event_time": "2026-12-02T05:00:00+00:00"},
            "jobs": [{"id": i, "operation": op, "state": st, "counts": {"succeeded": 3}, "error": ""} for i, op, st in jobs]}


def test_an_ended_job_is_the_clusters_last_one_and_a_running_one_its_current() -> None:
    ended = render_replay(state(J2, [(J1, "create", "succeeded"), (J2, "configure-restart", "succeeded")]))
    assert f"status active, last job {J2} (succeeded)" in ended and "current job" not in ended
    running = render_replay(state(J2, [(J1, "create", "succeeded"), (J2, "expand", "running")]))
    assert f"current job {J2} (running)" in running


def test_the_jobs_columns_line_up_whatever_the_operations_names() -> None:
    lines = render_replay(state(J2, [(J1, "create", "rolled_back"), (J2, "configure-restart", "succeeded")])).splitlines()
    rows = [line for line in lines if line.startswith("    ") and (J1 in line or J2 in line)]
    assert len(rows) == 2
    assert len({row.index("3 succeeded") for row in rows}) == 1, rows
    assert len({row.index(st) for row, st in zip(rows, ("rolled_back", "succeeded"), strict=True)}) == 1, rows
