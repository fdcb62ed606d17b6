"""`muster demo`'s own read of its job from the tracker (muster/runtime/cli.py): bounded, and
said when it fails. It waited aiohttp's default of 300 s for a tracker that said nothing, and a
refusal read as `KeyError: 'state'`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from muster.cli_support import EXIT_FAILED, EXIT_UNREACHABLE, CliError
from muster.runtime import cli as runtime_cli

JOB = "0b0c5a59-6b1e-4d43-9d55-3f4a14b0b001"


@asynccontextmanager
async def tracker(answer: bytes | None) -> AsyncIterator[str]:
    """A tracker on a free port that answers each request with `answer` (None: says nothing,
    holding the connection, until the test ends)."""
    done = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        if answer is None:
            await done.wait()
        else:
            writer.write(answer)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        done.set()
        server.close()
        await server.wait_closed()


def _http(status: int, body: dict[str, Any]) -> bytes:
    data = json.dumps(body).encode()
    return (f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
            "Connection: close\r\n\r\n").encode() + data


async def _read(url: str, tmp_path: Path) -> dict[str, Any]:
    deployment: Any = SimpleNamespace(tracker_url=url, data_dir=tmp_path)
    return await runtime_cli._tracker_job(deployment, "default", JOB, None)


async def test_a_silent_tracker_is_said_after_the_demos_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime_cli, "TRACKER_ANSWER_S", 0.3)
    async with tracker(None) as url:
        with pytest.raises(CliError) as raised:
            await asyncio.wait_for(_read(url, tmp_path), 30)  # (on main: aiohttp's 300 s, cut here by the test's own)
    assert raised.value.exit_code == EXIT_UNREACHABLE
    assert str(raised.value) == (f"the tracker at {url} did not answer GET /v1/jobs/{JOB} within 0.3 s (the job itself ended: "
                                 f"the log says so); its log: {tmp_path / 'logs' / 'tracker.log'}")


async def test_a_refusal_is_said_with_the_trackers_words(tmp_path: Path) -> None:
    async with tracker(_http(404, {"error": {"status": 404, "message": f"no job {JOB} in tenant default"}})) as url:
        with pytest.raises(CliError) as raised:
            await _read(url, tmp_path)
    assert raised.value.exit_code == EXIT_FAILED
    assert f"answered GET {url}/v1/jobs/{JOB} with HTTP 404: no job {JOB} in tenant default" in str(raised.value)


async def test_the_jobs_view_is_read(tmp_path: Path) -> None:
    async with tracker(_http(200, {"state": "succeeded", "tasks_total": 12})) as url:
        assert (await _read(url, tmp_path))["state"] == "succeeded"
