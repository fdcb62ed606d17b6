"""A small OTLP/HTTP trace receiver for tests: what the services' exporters send to
`/v1/traces` (protobuf `ExportTraceServiceRequest`s), decoded and kept; waiting on a span's name,
or on what the spans received so far show, is waiting on an event. `OnThread` runs one on a loop
of its own for tests on a synchronous thread (Playwright's)."""

from __future__ import annotations

import asyncio
import gzip
import threading
from collections import Counter
from collections.abc import Callable
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
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)
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
        async with self._changed:
            self._changed.notify_all()
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(), content_type="application/x-protobuf")

    async def came(self, name: str, timeout: float = 30) -> None:
        await asyncio.wait_for(self._named.setdefault(name, asyncio.Event()).wait(), timeout)

    async def until(self, found: Callable[[list[Received]], bool], timeout: float = 30) -> list[Received]:
        """The spans received so far, once `found` says they hold what the test waits for."""
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(lambda: found(self.spans)), timeout)
            except TimeoutError:
                names = Counter(s.name.split(" ")[0] for s in self.spans)
                raise AssertionError(f"the spans waited for did not come within {timeout} s; received {dict(names)}") from None
            return list(self.spans)


class OnThread:
    """A Receiver serving from a thread of its own: for a synchronous test, and for processes
    started before the test's own event loop (a package's deployment)."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="otlp-receiver", daemon=True)
        self._thread.start()
        self.receiver = self._call(Receiver().start(), 10)
        self.url = self.receiver.url

    def _call(self, work: Any, timeout: float) -> Any:
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(timeout)

    def until(self, found: Callable[[list[Received]], bool], timeout: float = 30) -> list[Received]:
        return self._call(self.receiver.until(found, timeout), timeout + 5)

    def stop(self) -> None:
        self._call(self.receiver.stop(), 10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
