"""Every line a service writes is one JSON object, a library's too: a solver whose collector is
down logs the OpenTelemetry exporter's complaint as JSON, between its own lines, and nothing of
the collector's credentials (the URL's user and password and `api_key`, the OTLP headers' key)
reaches it (muster/runtime/logs.py; docs/tracing.md, "When the collector is down")."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from typing import Any

import pytest
from nats.aio.client import Client

from contracts import subjects
from contracts.events import LayoutRequested

pytestmark = [pytest.mark.nats, pytest.mark.timeout(90)]

SECRETS = ("collector-password", "k3y-in-the-query", "b3arer-of-the-collector")


async def _line_with(stream: asyncio.StreamReader, marker: str, lines: list[str]) -> None:
    while True:
        line = (await stream.readline()).decode()
        if not line:
            raise AssertionError(f"the solver exited before saying {marker!r}:\n{''.join(lines)}")
        lines.append(line)
        if marker in line:
            return


async def test_a_service_whose_collector_is_down_writes_only_json_lines(nats_url: str, nc: Client, tenant: str,
                                                                        closed_port: int) -> None:
    port = closed_port  # the collector is down
    env = {**os.environ, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT":
           f"http://otel:{SECRETS[0]}@127.0.0.1:{port}/v1/traces?api_key={SECRETS[1]}",
           "OTEL_EXPORTER_OTLP_HEADERS": f"Authorization=Bearer%20{SECRETS[2]}",
           "OTEL_BSP_SCHEDULE_DELAY": "50", "OTEL_EXPORTER_OTLP_TIMEOUT": "3"}  # (a first retry fits in it: its line comes)
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "muster", "solver", "--nats-url", nats_url,
                                                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, env=env)
    assert proc.stderr is not None
    lines: list[str] = []
    try:
        await asyncio.wait_for(_line_with(proc.stderr, '"started"', lines), 30)
        request = LayoutRequested(job_id="j1", cluster_id="c1", template="none", nodes=1, catalog={})
        await nc.request(subjects.solve_request(tenant, "test-system"), request.model_dump_json().encode(), timeout=10)
        await asyncio.wait_for(_line_with(proc.stderr, "exporting spans batch", lines), 30)  # the `solve` span's
        proc.send_signal(signal.SIGTERM)
        rest = await asyncio.wait_for(proc.stderr.read(), 30)
        lines += rest.decode().splitlines(keepends=True)
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
    records: list[dict[str, Any]] = []
    for line in filter(str.strip, lines):
        try:
            records.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"a line of the solver's log is not JSON: {line!r}") from None
    exporter = [r for r in records if r.get("logger", "").startswith("opentelemetry.exporter")]
    assert exporter and exporter[0]["level"] == "warning" and exporter[0]["service"] == "solver", records
    assert f"127.0.0.1', port={port}" in exporter[0]["event"], exporter[0]
    said = "".join(lines)
    assert not [s for s in SECRETS if s in said], said


async def test_a_service_that_cannot_start_says_why_in_json(nats_url: str) -> None:
    """A tracker whose port is taken: its refusal is a JSON line whose `error` muster up quotes
    ("tracker exited during start: cannot listen on ..."), not click's plain "Error: ...", and
    it exits 2: the port chosen is refused, as bad input (it exited 1, as a failure of its own)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = await asyncio.create_subprocess_exec(sys.executable, "-m", "muster", "tracker", "--nats-url", nats_url,
                                                    "--port", str(port), stdout=asyncio.subprocess.DEVNULL,
                                                    stderr=asyncio.subprocess.PIPE)
        _, said = await asyncio.wait_for(done.communicate(), 60)
    assert done.returncode == 2, said
    records = []
    for line in filter(str.strip, said.decode().splitlines()):
        try:
            records.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"a line of the tracker's log is not JSON: {line!r}") from None
    assert records[-1]["event"] == "cannot start" and records[-1]["level"] == "error", records
    assert records[-1]["error"].startswith(f"cannot listen on 127.0.0.1:{port}: the port is in use by another program"), records
