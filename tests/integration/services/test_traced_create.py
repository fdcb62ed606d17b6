"""One 3-node create through the real services on a real nats-server, traced with the in-memory
exporter: one trace from the HTTP caller's span to the job's end, every parent link intact
across the services' connections (the context in request, event and task headers)."""

from __future__ import annotations

import asyncio
import json
import os
from collections import Counter
from contextlib import AsyncExitStack
from typing import Any

import pytest
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from contracts import subjects
from contracts.commands import CreateCluster
from contracts.events import JobSucceeded
from contracts.governance import GovernancePut
from muster import tracing
from muster.bus.connect import connect, principal_of
from muster.bus.eventstore import Append
from services.governance.entrypoint import start_governance
from tests import cli_in_process
from tests.integration.governance.test_scheduler_failover import answered

pytestmark = pytest.mark.nats
CALLER = "00-5bf92f3577b34da6a3ce929d0e0e4736-10f067aa0ba902b7-01"


class Waiting(InMemorySpanExporter):
    """Keeps spans, and tells whoever waits for a span of a given name that it came."""

    def __init__(self) -> None:
        super().__init__()
        self.names: dict[str, asyncio.Event] = {}

    def export(self, spans: Any) -> SpanExportResult:
        result = super().export(spans)
        for span in spans:
            self.names.setdefault(span.name, asyncio.Event()).set()
        return result

    async def came(self, name: str, timeout: float = 30) -> None:
        await asyncio.wait_for(self.names.setdefault(name, asyncio.Event()).wait(), timeout)


@pytest.fixture
def exported() -> Any:
    exporter = Waiting()
    tracing.shutdown()
    tracing.configure("test", exporter=exporter)
    yield exporter
    tracing.shutdown()


async def test_a_create_over_http_is_one_trace_across_the_services(exported: Waiting, stack: Any) -> None:
    resp = await stack.http.post("/v1/clusters", json={"name": "traced", "template": "hadoop-small", "nodes": 3},
                                 headers={"traceparent": CALLER, "Idempotency-Key": "traced-1"})
    body = await resp.json()
    assert resp.status == 202, body
    assert isinstance(await stack.client.wait(body["job_id"], timeout=60), JobSucceeded)
    await exported.came("job create")
    spans: list[Any] = list(exported.get_finished_spans())
    assert {s.context.trace_id for s in spans} == {0x5BF92F3577B34DA6A3CE929D0E0E4736}
    by_id = {s.context.span_id: s for s in spans}
    assert len(by_id) == len(spans)  # no span made twice

    def chain(span: Any) -> list[str]:
        """The names from the span up to the caller's (every parent known)."""
        names = [span.name]
        while span.parent is not None and span.parent.span_id != 0x10F067AA0BA902B7:
            span = by_id[span.parent.span_id]  # a KeyError is a broken link
            names.append(span.name)
        return names

    chains = {s.name.split(" ")[0]: chain(s) for s in spans}
    assert chains["POST"] == ["POST /v1/clusters"]
    assert chains["muster"] == ["muster create", "POST /v1/clusters"]
    assert chains["job"] == ["job create", "request create", "muster create", "POST /v1/clusters"]
    assert chains["solve"][:2] == ["solve", "job create"] and chains["plan"][:2] == ["plan", "job create"]
    assert chains["claim"][1].startswith("task ") and chains["claim"][2] == "job create"
    assert chains["plugin"][1].startswith("run ") and chains["plugin"][2].startswith("task ")
    assert chains["outcome"][1].startswith("run ")  # the outcome event named the run that made it
    tasks = [s for s in spans if s.name.startswith("task ")]
    # Each claim and run in its own attempt's span (a segment's later steps too: docs/decisions/0058).
    assert all(by_id[s.parent.span_id].name == f"task {s.attributes['muster.task']}"
               for s in spans if s.name == "claim" or s.name.startswith("run "))
    kinds = Counter(s.name.split(" ")[0] for s in spans)
    assert kinds["task"] == kinds["claim"] == kinds["run"] == kinds["outcome"] == kinds["plugin"] > 10
    job = next(s for s in spans if s.name == "job create")
    assert all(job.start_time <= t.start_time and t.end_time <= job.end_time for t in tasks)
    run = next(s for s in spans if s.name.startswith("run "))
    assert {k: run.attributes[k] for k in ("muster.tenant", "muster.job", "muster.provisioner")} == {
        "muster.tenant": "default", "muster.job": body["job_id"], "muster.provisioner": "prov-test"}
    assert {s.instrumentation_scope.name for s in spans} == {
        "muster.tracker", "muster.client", "muster.planner", "muster.solver", "muster.provisioner"}
    for span in spans:  # no token of the request anywhere
        assert not any("Bearer" in str(v) or "token" in k.lower() for k, v in span.attributes.items())
    # How a user finds the trace (session 32): the job's own answer names it, and `muster status`
    # says it; before, it was in the job's first event only (curl, jq, cut).
    got = await stack.http.get(f"/v1/jobs/{body['job_id']}")
    assert (await got.json())["trace_id"] == "5bf92f3577b34da6a3ce929d0e0e4736"
    status = await cli_in_process.ran(["status", body["job_id"], "--nats-url", stack.url], dict(os.environ), 60)
    assert status.exit_code == 0 and "  trace 5bf92f3577b34da6a3ce929d0e0e4736\n" in status.output, status.output
    as_json = await cli_in_process.ran(["status", body["job_id"], "--json", "--nats-url", stack.url], dict(os.environ), 60)
    assert json.loads(as_json.stdout.splitlines()[0])["trace_id"] == "5bf92f3577b34da6a3ce929d0e0e4736", as_json.output


async def test_a_command_continues_the_callers_traceparent(exported: Waiting, stack: Any) -> None:
    """`muster cluster create` run under a caller's trace (`TRACEPARENT`, as OpenTelemetry's
    environment carriers have it): its request and the job are in that trace, under its span."""
    caller = "00-7bf92f3577b34da6a3ce929d0e0e4736-30f067aa0ba902b7-01"
    result = await cli_in_process.ran(["cluster", "create", "traced-cli", "--template", "hadoop-small", "--nodes", "2", "--json",
                                       "--nats-url", stack.url], {**os.environ, "TRACEPARENT": caller}, 60)
    assert result.exit_code == 0, result.output
    job_id = next(json.loads(line)["job_id"] for line in result.output.splitlines() if line.startswith("{"))
    assert isinstance(await stack.client.wait(job_id, timeout=60), JobSucceeded)
    await exported.came("job create")
    spans = [s for s in exported.get_finished_spans() if s.context.trace_id == 0x7BF92F3577B34DA6A3CE929D0E0E4736]
    by_name = {s.name: s for s in spans}
    parents = {name: s.parent.span_id for name, s in by_name.items() if s.parent is not None}
    assert parents["muster create"] == 0x30F067AA0BA902B7
    assert parents["request create"] == by_name["muster create"].context.span_id
    assert parents["job create"] == by_name["request create"].context.span_id


async def test_an_approval_is_in_the_jobs_trace_between_its_request_and_its_tasks(exported: Waiting, stack: Any) -> None:
    """Session 32: a job that waited for its approver showed nothing of it in its trace (an hour
    of nothing, then its tasks). The wait and the approval are marks under the job's span, the
    approval's own request a trace of its own (as `muster job retry`'s)."""
    subject = subjects.governance_events("default", "rule", "creates")
    await stack.store.append(subject, [Append(GovernancePut(kind="rule", name="creates", version=1, by="ada", entity={
        "name": "creates", "operations": ["create"], "allow_self_approval": True}), msg_id=f"{subject}:1")])
    resp = await stack.http.post("/v1/clusters", json={"name": "approved", "template": "hadoop-small", "nodes": 2},
                                 headers={"traceparent": CALLER, "Idempotency-Key": "approved-1"})
    body = await resp.json()
    assert resp.status == 202 and "waits for approval" in body["warnings"][0], body
    approve = await stack.http.post(f"/v1/jobs/{body['job_id']}/approve", json={"comment": "looked at it 7f3a"})
    assert approve.status == 202, await approve.text()
    assert isinstance(await stack.client.wait(body["job_id"], timeout=60), JobSucceeded)
    await exported.came("job create")
    spans: list[Any] = [s for s in exported.get_finished_spans() if s.context.trace_id == 0x5BF92F3577B34DA6A3CE929D0E0E4736]
    [job] = [s for s in spans if s.name == "job create"]
    under_job = {s.name: s for s in spans if s.parent is not None and s.parent.span_id == job.context.span_id}
    assert {"waits for approval", "job approved"} <= set(under_job), sorted(under_job)
    assert under_job["waits for approval"].attributes["muster.rules"] == "creates"
    [approved] = [r.event for r in await stack.store.read(subjects.job_events("default", body["job_id"]))
                  if r.type == "JobApproved"]
    assert under_job["job approved"].attributes["muster.by"] == approved.by
    assert not any("7f3a" in str(v) for s in spans for v in s.attributes.values())  # the comment is the approver's words
    tasks = [s for s in spans if s.name.startswith("task ")]
    assert tasks and under_job["job approved"].start_time <= min(t.end_time for t in tasks)


async def test_a_scheduled_operations_job_is_in_the_trace_its_tick_started(exported: Waiting, stack: Any) -> None:
    """Session 32: a tick's request carried no trace context, so a scheduled job's trace began at
    the planner, and the governance service that sent it was in no trace. Its `schedule <verb>`
    span is now the root of the job's trace, as a command's `muster <verb>` is."""
    made = await stack.client.request(CreateCluster(name="nightly", template="hadoop-small", nodes=2))
    assert isinstance(await stack.client.wait(made.job_id, timeout=60), JobSucceeded)
    async with AsyncExitStack() as services:
        nc = await connect(stack.url, name="governance")
        services.push_async_callback(nc.close)
        await start_governance(nc, services, "governance-traced")
        schedule = {"name": "check", "every_s": 1, "verb": "check", "owner": principal_of(nc), "missed": "skip",
                    "command": {"type": "CheckCluster", "cluster_id": made.cluster_id}}
        subject = subjects.governance_events("default", "schedule", "check")
        await stack.store.append(subject, [Append(GovernancePut(kind="schedule", name="check", entity=schedule, version=1, by="ada"),
                                                  msg_id=f"{subject}:1")])
        events = await answered(stack.store, 1, "check", tenant="default")
    [job_id] = [e.job_id for e in events if e.type == "ScheduleAnswered"][:1]
    assert job_id, events
    assert isinstance(await stack.client.wait(job_id, timeout=60), JobSucceeded)
    await exported.came("schedule check")
    await exported.came("job check")
    trace = (await (await stack.http.get(f"/v1/jobs/{job_id}")).json())["trace_id"]
    spans: dict[str, Any] = {s.name: s for s in exported.get_finished_spans() if f"{s.context.trace_id:032x}" == trace}
    tick, request, job = spans["schedule check"], spans["request check"], spans["job check"]
    assert tick.parent is None and tick.instrumentation_scope.name == "muster.governance"
    assert request.parent.span_id == tick.context.span_id and job.parent.span_id == request.context.span_id
    assert tick.attributes["muster.job"] == job_id
