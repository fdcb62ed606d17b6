"""`muster down`: stop the deployment `muster up` runs on a data directory, from another shell,
a script or a service manager, as Ctrl-C in its terminal would.

Who to stop comes from `<dir>/deployment.json` (`muster up` describes itself there while it holds
the directory's lock). A pid is only signalled while its command line is still the one recorded
(a `muster` or `nats-server` process): pids are reused. `muster up` gets SIGTERM, which it takes
as Ctrl-C (saying who asked), and stops its children itself; processes left without it (a `muster up` killed outright on a system without
muster.runtime.lifeline's signal) get SIGTERM, and SIGKILL after the timeout.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from muster.bus.server import DataDirLock


@dataclass
class Stopped:
    supervisor: int | None
    """`muster up`'s pid when it was running."""
    left: list[int]
    """Processes it had started that were stopped without it."""
    killed: list[int]
    """...of which these only by SIGKILL."""


class DownError(RuntimeError):
    """The deployment did not stop (named, with what still runs)."""


def ours(pid: int, *names: str) -> bool:
    """Is `pid` still a process running one of `names` (a word of its command line)?"""
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(Path(w.decode(errors="replace")).name in names for w in words)


async def gone(pids: Iterable[int], timeout: float) -> list[int]:
    """Wait for processes that are not our children to exit (pidfd: the kernel says when);
    returns those still running after `timeout`."""
    loop = asyncio.get_running_loop()
    waits: dict[int, asyncio.Future[None]] = {}
    fds: list[int] = []
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        fds.append(fd)
        done: asyncio.Future[None] = loop.create_future()
        loop.add_reader(fd, _settle, done)
        waits[pid] = done
    try:
        if waits:
            await asyncio.wait(list(waits.values()), timeout=timeout)
        return [pid for pid, done in waits.items() if not done.done()]
    finally:
        for fd in fds:
            loop.remove_reader(fd)
            os.close(fd)


def _settle(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)


async def stop_deployment(data_dir: Path, timeout: float) -> Stopped | None:
    """None: nothing holds the directory."""
    if not DataDirLock(data_dir).in_use():
        return None
    try:
        state = json.loads((data_dir / DataDirLock.STATE).read_text())
    except (OSError, ValueError) as err:
        raise DownError(f"{data_dir} is in use but does not say by whom ({err}); stop its processes by pid") from None
    supervisor = int(state.get("pid") or 0)
    processes = [int(p) for p in dict(state.get("processes") or {}).values()]
    running = supervisor if supervisor and ours(supervisor, "muster") else None
    if running is not None:
        os.kill(running, signal.SIGTERM)  # taken as Ctrl-C: it stops every child, then itself
        if await gone([running], timeout):
            raise DownError(f"`muster up` pid {running} did not stop within {timeout:g} s; kill -TERM {running}")
    left = [p for p in processes if ours(p, "muster", "nats-server")]
    for pid in left:
        os.kill(pid, signal.SIGTERM)
    killed = await gone(left, timeout)
    for pid in killed:
        os.kill(pid, signal.SIGKILL)
    if await gone(killed, timeout):
        raise DownError(f"processes {killed} did not stop even after SIGKILL")
    return Stopped(running, left, killed)
