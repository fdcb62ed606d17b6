"""A job's trace as the planner makes it (docs/tracing.md), on the in-memory ports: the request's
span, the job's (made at its end with the id `JobRequested` recorded), planning, one span per
task attempt from its queueing to its outcome, the outcomes taken, and the marks of its turns;
after a takeover the next planner goes on in the same trace."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

from planner_harness import Harness

from contracts import subjects
from contracts.commands import Accepted, ApproveJob, CreateCluster, DeleteCluster, RejectJob, RetryJob
from contracts.events import JobRequested, JobRolledBack, JobSucceeded
from contracts.governance import GovernancePut
from muster import tracing
from muster.ports.eventlog import Append


def _hex(span_id: int) -> str:
    return f"{span_id:016x}"


def _requested(h: Harness, job_id: str) -> JobRequested:
    [requested] = h.events(job_id, "JobRequested")
    return requested


async def test_a_create_is_one_trace_request_job_plan_and_each_attempt(h: Harness, spans: Any) -> None:
    caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    with tracing.within(caller):
        reply = await h.send(CreateCluster(name="traced", template="hadoop-small", nodes=3))
    assert isinstance(reply, Accepted)
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobSucceeded)
    finished = spans.get_finished_spans()
    assert {s.context.trace_id for s in finished} == {0x4BF92F3577B34DA6A3CE929D0E0E4736}
    by_name = {s.name: s for s in finished}
    request, job, plan = by_name["request create"], by_name["job create"], by_name["plan"]
    assert request.parent.span_id == 0x00F067AA0BA902B7
    requested = _requested(h, reply.job_id)
    assert requested.trace is not None and requested.trace.split("-")[2] == _hex(job.context.span_id)
    assert requested.trace_parent is not None and requested.trace_parent.split("-")[2] == _hex(request.context.span_id)
    assert job.parent.span_id == request.context.span_id and plan.parent.span_id == job.context.span_id
    assert job.attributes["muster.job"] == reply.job_id and job.attributes["muster.state"] == "succeeded"
    assert job.start_time <= plan.start_time and job.end_time >= max(s.end_time for s in finished if s.name.startswith("task "))
    tasks = [s for s in finished if s.name.startswith("task ")]
    queued = [r.event for r in h.log.records if r.type == "TaskQueued"]
    assert len(tasks) == len(queued) > 9  # three nodes: create, confirm, bootstrap, installs...
    assert all(t.parent.span_id == job.context.span_id for t in tasks)
    # Each task message carried its attempt's span: a provisioner's claim and run go under it;
    # a segment's later steps each their own (docs/decisions/0058).
    by_id = {_hex(t.context.span_id): t for t in tasks}
    steps = {step.trace.split("-")[2]: step.task_id for m in h.queue.messages for step in m.then if step.trace}
    assert {c.split("-")[2] for c in h.queue.traces.values()} | set(steps) == set(by_id)
    assert all(by_id[span].name == f"task {task}" for span, task in steps.items())
    outcomes = [s for s in finished if s.name.startswith("outcome ")]
    assert len(outcomes) == len(tasks)
    assert all(by_id[_hex(o.parent.span_id)].name == "task " + o.name.removeprefix("outcome ") for o in outcomes)
    assert {s.attributes["muster.tenant"] for s in finished if s is not request} == {"default"}


async def test_retries_and_a_rollback_are_marked_and_the_job_span_fails(h: Harness, spans: Any) -> None:
    h.behaviour = lambda m: "fail" if m.action.value == "install" else "succeed"
    reply = await h.send(CreateCluster(name="failing", template="hadoop-small", nodes=2))
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobRolledBack)
    finished = spans.get_finished_spans()
    names = Counter(s.name for s in finished)
    assert names["attempt failed"] >= h.config.max_attempts and names["rollback planned"] == 1
    # Each failed attempt's mark says why (the event's `error`, as the log has it), as the rollback's does.
    marks = [s for s in finished if s.name == "attempt failed"]
    errors = {(r.event.task_id, r.event.attempt): r.event.error for r in h.log.records if r.type == "TaskAttemptFailed"}
    assert all(m.attributes.get("muster.reason") == errors[m.attributes["muster.task"], m.attributes["muster.attempt"]]
               for m in marks), \
        [dict(m.attributes) for m in marks]
    [job] = [s for s in finished if s.name == "job create"]
    assert job.status.status_code.name == "ERROR" and job.attributes["muster.state"] == "rolled_back"
    failed = [s for s in finished if s.name.startswith("task ") and s.status.status_code.name == "ERROR"]
    assert max(s.attributes["muster.attempt"] for s in failed) == h.config.max_attempts
    assert any(s.name.startswith("task undo.") for s in finished)  # the rollback's own tasks


async def test_the_planner_that_takes_the_job_over_goes_on_in_the_same_trace(h: Harness, spans: Any) -> None:
    h.behaviour = lambda m: "succeed" if m.action.value in ("create", "confirm") else "hold"
    reply = await h.send(CreateCluster(name="taken-over", template="hadoop-small", nodes=2))
    await h.settle()
    before = {s.context.span_id for s in spans.get_finished_spans()}
    await h.restart()
    h.behaviour = lambda m: "succeed"
    await h.release()
    assert isinstance(h.final(reply.job_id), JobSucceeded)
    finished = spans.get_finished_spans()
    [job] = [s for s in finished if s.name == "job create"]
    requested = _requested(h, reply.job_id)
    assert requested.trace is not None and _hex(job.context.span_id) == requested.trace.split("-")[2]
    assert {s.context.trace_id for s in finished} == {job.context.trace_id}
    after = [s for s in finished if s.context.span_id not in before]
    assert any(s.name.startswith("task ") for s in after)
    assert max(Counter(s.context.span_id for s in finished).values()) == 1  # no span made twice


async def test_a_job_from_before_traces_is_not_traced(h: Harness, spans: Any) -> None:
    tracing.shutdown()
    reply = await h.send(CreateCluster(name="old", template="hadoop-small", nodes=2))
    assert _requested(h, reply.job_id).trace is None
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    tracing.configure("test", exporter=(exporter := InMemorySpanExporter()))
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobSucceeded)
    assert exporter.get_finished_spans() == ()


async def test_a_retried_job_makes_each_run_s_span_once_the_retry_s_under_the_job_s(h: Harness, spans: Any) -> None:
    """`muster job retry`: the job's span was made again at the retry's end with the same id (a
    tracing UI showed it twice, Jaeger warned of a duplicate span id). Each run is a span of its
    own, made once: the first the job's (the id `JobRequested` recorded), the retry's a child of
    it, from the retry to its end, holding the retry's attempts and its `job retried` mark."""
    h.behaviour = lambda m: "fail" if m.action.value == "install" else "succeed"
    reply = await h.send(CreateCluster(name="retried", template="hadoop-small", nodes=2))
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobRolledBack)
    first_run = {s.context.span_id for s in spans.get_finished_spans()}
    h.behaviour = lambda m: "succeed"
    assert isinstance(await h.send(RetryJob(job_id=reply.job_id)), Accepted)
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobSucceeded)
    finished = spans.get_finished_spans()
    assert max(Counter(s.context.span_id for s in finished).values()) == 1  # no span made twice
    [job] = [s for s in finished if s.name == "job create"]
    [retry] = [s for s in finished if s.name == "job create (retry 1)"]
    requested = _requested(h, reply.job_id)
    assert requested.trace is not None and _hex(job.context.span_id) == requested.trace.split("-")[2]
    assert job.attributes["muster.state"] == "rolled_back" and retry.attributes["muster.state"] == "succeeded"
    assert retry.parent.span_id == job.context.span_id and retry.attributes["muster.run"] == 1
    [retried] = h.events(reply.job_id, "JobRetried")
    [at] = [r.time for r in h.log.records if r.event is retried]
    assert retry.start_time == int(at.timestamp() * 1e9) >= job.end_time
    later = [s for s in finished if s.context.span_id not in first_run]
    tasks = [s for s in later if s.name.startswith("task ")]
    assert tasks and all(t.parent.span_id == retry.context.span_id for t in tasks)
    [mark] = [s for s in finished if s.name == "job retried"]
    assert mark.parent.span_id == retry.context.span_id


async def test_a_retry_s_run_taken_over_keeps_its_span_its_start_read_back_from_the_log(h: Harness, spans: Any) -> None:
    h.behaviour = lambda m: "fail" if m.action.value == "install" else "succeed"
    reply = await h.send(CreateCluster(name="retried-over", template="hadoop-small", nodes=2))
    await h.settle()
    h.behaviour = lambda m: "succeed" if m.action.value in ("create", "confirm") else "hold"
    assert isinstance(await h.send(RetryJob(job_id=reply.job_id)), Accepted)
    await h.settle()
    await h.restart()  # the next planner folds the job from the log: the retry's time comes with its event
    h.behaviour = lambda m: "succeed"
    await h.release()
    assert isinstance(h.final(reply.job_id), JobSucceeded)
    finished = spans.get_finished_spans()
    assert max(Counter(s.context.span_id for s in finished).values()) == 1
    [job] = [s for s in finished if s.name == "job create"]
    [retry] = [s for s in finished if s.name == "job create (retry 1)"]
    [retried] = [r for r in h.log.records if r.type == "JobRetried"]
    assert retry.parent.span_id == job.context.span_id and retry.start_time == int(retried.time.timestamp() * 1e9)


async def test_a_jobs_approval_is_marked_in_its_trace_who_decided_and_when(h: Harness, spans: Any) -> None:
    """Session 32: a job that waited an hour for its approver showed in its trace as an hour of
    nothing between its plan and its first task: the wait, the rules and who approved it (or
    rejected it, or let it expire) are marks under the job's span, as a retry or a pause is."""
    cluster_id = await h.cluster_of(nodes=3)
    subject = subjects.governance_events("default", "rule", "deletes")
    await h.log.append(subject, [Append(GovernancePut(kind="rule", name="deletes", version=1, by="ada", entity={
        "name": "deletes", "operations": ["delete"], "expires_after_s": 600}), msg_id=f"{subject}:1")])
    reply = await h.send(DeleteCluster(cluster_id=cluster_id, request_id="del"), principal="uma")
    assert isinstance(reply, Accepted) and "waits for approval" in reply.warnings[0], reply
    await h.settle()
    assert isinstance(await h.send(ApproveJob(job_id=reply.job_id, comment="token=hunter2"), principal="apo"), Accepted)
    await h.settle()
    finished = spans.get_finished_spans()
    [job] = [s for s in finished if s.name == "job delete"]
    marks = {s.name: s for s in finished if s.parent is not None and s.parent.span_id == job.context.span_id}
    waits, approved = marks["waits for approval"], marks["job approved"]
    assert (waits.attributes["muster.rules"], approved.attributes["muster.by"]) == ("deletes", "apo")
    assert waits.start_time <= approved.start_time and (
        datetime.fromisoformat(waits.attributes["muster.expires_at"]) == datetime.fromisoformat(h.job(reply.job_id).approval["expires_at"]))
    assert not any("hunter2" in str(v) for s in finished for v in s.attributes.values())  # a comment is the approver's words: not on a span


async def test_a_rejected_or_expired_approval_is_marked_in_its_trace(h: Harness, spans: Any) -> None:
    cluster_id = await h.cluster_of(nodes=3)
    subject = subjects.governance_events("default", "rule", "deletes")
    await h.log.append(subject, [Append(GovernancePut(kind="rule", name="deletes", version=1, by="ada", entity={
        "name": "deletes", "operations": ["delete"], "expires_after_s": 60}), msg_id=f"{subject}:1")])
    first = await h.send(DeleteCluster(cluster_id=cluster_id, request_id="one"), principal="uma")
    assert isinstance(first, Accepted)
    await h.settle()
    assert isinstance(await h.send(RejectJob(job_id=first.job_id), principal="apo"), Accepted)
    await h.settle()
    second = await h.send(DeleteCluster(cluster_id=cluster_id, request_id="two"), principal="uma")
    assert isinstance(second, Accepted)
    await h.settle()
    await h.clock.advance(61)
    await h.settle()
    assert h.job(second.job_id).state == "failed", h.job(second.job_id).error
    finished = spans.get_finished_spans()
    by_job = {s.attributes.get("muster.job"): s for s in finished if s.name == "job delete"}
    rejected = [s for s in finished if s.name == "job rejected"]
    expired = [s for s in finished if s.name == "approval expired"]
    assert [s.parent.span_id for s in rejected] == [by_job[first.job_id].context.span_id]
    assert rejected[0].attributes["muster.by"] == "apo"
    assert [s.parent.span_id for s in expired] == [by_job[second.job_id].context.span_id]
