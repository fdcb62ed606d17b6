"""A job's trace across real processes (docs/tracing.md): every service exports its spans over
OTLP/HTTP to a receiver this test runs; the planner is killed with SIGKILL mid-job, and the one
that takes the job over goes on in the same trace, from the log (the job's span, with the id
`JobRequested` recorded, is made by the new planner at the job's end)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from contracts import subjects
from contracts.events import JobSucceeded
from muster.bus.connect import bearer_headers
from muster.bus.eventstore import EventStore

from .harness import FaultStack, demo_catalog, nth
from .otlp import Receiver

pytestmark = [pytest.mark.fault, pytest.mark.timeout(120)]
T = "default"
CALLER_TRACE = "6bf92f3577b34da6a3ce929d0e0e4736"
CALLER = f"00-{CALLER_TRACE}-20f067aa0ba902b7-01"


async def test_every_service_exports_the_jobs_trace_and_it_survives_a_planner_kill(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    receiver = await Receiver().start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    try:
        async with await FaultStack.single(tmp_path) as fs:
            await fs.load_catalog(T, demo_catalog(latency_ms="100-200"))
            job: dict[str, Any] = {}

            async def create() -> None:
                async with aiohttp.ClientSession() as http, http.post(
                        f"{fs.deployment.tracker_url}/v1/clusters", json={"name": "traced", "template": "hadoop-small", "nodes": 3},
                        headers={**bearer_headers(os.environ["MUSTER_TOKEN"]), "traceparent": CALLER,
                                 "Idempotency-Key": "traced-kill"}) as resp:
                    job.update(await resp.json())
                    assert resp.status == 202, job

            await fs.when(f"muster.evt.{T}.job.>", nth("TaskCompleted", 3), create)
            killed = await fs.kill("planner")
            restarted = await fs.restart("planner")
            assert isinstance(await fs.wait_final(job["job_id"], timeout=60), JobSucceeded)
            await receiver.came("job create")
            history = await EventStore(fs.conn).read_many(subjects.job_filters(T, job["job_id"]))
            logs = {p.stem: p.read_text(errors="replace") for p in (fs.deployment.data_dir / "logs").glob("*.log")}
    finally:
        await receiver.stop()

    spans = [s for s in receiver.spans if s.trace_id == CALLER_TRACE]
    assert {s.service for s in spans} >= {"muster-tracker", "muster-planner", "muster-solver", "muster-provisioner"}
    by_id = {s.span_id: s for s in spans}
    [whole] = [s for s in spans if s.name == "job create"]
    requested = history[0].event
    assert requested.trace.split("-")[1:3] == [CALLER_TRACE, whole.span_id]
    assert whole.instance.endswith(f"-{restarted}") and whole.attributes["muster.state"] == "succeeded"
    # Up the tree from the job's span to the HTTP caller's: made by three processes, all there.
    request = by_id[whole.parent]
    client = by_id[request.parent]
    post = by_id[client.parent]
    assert (request.name, request.instance.endswith(f"-{killed}"), client.name, post.name, post.parent) == (
        "request create", True, "muster create", "POST /v1/clusters", CALLER.split("-")[2])
    assert by_id[next(s for s in spans if s.name == "solve").parent] is whole
    # The attempts the new planner saw to their end: their spans (the new planner's) hold the
    # provisioner's claim and run, whose context came in the task messages' headers.
    adopted = next(r.seq for r in history if r.type == "JobAdopted")
    after = {r.event.task_id for r in history if r.type == "TaskCompleted" and r.seq > adopted}
    tasks = {s.attributes["muster.task"]: s for s in spans if s.name.startswith("task ") and s.instance.endswith(f"-{restarted}")}
    assert after and after <= set(tasks)
    for task in after:
        runs = [s for s in spans if s.name == f"run {task}"]
        assert runs and all(s.parent == tasks[task].span_id and s.service == "muster-provisioner" for s in runs)
        assert tasks[task].parent == whole.span_id
    # The services' JSON log lines written inside the job's spans carry its trace id.
    traced = {name for name, text in logs.items() for line in text.splitlines()
              if line.startswith("{") and json.loads(line).get("trace_id") == CALLER_TRACE}
    assert {"planner", "provisioner"} <= traced, (sorted(traced), sorted(logs))
