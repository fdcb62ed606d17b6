"""OTLP over gRPC (`OTEL_EXPORTER_OTLP_PROTOCOL=grpc`) reaches a real gRPC receiver: a process
that sets tracing up from the standard variables (muster.tracing.sdk, as every service does)
exports its spans to the collector's trace service this test runs on loopback. The SDK is set
up once per process, so the exporting side is a process of its own."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

pytestmark = [pytest.mark.timeout(60)]

EXPORTER = """
from muster import tracing
from muster.tracing import sdk
assert sdk.configure("grpc-test")
with tracing.Tracer("muster.test").span("over grpc", **{"muster.job": "j1"}):
    pass
sdk.shutdown()
"""


class Collector(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.spans: list[tuple[str, str, dict[str, Any]]] = []
        self.came = asyncio.Event()

    async def Export(self, request: Any, context: Any) -> Any:
        for resource in request.resource_spans:
            service = next(a.value.string_value for a in resource.resource.attributes if a.key == "service.name")
            for scope in resource.scope_spans:
                for span in scope.spans:
                    self.spans.append((service, span.name, {a.key: a.value.string_value for a in span.attributes}))
        self.came.set()
        return trace_service_pb2.ExportTraceServiceResponse()


async def test_spans_reach_a_grpc_receiver_when_the_variables_ask_for_grpc() -> None:
    server = grpc.aio.server()
    collector = Collector()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(collector, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
               "OTEL_EXPORTER_OTLP_INSECURE": "true"}
        done = await asyncio.to_thread(subprocess.run, [sys.executable, "-c", EXPORTER], env=env, capture_output=True,
                                       text=True, timeout=30)
        assert done.returncode == 0, done.stderr[-2000:]
        await asyncio.wait_for(collector.came.wait(), 10)
    finally:
        await server.stop(None)
    assert ("muster-grpc-test", "over grpc", {"muster.job": "j1"}) in collector.spans
