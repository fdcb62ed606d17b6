"""`muster.tracing`, the one module that starts and continues spans: off unless asked, ids fixed
beforehand for the spans made at their end, no secret in an attribute, ids on log lines."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
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


def test_an_exception_marks_its_span_by_its_type_alone(spans: Any) -> None:
    """An exception's message may hold a field's value (a plugin's, a validation error's input):
    the span says which exception ended it, not what it said, and keeps no stack."""
    try:
        with T.span("outer"), T.span("inner"):
            raise RuntimeError("cannot log in with password hunter22")
    except RuntimeError:
        pass
    for span in spans.get_finished_spans():
        assert span.status.status_code.name == "ERROR" and span.status.description == "RuntimeError", span.name
        assert not span.events and "hunter22" not in repr(dict(span.attributes or {}))


def test_a_collector_that_does_not_answer_holds_no_process_at_its_end(monkeypatch: Any) -> None:
    """A command's spans leave as it exits: a collector that takes the connection and never
    answers would hold it for the SDK's 30 s (the exporter's timeout is 60 s here); it is
    given `OTEL_BSP_EXPORT_TIMEOUT` (muster's default: 2 s)."""
    from muster.tracing import sdk

    silent = socket.create_server(("127.0.0.1", 0))  # listens, never accepts: no answer comes
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{silent.getsockname()[1]}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "60")
    monkeypatch.setenv("OTEL_BSP_EXPORT_TIMEOUT", "200")
    made: list[Any] = []
    real = sdk._exporters

    def keeping(env: Any) -> list[Any]:
        made.extend(real(env))
        return made

    monkeypatch.setattr(sdk, "_exporters", keeping)
    tracing.shutdown()
    try:
        assert tracing.configure("test")
        with T.span("s"):
            pass
        ending = threading.Thread(target=tracing.shutdown, daemon=True)
        ending.start()
        ending.join(20)
        assert not ending.is_alive(), "the process's end waited for a collector that does not answer"
    finally:
        # A process ends here, and the SDK's thread with it. This one goes on: its exporter, left
        # retrying for 60 s, would draw its backoff's jitter from the `random` module under
        # whatever test runs next, and Hypothesis fails a test whose strategy saw `random` move
        # ("Do not use the `random` module inside strategies", a FlakyFailure of the planner's and
        # the solver's property tests on this worker).
        for exporter in made:
            exporter.shutdown()  # its retries stop at once
        silent.close()  # and the request it waits on is refused
        for thread in threading.enumerate():
            if thread.name == "muster-trace-flush":
                thread.join(20)
                assert not thread.is_alive(), "the SDK's export went on after its exporter was shut down"
        tracing.shutdown()


def test_the_exit_wait_follows_the_batch_export_timeout() -> None:
    from muster.tracing.sdk import EXIT_WAIT_S, exit_wait_s

    assert exit_wait_s({}) == EXIT_WAIT_S == 2.0
    assert exit_wait_s({"OTEL_BSP_EXPORT_TIMEOUT": "30000"}) == 30.0
    assert exit_wait_s({"OTEL_BSP_EXPORT_TIMEOUT": "soon"}) == EXIT_WAIT_S


def test_an_unknown_protocol_is_named_not_taken_for_http() -> None:
    for env in ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "gprc"},
                {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}):
        try:
            tracing.configure("x", env=env)
        except tracing.TracingError as err:
            assert repr(next(v for k, v in env.items() if "PROTOCOL" in k)) in str(err) and "grpc" in str(err)
        else:
            tracing.shutdown()
            raise AssertionError(f"exported with a protocol muster does not speak: {env}")
        assert not tracing.enabled()


def test_a_command_names_the_tracing_variable_it_cannot_follow() -> None:
    from click.testing import CliRunner

    from muster.cli import main

    result = CliRunner().invoke(main, ["cluster", "list"], env={"OTEL_TRACES_EXPORTER": "jaeger"})
    assert result.exit_code == 2 and not isinstance(result.exception, ValueError)
    assert "OTEL_TRACES_EXPORTER='jaeger': muster knows otlp, console and none" in result.output


def test_muster_up_says_where_spans_go_and_refuses_what_it_cannot_export(tmp_path: Any) -> None:
    from click.testing import CliRunner

    from muster.runtime.cli import up
    from muster.tracing.sdk import describe

    assert describe({}) is None and describe({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}) is None
    assert describe({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318/"}) == "OTLP http/protobuf to http://127.0.0.1:4318/v1/traces"
    assert describe({"OTEL_TRACES_EXPORTER": "otlp,console", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}) == \
        "OTLP grpc to http://localhost:4317, console (stderr, a JSON line per span: a service's in its log)"
    assert describe({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://c.example/t"}) == "OTLP http/protobuf to https://c.example/t"
    # Refused before anything starts (each service would exit at its start, one after the other).
    result = CliRunner().invoke(up, ["--data-dir", str(tmp_path / "data")], env={"OTEL_TRACES_EXPORTER": "jaeger"})
    assert result.exit_code == 2 and "OTEL_TRACES_EXPORTER='jaeger'" in result.output, result.output
    assert not (tmp_path / "data").exists()


def test_the_collectors_ca_file_is_used_whatever_requests_bundle_the_environment_names(monkeypatch: Any, tmp_path: Any) -> None:
    """`OTEL_EXPORTER_OTLP_CERTIFICATE` names the CA of an HTTPS collector; requests let
    $REQUESTS_CA_BUNDLE / $CURL_CA_BUNDLE (the system's roots, in many images) win over it, and
    every export failed verification."""
    import http.server
    import ssl

    import trustme
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExportResult

    from muster.tracing.sdk import _exporters

    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "collector-ca.pem"))
    received: list[bytes] = []

    class Collector(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Collector)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", str(tmp_path / "collector-ca.pem"))
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "5")
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tmp_path / "other.pem"))
        monkeypatch.setenv("CURL_CA_BUNDLE", str(tmp_path / "other.pem"))
        trustme.CA().cert_pem.write_to_path(str(tmp_path / "other.pem"))  # the bundle: not the collector's CA
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"https://127.0.0.1:{server.server_port}/v1/traces")
        [exporter] = _exporters(os.environ)
        span = TracerProvider().get_tracer("t").start_span("s")
        span.end()
        try:
            assert exporter.export([span]) == SpanExportResult.SUCCESS and len(received) == 1
        finally:
            exporter.shutdown()
    finally:
        server.shutdown()
        server.server_close()


def test_a_collector_file_that_is_not_there_is_named(tmp_path: Any) -> None:
    """The SDK reads `..._CERTIFICATE` (and a client's pair) at each export: a path that is not
    there made every batch fail, in every process's log, after a start that said nothing."""
    there = tmp_path / "ca.pem"
    there.write_text("")
    for variable in ("OTEL_EXPORTER_OTLP_CERTIFICATE", "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY"):
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://127.0.0.1:4318", variable: str(tmp_path / "gone.pem")}
        try:
            tracing.configure("x", env=env)
        except tracing.TracingError as err:
            assert f"{variable}={str(tmp_path / 'gone.pem')!r}: no such file" in str(err), err
        else:
            tracing.shutdown()
            raise AssertionError(f"exported with a file that is not there: {env}")
        assert not tracing.enabled()
    # The signal's own variable is the one the SDK reads: the general one then does not matter.
    from muster.tracing.sdk import check

    assert check({"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": str(there), "OTEL_EXPORTER_OTLP_CERTIFICATE": "/gone.pem"})
    assert check({"OTEL_TRACES_EXPORTER": "console", "OTEL_EXPORTER_OTLP_CERTIFICATE": "/gone.pem"}) == [("console", "http/protobuf")]


def test_spans_sent_unencrypted_to_another_machine_are_warned_of_naming_the_endpoint_without_its_key() -> None:
    from muster.tracing.sdk import describe, in_clear

    far = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://ada:sekrit@collector.example:4318"}
    said = in_clear(far)
    assert said is not None and "unencrypted to http://collector.example:4318/v1/traces" in said, said
    assert "sekrit" not in said and "ada" not in said
    assert describe(far) == "OTLP http/protobuf to http://collector.example:4318/v1/traces"  # (`muster up` prints it)
    keyed = in_clear({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://10.0.0.9:4318/v1/traces?api_key=k2#k4"})
    assert keyed is not None and "unencrypted to http://10.0.0.9:4318/v1/traces," in keyed and "k2" not in keyed, keyed
    grpc = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "collector.example:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    assert in_clear(grpc) is None and in_clear({**grpc, "OTEL_EXPORTER_OTLP_INSECURE": "true"}) is not None
    for quiet in ({}, {"OTEL_TRACES_EXPORTER": "otlp"}, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"},
                  {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://[::1]:4318"}, {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector.example"},
                  {"OTEL_TRACES_EXPORTER": "console", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector.example:4318"},
                  {**far, "OTEL_SDK_DISABLED": "true"}):
        assert in_clear(quiet) is None, quiet


def test_a_service_says_once_at_its_start_that_its_spans_cross_the_network_in_clear() -> None:
    code = "from muster.runtime.logs import configure_logging; configure_logging('solver')"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}, "OTEL_BSP_EXPORT_TIMEOUT": "0",
           "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector.example:4318", "OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=k3y"}
    err = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stderr
    lines = [json.loads(line) for line in err.splitlines() if line.strip()]
    warned = [line for line in lines if "unencrypted" in line["event"]]
    assert len(warned) == 1 and warned[0]["level"] == "warning" and "http://collector.example:4318/v1/traces" in warned[0]["event"]
    assert "k3y" not in err


def test_the_console_exporter_writes_a_json_line_per_span_to_stderr(capsys: Any) -> None:
    """`muster up` keeps a service's stderr (its log) and drops its stdout: on stdout, the SDK's
    default, every span of OTEL_TRACES_EXPORTER=console was lost, and a command's spans were
    mixed into its output (`--json` too)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from muster.tracing.sdk import _exporters

    made = TracerProvider()
    for exporter in _exporters({"OTEL_TRACES_EXPORTER": "console"}):
        made.add_span_processor(SimpleSpanProcessor(exporter))
    with made.get_tracer("t").start_as_current_span("outer"):
        with made.get_tracer("t").start_as_current_span("inner"):
            pass
    out, err = capsys.readouterr()
    assert out == ""
    assert [json.loads(line)["name"] for line in err.splitlines()] == ["inner", "outer"]


def test_muster_up_warns_when_nothing_answers_at_the_collector(closed_port: int) -> None:
    """Walked in session 26: with OTEL_EXPORTER_OTLP_ENDPOINT naming a port nothing listens on,
    `muster up` said where the spans go and nothing else; every span was dropped, and each
    command waited its 2 s at its exit (docs/benchmarks.md, "Tracing: no collector")."""
    import socket

    from muster.tracing.sdk import collector_silent

    closed = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{closed_port}"}
    said = collector_silent(closed)
    assert said is not None and said.startswith(f"nothing answers at {closed['OTEL_EXPORTER_OTLP_ENDPOINT']}/v1/traces"), said
    assert "OTEL_TRACES_EXPORTER=console" in said
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        assert collector_silent({"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"}) is None
        assert collector_silent({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                                 "OTEL_EXPORTER_OTLP_ENDPOINT": f"127.0.0.1:{port}"}) is None
    assert collector_silent({"OTEL_TRACES_EXPORTER": "console"}) is None and collector_silent({}) is None
