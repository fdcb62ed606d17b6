"""The OpenTelemetry SDK set up for this process, from the standard variables (`muster.tracing`
is the API the services use; docs/tracing.md). Imported by it, this module imports nothing of
the SDK until `configure` is called and the variables ask for traces."""

from __future__ import annotations

import contextvars
import os
import socket
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

provider: TracerProvider | None = None
ids: Any = None
forced: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar("muster_trace_ids", default=None)


def wanted(env: Mapping[str, str] = os.environ) -> bool:
    """Do the standard variables ask for traces?"""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporters:
        return exporters != "none"
    return bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def enabled() -> bool:
    return provider is not None


def configure(service: str, exporter: Any = None, env: Mapping[str, str] = os.environ) -> bool:
    """Set tracing up for this process when the variables ask for it, or with `exporter` (the
    tests' in-memory one, spans handed over as they end). Returns whether it is on. Once per
    process: a second call changes nothing."""
    global provider, ids
    if provider is not None:
        return True
    if exporter is None and not wanted(env):
        return False
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    resource = Resource.create({SERVICE_NAME: env.get("OTEL_SERVICE_NAME") or f"muster-{service}",
                                "service.instance.id": f"{socket.gethostname()}-{os.getpid()}"})
    made = TracerProvider(resource=resource, id_generator=_ids())
    if exporter is not None:
        made.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        for one in _exporters(env):
            made.add_span_processor(BatchSpanProcessor(one))
    provider, ids = made, made.id_generator
    return True


def _exporters(env: Mapping[str, str]) -> list[Any]:
    names = [n.strip() for n in (env.get("OTEL_TRACES_EXPORTER") or "otlp").lower().split(",") if n.strip()]
    made: list[Any] = []
    for name in names:
        if name == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            made.append(ConsoleSpanExporter())
        elif name == "otlp":
            protocol = (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf")
            if protocol.strip().lower() == "grpc":
                from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Grpc
                made.append(Grpc())
            else:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Http
                made.append(Http())
        else:
            raise ValueError(f"OTEL_TRACES_EXPORTER={name!r}: muster knows otlp, console and none")
    return made


def shutdown() -> None:
    """Send what is waiting (at a process's end)."""
    global provider
    if provider is not None:
        provider.shutdown()
        provider = None


def _ids() -> Any:
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class Ids(RandomIdGenerator):
        """Random ids, except for a span `record` makes with ids fixed beforehand."""

        def generate_span_id(self) -> int:
            fixed = forced.get()
            return fixed[1] if fixed is not None else super().generate_span_id()

        def generate_trace_id(self) -> int:
            fixed = forced.get()
            return fixed[0] if fixed is not None else super().generate_trace_id()

    return Ids()
