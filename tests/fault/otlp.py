"""A small OTLP/HTTP trace receiver for tests: what the services' exporters send to
`/v1/traces` (protobuf `ExportTraceServiceRequest`s), decoded and kept; waiting on a span's name
is waiting on an event."""

from __future__ import annotations

import asyncio
import gzip
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest, ExportTraceServiceResponse


@dataclass(frozen=True)
class Received:
    service: str
    instance: str
    name: str
    trace_id: str
    span_id: str
    parent: str
    attributes: dict[str, Any]
    error: bool


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


@dataclass
class Receiver:
    spans: list[Received] = field(default_factory=list)
    requests: int = 0
    url: str = ""
    _named: dict[str, asyncio.Event] = field(default_factory=dict)
    _runner: web.AppRunner | None = None

    async def start(self) -> Receiver:
        app = web.Application()
        app.router.add_post("/v1/traces", self._export)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _export(self, request: web.Request) -> web.Response:
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        export = ExportTraceServiceRequest.FromString(body)
        self.requests += 1
        for resource_spans in export.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    self.spans.append(Received(
                        service=str(resource.get("service.name", "")), instance=str(resource.get("service.instance.id", "")),
                        name=s.name, trace_id=s.trace_id.hex(), span_id=s.span_id.hex(), parent=s.parent_span_id.hex(),
                        attributes={a.key: _value(a.value) for a in s.attributes}, error=s.status.code == 2))
                    self._named.setdefault(s.name, asyncio.Event()).set()
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(), content_type="application/x-protobuf")

    async def came(self, name: str, timeout: float = 30) -> None:
        await asyncio.wait_for(self._named.setdefault(name, asyncio.Event()).wait(), timeout)
