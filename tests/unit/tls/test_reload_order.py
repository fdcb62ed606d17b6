"""A rotation's SIGHUP reaches a tracker only once it can take it (muster.runtime.tls): a tracker
started again during a rotation (its connection given up by a server's reload) has no handler
yet, and a SIGHUP then would end it. Stand-ins for the tracker: Python processes that set their
handler before saying they started, as the tracker does."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from muster.runtime.supervisor import READY, RELOADED, Child
from muster.runtime.tls import reload_child

STARTING = f"""
import signal, sys, time
time.sleep(float(sys.argv[1]))
signal.signal(signal.SIGHUP, lambda *_: print({RELOADED.decode()!r}, file=sys.stderr, flush=True))
print({READY.decode()!r}, file=sys.stderr, flush=True)
time.sleep(60)
"""


@asynccontextmanager
async def child(tmp_path: Path, script: str, *args: str) -> AsyncIterator[Child]:
    process = await asyncio.create_subprocess_exec(sys.executable, "-c", script, *args, stderr=asyncio.subprocess.PIPE)
    made = Child("tracker", process, tmp_path / "tracker.log")

    async def copy() -> None:  # as Deployment._copy marks them
        assert process.stderr is not None
        async for line in process.stderr:
            if READY in line:
                made.started.set()
            if RELOADED in line:
                made.reloaded.set()

    made.copier = asyncio.create_task(copy())
    try:
        yield made
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()
        await made.copier


async def test_a_tracker_still_starting_is_signalled_once_it_says_it_started(tmp_path: Path) -> None:
    async with child(tmp_path, STARTING, "0.5") as starting:
        await asyncio.wait_for(reload_child(starting), 30)
        assert starting.started.is_set() and starting.reloaded.is_set()
        assert starting.process.returncode is None  # not ended by a SIGHUP it had no handler for


async def test_a_tracker_that_exits_before_it_started_is_not_waited_for(tmp_path: Path) -> None:
    async with child(tmp_path, "import sys; sys.exit(1)") as gone:
        await asyncio.wait_for(reload_child(gone), 30)
        assert not gone.reloaded.is_set() and await gone.process.wait() == 1
