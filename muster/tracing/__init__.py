"""Traces (OpenTelemetry): the one module that starts and continues spans (docs/tracing.md).

A job's trace crosses processes as a W3C `traceparent`: in the `traceparent` header of a
request, a task message and every event appended while a span is current, and in the job's
first event (`JobRequested.trace`), so whichever planner holds the job (after a restart, a
takeover) goes on with the same trace. Two spans of a job are known only at their end and are
made then, with ids fixed beforehand: the job's own span (its id chosen at admission, recorded
in `JobRequested`; a retried job's later runs each their own, under it, with ids derived from
the retry) and each task attempt's span (its id derived from the attempt, so every planner and
provisioner names it alike); `record` makes them.

Off unless the standard variables ask for an exporter (`OTEL_TRACES_EXPORTER`, or an OTLP
endpoint in `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`; the protocol
from `OTEL_EXPORTER_OTLP_PROTOCOL`, `http/protobuf` or `grpc`). Off, nothing of the SDK is
imported and every function here returns at its first test.

Spans never carry a secret: attributes are ids and names only, and `_attributes` drops any key
that names a credential.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager, nullcontext
from datetime import datetime
from typing import Any

from . import sdk
from .sdk import TracingError, collector_silent, configure, describe, enabled, in_clear, shutdown, wanted

__all__ = ["HEADER", "Tracer", "TracingError", "attempt", "child", "collector_silent", "configure", "current", "describe", "enabled", "from_environment", "in_clear", "headers", "link",
           "log_ids", "new_job", "outgoing", "run", "set_attributes", "set_error", "shutdown", "valid", "wanted", "within"]

HEADER = "traceparent"
ATTR = "muster."
"""Prefix of muster's span attributes: muster.tenant, muster.cluster, muster.job, muster.task,
muster.attempt, muster.provisioner, muster.operation."""
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_SECRET_KEY = re.compile(r"token|secret|password|passwd|credential|private|api.?key|authorization|cookie", re.I)
_NOOP = nullcontext()

# -- contexts as strings -------------------------------------------------------------------------


def _parse(traceparent: str | None) -> tuple[int, int, int] | None:
    if not traceparent:
        return None
    m = _TRACEPARENT.fullmatch(traceparent.strip().lower())
    if m is None or int(m[1], 16) == 0 or int(m[2], 16) == 0:
        return None
    return int(m[1], 16), int(m[2], 16), int(m[3], 16)


def _format(trace_id: int, span_id: int, flags: int) -> str:
    return f"00-{trace_id:032x}-{span_id:016x}-{flags:02x}"


def valid(traceparent: str | None) -> str | None:
    """The traceparent if it is one (a caller's header is not trusted to be), else None."""
    parsed = _parse(traceparent)
    return _format(*parsed) if parsed is not None else None


def link(traceparent: str | None, env: Mapping[str, str] = os.environ) -> str | None:
    """Where a tracing UI shows this trace: `MUSTER_TRACE_URL` with its `{trace_id}` filled in
    (None without one, or for a job not traced)."""
    template = env.get("MUSTER_TRACE_URL", "")
    parsed = _parse(traceparent)
    if parsed is None or "{trace_id}" not in template or not template.startswith(("http://", "https://")):
        return None
    return template.replace("{trace_id}", f"{parsed[0]:032x}")


def current() -> str | None:
    """The current span's context as a traceparent (None when off or outside any span)."""
    if sdk.provider is None:
        return None
    from opentelemetry import trace

    ctx = trace.get_current_span().get_span_context()
    return _format(ctx.trace_id, ctx.span_id, int(ctx.trace_flags)) if ctx.is_valid else None


def outgoing() -> dict[str, str] | None:
    """Headers for a request muster sends: the current span's context, muster's own when on,
    else that of a program using OpenTelemetry itself (a caller's trace is continued even
    where muster's spans are off)."""
    if sdk.provider is not None:
        return headers()
    if "opentelemetry.trace" in sys.modules:
        from opentelemetry import trace

        ctx = trace.get_current_span().get_span_context()
        if ctx.is_valid:
            return {HEADER: _format(ctx.trace_id, ctx.span_id, int(ctx.trace_flags))}
    inherited = valid(os.environ.get("TRACEPARENT"))
    return {HEADER: inherited} if inherited is not None else None


def from_environment(env: Mapping[str, str] = os.environ) -> Any:
    """A context manager: a command run under a caller's trace (`TRACEPARENT` in its
    environment, as OpenTelemetry's environment carriers have it) continues it (when off,
    `outgoing` passes it on as it is)."""
    return within(env.get("TRACEPARENT"))


def headers(into: dict[str, str] | None = None) -> dict[str, str] | None:
    """`into` (or a new dict) with the current context's header; `into` as it is when there is none."""
    here = current()
    if here is None:
        return into
    out = into if into is not None else {}
    out[HEADER] = here
    return out


def _context(traceparent: str | None) -> Any:
    from opentelemetry import trace
    from opentelemetry.context import Context

    parsed = _parse(traceparent)
    if parsed is None:
        return Context()
    trace_id, span_id, flags = parsed
    parent = trace.SpanContext(trace_id, span_id, is_remote=True, trace_flags=trace.TraceFlags(flags))
    return trace.set_span_in_context(trace.NonRecordingSpan(parent))


@contextmanager
def _within(traceparent: str) -> Iterator[None]:
    from opentelemetry import context

    token = context.attach(_context(traceparent))
    try:
        yield
    finally:
        context.detach(token)


def within(traceparent: str | None) -> Any:
    """A context manager under which `traceparent` is the current context (no span of its own):
    what is appended or started under it continues that trace."""
    if sdk.provider is None or _parse(traceparent) is None:
        return _NOOP
    return _within(traceparent)  # type: ignore[arg-type]


# -- the job's and the attempts' spans -----------------------------------------------------------


def new_job(parent: str | None) -> tuple[str | None, str | None]:
    """(the job span's traceparent, its parent's) for a job just admitted: in the requester's
    trace when it sent one (`parent`), else in a new one. (None, None) when off."""
    if sdk.provider is None:
        return None, None
    parsed = _parse(parent)
    if parsed is not None:
        return _format(parsed[0], sdk.ids.generate_span_id(), parsed[2]), _format(*parsed)
    return _format(sdk.ids.generate_trace_id(), sdk.ids.generate_span_id(), 1), None


def child(parent: str | None) -> str | None:
    """A new span's traceparent under `parent` (for a span made later with `Tracer.record`)."""
    parsed = _parse(parent)
    if parsed is None or sdk.provider is None:
        return None
    return _format(parsed[0], sdk.ids.generate_span_id(), parsed[2])


def attempt(job_trace: str | None, job_id: str, task_id: str, attempt: int) -> str | None:
    """The traceparent of a task attempt's span, the same wherever it is asked: its id is
    derived from the attempt."""
    parsed = _parse(job_trace)
    if parsed is None:
        return None
    digest = hashlib.sha256(f"{job_id}.{task_id}.{attempt}".encode()).digest()
    return _format(parsed[0], int.from_bytes(digest[:8], "big") or 1, parsed[2])


def run(job_trace: str | None, job_id: str, run: int) -> str | None:
    """The traceparent of a job's run: the job's own span for its first run (0), else one whose
    id is derived from the retry (`<job>.run.<n>`), the same wherever it is asked, so each run's
    span is made once, by whichever planner sees that run end."""
    parsed = _parse(job_trace)
    if parsed is None or run == 0:
        return job_trace if parsed is not None else None
    digest = hashlib.sha256(f"{job_id}.run.{run}".encode()).digest()
    return _format(parsed[0], int.from_bytes(digest[:8], "big") or 1, parsed[2])


def _attributes(attrs: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in attrs.items():
        if value is None or _SECRET_KEY.search(key):
            continue
        out[key if "." in key else ATTR + key] = value if isinstance(value, str | bool | int | float) else str(value)
    return out


def _ns(at: datetime | float) -> int:
    return int((at.timestamp() if isinstance(at, datetime) else at) * 1e9)


class Tracer:
    """Spans of one part of muster (its scope name: `muster.planner`, `muster.provisioner`...)."""

    def __init__(self, scope: str) -> None:
        self.scope = scope

    def _tracer(self) -> Any:
        # From this module's provider, not the API's global one (which may be set only once):
        # tests set tracing up and down again.
        assert sdk.provider is not None
        return sdk.provider.get_tracer(self.scope)

    def span(self, name: str, parent: str | None = None, *, kind: str = "internal", **attrs: Any) -> Any:
        """A context manager: a span, current inside it, child of `parent` (a traceparent)
        or, without one, of the current span. An exception ends it with an error status naming
        its type (never its message). When off, it does nothing and yields None."""
        if sdk.provider is None:
            return _NOOP
        return self._span(name, parent, kind, attrs)

    def nested(self, name: str, **attrs: Any) -> Any:
        """`span` as a child of the current span only: nothing when no span is current (work
        that no traced request or task asked for)."""
        if sdk.provider is None or current() is None:
            return _NOOP
        return self._span(name, None, "internal", attrs)

    @contextmanager
    def _span(self, name: str, parent: str | None, kind: str, attrs: Mapping[str, Any]) -> Iterator[Any]:
        from opentelemetry import trace

        ctx = _context(parent) if _parse(parent) is not None else None
        # The SDK would put the exception's message and stack on the span: they may hold a
        # field's value (a plugin's exception, a validation error's input). Its type says enough.
        with self._tracer().start_as_current_span(name, context=ctx, kind=getattr(trace.SpanKind, kind.upper()),
                                                  attributes=_attributes(attrs), record_exception=False,
                                                  set_status_on_exception=False) as span:
            try:
                yield span
            except Exception as err:
                set_error(span, type(err).__name__)
                raise

    def record(self, name: str, own: str | None, parent: str | None, start: datetime | float, end: datetime | float,
               *, error: str | None = None, **attrs: Any) -> None:
        """A span that is over, made now with the ids of `own` (a traceparent fixed
        beforehand), child of `parent` (None: the root of its trace)."""
        if sdk.provider is None:
            return
        parsed = _parse(own)
        if parsed is None:
            return
        from opentelemetry import trace

        token = sdk.forced.set((parsed[0], parsed[1]))
        try:
            span = self._tracer().start_span(name, context=_context(parent), attributes=_attributes(attrs),
                                             start_time=_ns(start))
        finally:
            sdk.forced.reset(token)
        if error:
            span.set_status(trace.Status(trace.StatusCode.ERROR, error[:200]))
        span.end(end_time=max(_ns(end), _ns(start)))


def set_error(span: Any, error: str) -> None:
    """Mark a span (from `Tracer.span`; None when off) as failed with a short reason."""
    if span is not None:
        from opentelemetry import trace

        span.set_status(trace.Status(trace.StatusCode.ERROR, error[:200]))


def set_attributes(span: Any, **attrs: Any) -> None:
    if span is not None:
        span.set_attributes(_attributes(attrs))


def log_ids(logger: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """A structlog processor: the current trace and span ids on every log line (when on)."""
    if sdk.provider is not None:
        from opentelemetry import trace

        ctx = trace.get_current_span().get_span_context()
        if ctx.is_valid:
            event.setdefault("trace_id", f"{ctx.trace_id:032x}")
            event.setdefault("span_id", f"{ctx.span_id:016x}")
    return event
