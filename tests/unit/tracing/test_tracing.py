"""`muster.tracing`, the one module that starts and continues spans: off unless asked, ids fixed
beforehand for the spans made at their end, no secret in an attribute, ids on log lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

from muster import tracing

T = tracing.Tracer("muster.test")


def test_off_unless_the_variables_ask_for_an_exporter() -> None:
    assert not tracing.wanted({})
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"})
    assert tracing.wanted({"OTEL_TRACES_EXPORTER": "otlp"})
    assert not tracing.wanted({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"})
    assert not tracing.wanted({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"})


def test_off_nothing_of_opentelemetry_is_imported_and_spans_are_nothing() -> None:
    code = """
import sys
from muster import tracing
import services.planner.app, services.provisioner.worker, services.solver.service, muster.client
with tracing.Tracer("x").span("s", None, job="j") as span:
    assert span is None and tracing.current() is None and tracing.headers() is None
assert tracing.new_job(None) == (None, None)
print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_an_unknown_exporter_is_named() -> None:
    try:
        tracing.configure("x", env={"OTEL_TRACES_EXPORTER": "zipkin"})
    except ValueError as err:
        assert "zipkin" in str(err) and "otlp" in str(err)
    else:
        raise AssertionError("accepted an exporter muster does not know")
    assert not tracing.enabled()


def test_a_span_continues_a_callers_traceparent_and_its_context_travels(spans: Any) -> None:
    caller = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with T.span("request", caller, kind="server", tenant="acme") as outer:
        here = tracing.current()
        assert here is not None and here.startswith("00-0af7651916cd43dd8448eb211c80319c-")
        assert tracing.headers() == {"traceparent": here}
        with T.span("inner"):
            pass
    inner, request = spans.get_finished_spans()
    assert request.parent.span_id == 0xB7AD6B7169203331 and request.context.trace_id == 0x0AF7651916CD43DD8448EB211C80319C
    assert inner.parent.span_id == request.context.span_id
    assert request.attributes["muster.tenant"] == "acme" and outer is not None


def test_a_malformed_traceparent_starts_a_trace_of_its_own(spans: Any) -> None:
    for bad in ("garbage", "00-" + "0" * 32 + "-b7ad6b7169203331-01", "01-0af7651916cd43dd8448eb211c80319c-b7ad6b71692033-01"):
        assert tracing.valid(bad) is None
        with T.span("request", bad):
            pass
    assert all(s.parent is None for s in spans.get_finished_spans())


def test_the_job_span_is_made_at_its_end_with_the_ids_chosen_at_admission(spans: Any) -> None:
    caller = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    job, parent = tracing.new_job(caller)
    assert parent == caller and job is not None and job.split("-")[1] == caller.split("-")[1]
    attempt = tracing.attempt(job, "j1", "n1.create", 1)
    assert attempt is not None
    assert attempt == tracing.attempt(job, "j1", "n1.create", 1) != tracing.attempt(job, "j1", "n1.create", 2)
    start = datetime(2030, 1, 1, tzinfo=UTC)
    T.record("task n1.create", attempt, job, start, start + timedelta(seconds=2), error="boom", task="n1.create")
    T.record("job create", job, parent, start, start + timedelta(seconds=5))
    task, whole = spans.get_finished_spans()
    assert f"{whole.context.span_id:016x}" == job.split("-")[2] and whole.parent.span_id == 0xB7AD6B7169203331
    assert f"{task.context.span_id:016x}" == attempt.split("-")[2] and task.parent.span_id == whole.context.span_id
    assert (whole.end_time - whole.start_time) == 5 * 10**9 and task.status.status_code.name == "ERROR"
    root, _ = tracing.new_job(None)
    assert root is not None and root.split("-")[1] != caller.split("-")[1]


def test_no_attribute_names_a_secret(spans: Any) -> None:
    with T.span("s", None, job="j", token="tkn-1234", api_key="k", password="p", **{"ssh.host": "h", "Authorization": "Bearer x"}):
        pass
    [span] = spans.get_finished_spans()
    assert dict(span.attributes) == {"muster.job": "j", "ssh.host": "h"}


def test_log_lines_carry_the_trace_and_span_ids(spans: Any) -> None:
    assert tracing.log_ids(None, "info", {"event": "x"}) == {"event": "x"}  # outside any span
    with T.span("s"):
        line = tracing.log_ids(None, "info", {"event": "x"})
    [span] = spans.get_finished_spans()
    assert line["trace_id"] == f"{span.context.trace_id:032x}" and line["span_id"] == f"{span.context.span_id:016x}"
    json.dumps(line)


def test_the_consoles_trace_link_needs_a_url_with_the_trace_id_and_a_traced_job() -> None:
    job = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    env = {"MUSTER_TRACE_URL": "http://127.0.0.1:16686/trace/{trace_id}"}
    assert tracing.link(job, env) == "http://127.0.0.1:16686/trace/0af7651916cd43dd8448eb211c80319c"
    assert tracing.link(None, env) is None and tracing.link(job, {}) is None
    assert tracing.link(job, {"MUSTER_TRACE_URL": "javascript:alert({trace_id})"}) is None
    assert tracing.link(job, {"MUSTER_TRACE_URL": "http://ui/without/placeholder"}) is None


def test_the_job_page_links_its_trace(monkeypatch: Any) -> None:
    from contracts.events import JobRequested
    from contracts.records import Recorded
    from services.tracker.ui.reads import job_page

    job = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    requested = JobRequested(tenant="t", job_id="j", cluster_id="c", operation="create", request={}, trace=job)
    history = [Recorded(seq=1, subject="muster.evt.t.job.j", time=datetime(2030, 1, 1, tzinfo=UTC), event=requested)]
    page = job_page(history)
    assert page is not None and page["trace_url"] is None
    monkeypatch.setenv("MUSTER_TRACE_URL", "https://traces.example/t/{trace_id}")
    page = job_page(history)
    assert page is not None and page["trace_url"] == "https://traces.example/t/0af7651916cd43dd8448eb211c80319c"


def test_off_a_callers_context_is_passed_on_as_it_is(monkeypatch: Any) -> None:
    assert not tracing.enabled()
    monkeypatch.delenv("TRACEPARENT", raising=False)
    assert tracing.outgoing() is None
    monkeypatch.setenv("TRACEPARENT", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    assert tracing.outgoing() == {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    monkeypatch.setenv("TRACEPARENT", "not one")
    assert tracing.outgoing() is None


def test_the_exporter_follows_the_protocol_variable() -> None:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Grpc
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Http
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    from muster.tracing.sdk import _exporters

    assert [type(e) for e in _exporters({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})] == [Http]
    assert [type(e) for e in _exporters({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})] == [Grpc]
    assert [type(e) for e in _exporters({"OTEL_TRACES_EXPORTER": "otlp,console", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
                                         "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"})] == [Grpc, ConsoleSpanExporter]
