"""The first line a provisioner writes is its log's, JSON on stderr: "plugins loaded" was logged
before the log was set up, so it went to stdout in structlog's console format and was missing
from `provisioner.log` under `muster up`, which keeps stderr (a docs walkthrough, session 33).
A real process; no bus listens at its URL, so it stays at its start."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path


async def test_the_first_line_is_the_json_plugins_loaded_on_stderr_and_stdout_stays_empty(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MUSTER_", "NATS_", "OTEL_"))}
    env.update(MUSTER_DATA_DIR=str(tmp_path / "dd"), HOME=str(tmp_path))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "muster", "provisioner", "--id", "first-line", "--nats-url", "nats://127.0.0.1:1",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
    try:
        first = await asyncio.wait_for(proc.stderr.readline(), 60)  # type: ignore[union-attr]
    finally:
        proc.terminate()
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
    line = json.loads(first)
    assert (line["event"], line["service"], line["level"]) == ("plugins loaded", "provisioner", "info"), line
    assert "provider:simulated" in line["plugins"] and line["work_dir"] == str(tmp_path / "dd" / "provisioner" / "first-line")
    assert out == b"", out
