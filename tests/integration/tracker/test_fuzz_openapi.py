"""Schemathesis against the tracker's own OpenAPI document: whatever a client sends (valid or
not), no 5xx, and every answer matches the document. The tracker runs on a real port in a
thread of its own (schemathesis calls are blocking), on the session's nats-server."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from schemathesis.specs.openapi.checks import allow_header_conformance

schemathesis = pytest.importorskip(
    "schemathesis", reason="schemathesis is not installed (dev dependency: schemathesis==4.32.5)"
)

from aiohttp import web  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

from muster.bus.connect import connect  # noqa: E402
from muster.bus.eventstore import EventStore  # noqa: E402
from muster.bus.streams import ensure_streams  # noqa: E402
from services.tracker.contract import document  # noqa: E402
from services.tracker.http import make_app  # noqa: E402
from services.tracker.unreadable import tracker_runner  # noqa: E402

pytestmark = pytest.mark.nats

# The whole document, writes included, so that schemathesis knows which methods each path
# serves; the writes have their own fuzz (tests/integration/writes/test_fuzz_writes.py).
schema = schemathesis.openapi.from_dict(document()).include(method="GET")
# A request target or header over the tracker's limit is refused before its parameters are read
# (414 / 431, in the JSON error shape): a rejection of bad data too.
schema.config.checks.negative_data_rejection.expected_statuses = [
    *schema.config.checks.negative_data_rejection.expected_statuses, "414", "431"]


class ServedTracker:
    """A tracker app served from an event loop in a thread."""

    def __init__(self, nats_url: str) -> None:
        self.nats_url = nats_url
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="tracker-under-fuzz", daemon=True)
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._nc: Any = None

    def __enter__(self) -> ServedTracker:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(timeout=60)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self.loop).result(timeout=60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)
        self.loop.close()

    async def _start(self) -> None:
        self._nc = await connect(self.nats_url, name="fuzzed-tracker")
        await ensure_streams(self._nc.jetstream())
        # As `muster tracker` runs it: a long request target gets the JSON 414, not aiohttp's plain 400
        self._runner = tracker_runner(make_app(EventStore(self._nc)))
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._nc is not None:
            await self._nc.close()


@pytest.fixture(scope="module")
def tracker_url(nats_url: str) -> Iterator[str]:
    with ServedTracker(nats_url) as served:
        yield served.url


@schema.parametrize()
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_request_makes_the_tracker_fail_or_break_its_document(case: Any, tracker_url: str) -> None:
    # As the session's system principal (tests/conftest.py), so the handlers behind the token
    # check get fuzzed too; the 401/403 answers are tested in tests/integration/auth.
    if case.path == "/v1/events" and str((case.query or {}).get("follow")).lower() == "true" and "job" not in (case.query or {}):
        return  # a tenant's log followed never ends: nothing to validate an answer against (tests/integration/auth)
    # `/v1/governance/{what}/{name}` (GET) and `/v1/governance/rules|policies|subscriptions/{name}`
    # (PUT, DELETE) overlap, as OpenAPI allows (a concrete path matches first): the 405's `Allow`
    # for rules/x names the concrete path's methods, which the check reads against the template's.
    excluded = [allow_header_conformance] if case.path == "/v1/governance/{what}/{name}" else None
    case.call_and_validate(base_url=tracker_url, timeout=10, headers={"Authorization": f"Bearer {os.environ['MUSTER_TOKEN']}"},
                           excluded_checks=excluded)
