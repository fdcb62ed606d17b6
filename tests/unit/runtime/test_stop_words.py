"""`muster up` says why it stops: Ctrl-C interrupts it, `muster down` (SIGTERM) asks it to stop;
it said "interrupted" for both (muster/runtime/cli.py)."""

from __future__ import annotations

import asyncio
import io
import os
import signal
from typing import Any

import pytest
from rich.console import Console

from muster.runtime import cli


class Running:
    """A deployment that neither fails nor rotates certificates: only a signal ends the wait."""

    tls = None

    async def wait_failed(self) -> str:
        await asyncio.Event().wait()
        return ""


@pytest.mark.parametrize(("sig", "said"), [(signal.SIGTERM, "stopping (asked by muster down / SIGTERM)."),
                                           (signal.SIGINT, "interrupted; stopping.")])
async def test_muster_up_says_who_stopped_it(monkeypatch: Any, sig: signal.Signals, said: str) -> None:
    out = io.StringIO()
    monkeypatch.setattr(cli, "console", Console(file=out, highlight=False, soft_wrap=True, markup=False))
    guarded = asyncio.create_task(cli._guarded(Running()))  # type: ignore[arg-type]
    await asyncio.sleep(0)  # (it holds the stop signals from its first step on)
    os.kill(os.getpid(), sig)
    assert await asyncio.wait_for(guarded, 10) is None
    assert out.getvalue() == said + "\n"


async def test_a_sigterm_while_starting_stops_the_start_as_ctrl_c_would(monkeypatch: Any) -> None:
    """`muster down` sends SIGTERM: before `_guarded` holds it, Python's default ended `muster up`
    on the spot, its children left to stop without it."""
    out = io.StringIO()
    monkeypatch.setattr(cli, "console", Console(file=out, highlight=False, soft_wrap=True, markup=False))
    cleaned: list[str] = []
    starting = asyncio.Event()

    async def start() -> None:
        try:
            starting.set()
            await asyncio.Event().wait()
        finally:
            cleaned.append("stopped what had started")

    stoppable = asyncio.create_task(cli._stoppable(start()))
    # Until it holds SIGTERM, it is ours (a test that fails, not a test run killed): replaced by its own.
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stoppable.cancel)
    await starting.wait()
    os.kill(os.getpid(), signal.SIGTERM)
    with pytest.raises(cli.CliError) as stopped:
        await asyncio.wait_for(stoppable, 10)
    assert stopped.value.exit_code == cli.EXIT_INTERRUPTED and cleaned == ["stopped what had started"]
    assert out.getvalue() == "stopping (asked by muster down / SIGTERM).\n"
