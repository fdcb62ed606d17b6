"""A service started with another identity's credentials (a super admin's, which every command in
the data directory uses) stops at once, saying whose they are and which file to use: every
request the server refused timed out, and the log showed a traceback naming only the timeout."""

from __future__ import annotations

import asyncio
import signal
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
import structlog
from nats.aio.client import Client

from muster.runtime.exits import STAY_DOWN_EXIT
from muster.runtime.service import run_service

from .conftest import Authed

DEADLINE_S = 30  # nats-py's JetStream requests time out at 5 s


async def test_a_service_run_as_a_super_admin_stops_naming_the_identity_and_its_file(
        authed: Authed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MUSTER_TOKEN", authed.admin_token)
    monkeypatch.setenv("MUSTER_DATA_DIR", str(tmp_path))
    set_up: list[str] = []

    async def setup(nc: Client, stack: AsyncExitStack) -> None:
        set_up.append("set up")

    loop = asyncio.get_running_loop()
    try:
        with structlog.testing.capture_logs() as logged, pytest.raises(SystemExit) as exited:
            async with asyncio.timeout(DEADLINE_S):
                await run_service("provisioner", authed.url, setup)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    assert exited.value.code == STAY_DOWN_EXIT and not set_up  # muster up's supervisor does not start it again
    [said] = [e["error"] for e in logged if e["event"] == "cannot start"]
    assert said == ('root may not run the provisioner service: the server refused it (permissions violation for publish to '
                    '"$JS.API.STREAM.CREATE.EVENTS"); a service runs with its own identity: '
                    "MUSTER_CREDENTIALS=<data dir>/auth/provisioner.cred, which muster up makes (docs/security.md)")
    assert not any("exception" in e for e in logged) and authed.admin_token not in repr(logged)
