"""Ctrl-C is how `muster events --follow` and `muster watch` end, as `tail -f`'s does: exit 130
and no "Error: interrupted" line (docs/client.md, "Exit codes"). An operation's `--wait` still
says that the job goes on without us. The SIGINT is a real one, to this process: asyncio.run
turns it into the KeyboardInterrupt a terminal's Ctrl-C gives."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Iterator
from typing import Any

import click
import pytest
from click.testing import CliRunner

from muster.cli import main
from muster.cli_support import EXIT_INTERRUPTED, command, following
from muster.tracker_client import TrackerReads
from services.tracker import cli as tracker_cli

JOB = "00000000-0000-4000-8000-000000000001"


@pytest.fixture(autouse=True)
def sigint_as_a_terminal_has_it() -> Iterator[None]:
    """A pytest-xdist worker ignores SIGINT (its controller stops it): the test's own signal would
    then be lost, and the follow would wait for ever."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


async def _interrupted() -> None:
    os.kill(os.getpid(), signal.SIGINT)
    await asyncio.Event().wait()  # (what a follow does: waits for more)


async def _events(_self: TrackerReads, **_: Any) -> AsyncIterator[dict[str, Any]]:
    yield {"seq": 1, "subject": "muster.evt.default.job.x", "type": "JobRequested"}
    await _interrupted()


@pytest.mark.parametrize("args", [["events", "--follow"], ["watch", JOB]])
def test_ctrl_c_ends_a_follow_quietly_with_exit_130(monkeypatch: pytest.MonkeyPatch, args: list[str]) -> None:
    monkeypatch.setattr(TrackerReads, "events", _events)

    async def watching(*_: Any) -> str:
        await _interrupted()
        return "running"

    monkeypatch.setattr(tracker_cli, "_watch", watching)
    result = CliRunner().invoke(main, [*args, "--tracker-url", "http://127.0.0.1:9"])
    assert result.exit_code == EXIT_INTERRUPTED, result.output
    assert "Error" not in result.output and "interrupted" not in result.output, result.output


def test_an_interrupted_command_that_is_not_a_follow_still_says_so() -> None:
    @click.command()
    @command
    async def waits() -> None:
        await _interrupted()

    @click.command()
    @following
    async def follows() -> None:
        await _interrupted()

    said = CliRunner().invoke(waits, [])
    assert said.exit_code == EXIT_INTERRUPTED and "Error: interrupted (what muster accepted goes on without us)" in said.output
    quiet = CliRunner().invoke(follows, [])
    assert quiet.exit_code == EXIT_INTERRUPTED and quiet.output == ""
