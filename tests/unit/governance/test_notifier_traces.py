"""A notification's delivery in its job's trace (docs/tracing.md, "The spans"): each attempt a
`notify <subscription>` span under the job's span (its run's, for a retried job), with its
attempt, status code, next attempt and error; a restarted notifier's too (the context is in
`NotificationQueued`'s header in the log); an untraced job's, none. In-memory log and exporter."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from contracts import subjects
from contracts.events import JobFailed, JobRequested, JobRetried, JobSucceeded
from muster import tracing
from muster.ports.eventlog import Append
from muster.ports.memory import MemoryEventLog
from services.notifier.app import Notifier
from services.notifier.domain.notices import BACKOFF_S

from .test_notifier import T0, Deliver, cluster, sub, world


def _span_id(traceparent: str) -> int:
    return int(traceparent.split("-")[2], 16)


async def _job(log: MemoryEventLog, notifier: Notifier, trace: str | None, *ends: Any, job_id: str = "j1") -> None:
    subject = subjects.job_events("a", job_id)
    await log.append(subject, [Append(JobRequested(tenant="a", job_id=job_id, cluster_id="c1", operation="delete", request={},
                                                   requested_by="uma", trace=trace), msg_id=f"{job_id}-r")])
    for i, end in enumerate(ends):
        [seq] = await log.append(subject, [Append(end, msg_id=f"{job_id}-{i}")])
        await notifier.on_job_event((await log.read(subject, start_seq=seq))[0])


async def test_each_attempt_is_a_span_of_the_jobs_trace_with_its_status_and_retry(spans: Any) -> None:
    job_trace, _ = tracing.new_job(None)
    assert job_trace is not None
    deliver = Deliver(failures=1)
    log, clock, notifier = await world([sub()], deliver)
    await cluster(log)
    await _job(log, notifier, job_trace, JobSucceeded(job_id="j1"))
    await clock.advance(0)
    await clock.advance(BACKOFF_S[0])
    finished = spans.get_finished_spans()
    attempts = [s for s in finished if s.name == "notify hook"]
    assert [s.attributes["muster.attempt"] for s in attempts] == [1, 2], [s.name for s in finished]
    job_id = int(job_trace.split("-")[1], 16)
    for s in attempts:
        assert s.context.trace_id == job_id and s.parent.span_id == _span_id(job_trace)
        assert s.attributes["muster.subscription"] == "hook" and s.attributes["muster.kind"] == "job_succeeded"
        assert s.attributes["muster.target"] == "subject"
    failed, delivered = attempts
    assert failed.status.status_code.name == "ERROR" and failed.status.description == "HTTP 503"
    assert failed.attributes["http.response.status_code"] == 503 and failed.attributes["muster.final"] is False
    assert failed.attributes["muster.next_at"] == (T0 + timedelta(seconds=BACKOFF_S[0])).isoformat()
    assert delivered.status.status_code.name == "UNSET" and delivered.attributes["http.response.status_code"] == 204
    assert delivered.attributes["muster.ok"] is True and "muster.next_at" not in delivered.attributes
    [queued] = [s for s in finished if s.name == "notification queued"]
    assert queued.context.trace_id == job_id and queued.parent.span_id == _span_id(job_trace)
    # Each outcome is appended inside its attempt's span: the log names it.
    outcomes = [r for r in await log.read(subjects.notification_events("a", "hook")) if r.type == "NotificationAttempted"]
    assert [_span_id(r.trace or "") for r in outcomes] == [s.context.span_id for s in attempts]


async def test_a_restarted_notifier_goes_on_in_the_jobs_trace(spans: Any) -> None:
    job_trace, _ = tracing.new_job(None)
    assert job_trace is not None
    log, clock, notifier = await world([sub()], Deliver(failures=1))
    await cluster(log)
    await _job(log, notifier, job_trace, JobFailed(job_id="j1", reason="no"))
    await clock.advance(0)
    notifier.close()
    restarted = Notifier(log, Deliver(), clock, lambda tenant: [sub()])
    await restarted.resume()
    await clock.advance(BACKOFF_S[0])
    attempts = [s for s in spans.get_finished_spans() if s.name == "notify hook"]
    assert [s.attributes["muster.attempt"] for s in attempts] == [1, 2]
    assert {s.parent.span_id for s in attempts} == {_span_id(job_trace)}


async def test_a_retried_jobs_notification_is_under_its_runs_span(spans: Any) -> None:
    job_trace, _ = tracing.new_job(None)
    log, clock, notifier = await world([sub()], Deliver())
    await cluster(log)
    await _job(log, notifier, job_trace, JobFailed(job_id="j1", reason="no"), JobRetried(job_id="j1", by="uma"),
               JobSucceeded(job_id="j1"))
    await clock.advance(0)
    attempts = {s.attributes["muster.kind"]: s for s in spans.get_finished_spans() if s.name == "notify hook"}
    assert attempts["job_failed"].parent.span_id == _span_id(job_trace or "")
    assert attempts["job_succeeded"].parent.span_id == _span_id(tracing.run(job_trace, "j1", 1) or "")


async def test_an_untraced_jobs_notification_makes_no_span(spans: Any) -> None:
    deliver = Deliver()
    log, clock, notifier = await world([sub()], deliver)
    await cluster(log)
    await _job(log, notifier, None, JobSucceeded(job_id="j1"))
    await clock.advance(0)
    assert len(deliver.sent) == 1 and spans.get_finished_spans() == ()
