"""The tracker over HTTPS (`muster tracker --tls-cert --tls-key`), as a process: verified by
clients, reloaded on SIGHUP, and never plain HTTP beyond loopback unless told."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import ssl
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio

from muster.tls.ca import LocalCA, Pair
from muster.tls.context import http_ssl, served_serial

pytestmark = pytest.mark.nats


async def _until(stream: asyncio.StreamReader, marker: bytes) -> bytes:
    while True:
        line = await stream.readline()
        if not line:
            raise AssertionError(f"the tracker exited before saying {marker!r}")
        if marker in line:
            return line


@dataclass
class Tracker:
    url: str
    data_dir: Path
    """its CA is in tls/ there"""
    ca: LocalCA
    pair: Pair
    process: asyncio.subprocess.Process


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def tracker(nats_url: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Tracker]:
    """One tracker process for the module (its tests run in order; the last rotates its certificate)."""
    data_dir = tmp_path_factory.mktemp("https")
    ca = LocalCA.load_or_create(data_dir / "tls")
    pair = ca.issue(data_dir / "tls" / "servers" / "tracker", "muster tracker", ["127.0.0.1"])
    proc = await asyncio.create_subprocess_exec(  # port 0: it binds one of the kernel's and says which
        sys.executable, "-m", "muster", "tracker", "--nats-url", nats_url, "--port", "0",
        "--tls-cert", str(pair.cert), "--tls-key", str(pair.key),
        stderr=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL, env={**os.environ, "MUSTER_LOG_LEVEL": "INFO"})
    assert proc.stderr is not None
    try:
        listening = json.loads(await asyncio.wait_for(_until(proc.stderr, b'"listening"'), 60))
        port = int(listening["url"].rsplit(":", 1)[1])
        await asyncio.wait_for(_until(proc.stderr, b'"started"'), 60)
        yield Tracker(f"https://127.0.0.1:{port}", data_dir, ca, pair, proc)
    finally:
        proc.terminate()
        await proc.wait()


async def _get(url: str, context: ssl.SSLContext) -> int:
    async with aiohttp.ClientSession() as http, http.get(f"{url}/healthz", ssl=context) as resp:
        return resp.status




@pytest.mark.asyncio(loop_scope="module")
async def test_clients_that_trust_the_ca_get_answers_over_https(tracker: Tracker) -> None:
    assert await _get(tracker.url, http_ssl(tracker.data_dir)) == 200  # the CA found in the data dir's tls/


@pytest.mark.asyncio(loop_scope="module")
async def test_a_client_without_the_ca_or_reaching_another_name_is_refused(tracker: Tracker) -> None:
    with pytest.raises(aiohttp.ClientConnectorCertificateError, match="unable to get local issuer certificate"):
        await _get(tracker.url, http_ssl())  # no CA anywhere: the system's roots
    with pytest.raises(aiohttp.ClientConnectorCertificateError, match="Hostname mismatch"):
        await _get(tracker.url.replace("127.0.0.1", "localhost"), http_ssl(tracker.data_dir))  # it names 127.0.0.1 only


@pytest.mark.asyncio(loop_scope="module")
async def test_sighup_serves_a_rotated_certificate_to_new_connections(tracker: Tracker) -> None:
    context = http_ssl(tracker.data_dir)
    before = await served_serial(tracker.url, context)
    tracker.ca.issue(tracker.pair.cert.with_suffix(""), "muster tracker", ["127.0.0.1"])
    tracker.process.send_signal(signal.SIGHUP)
    assert tracker.process.stderr is not None
    await asyncio.wait_for(_until(tracker.process.stderr, b'"certificate reloaded"'), 30)
    assert await served_serial(tracker.url, context) != before
    assert await _get(tracker.url, context) == 200
