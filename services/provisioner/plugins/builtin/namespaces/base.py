"""What every part of the namespace helpers shares: object names, running a system command, the
host-wide lock, and long-lived processes (started, waited for by what they print, killed, reaped).
`system` is the one module to import (it re-exports these)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import shutil
import signal
import subprocess
import weakref
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

IFNAMSIZ = 15
_PREFIX = re.compile(r"^[a-z0-9]{1,6}$")
_NAME = re.compile(r"^[a-z0-9]{1,6}-[A-Za-z0-9_.-]+$")
STATE_ROOT = Path("/run/muster-namespaces")
"""Address leases, one directory per bridge (gone at reboot, as the namespaces are)."""


class SystemCommandError(Exception):
    """A system command failed, or an object cannot be made; the message names which and why."""


def root_refusal() -> str | None:
    """None when this process may make namespaces; otherwise one line saying why not."""
    if os.geteuid() != 0:
        return "namespace nodes need root (network, mount and UTS namespaces, bridges, veths); run the provisioner as root or use the localhost provider"
    for tool in ("ip", "unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"namespace nodes need the {tool!r} command (Debian's iproute2 / util-linux)"
    return None


def check_prefix(prefix: str) -> str:
    if not _PREFIX.match(prefix):
        raise SystemCommandError(f"invalid name prefix {prefix!r}: 1-6 lower-case letters or digits")
    return prefix


def object_name(prefix: str, suffix: str, *, interface: bool = False) -> str:
    """`<prefix>-<suffix>`; an interface name is refused when longer than the kernel allows."""
    name = f"{check_prefix(prefix)}-{suffix}"
    if not _NAME.match(name) or (interface and len(name) > IFNAMSIZ):
        raise SystemCommandError(f"invalid {'interface' if interface else 'object'} name {name!r}"
                                 + (f" (at most {IFNAMSIZ} characters)" if interface else ""))
    return name


async def run(argv: Sequence[str], *, check: bool = True, timeout: float = 30.0) -> tuple[int, str, str]:
    """Run one short command: (status, stdout, stderr). A failure raises SystemCommandError."""
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise SystemCommandError(f"{' '.join(argv)}: no answer after {timeout:g} s") from None
    status = proc.returncode or 0
    if check and status != 0:
        raise SystemCommandError(f"{' '.join(argv)}: {err.decode(errors='replace').strip() or f'exit status {status}'}")
    return status, out.decode(errors="replace"), err.decode(errors="replace")


_process_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()


@contextlib.asynccontextmanager
async def host_lock(path: Path = STATE_ROOT / "lock") -> AsyncIterator[None]:
    """One holder at a time, host-wide, for bridges and address leases: an asyncio lock among
    this process's tasks, then a file lock among processes (taken in a thread, never blocking
    the event loop)."""
    loop = asyncio.get_running_loop()
    local = _process_locks.setdefault(loop, asyncio.Lock())
    async with local:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as fh:
            await asyncio.to_thread(fcntl.flock, fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)


# ----------------------------------------------------------------------- long-lived processes

_spawned: dict[int, subprocess.Popen[bytes]] = {}
"""Long-lived children (node holders, sshds, servers): reaped after they end, so none stays a zombie."""


@dataclass(frozen=True)
class Spawned:
    process: subprocess.Popen[bytes]
    output: str
    """What it printed while we read (its stdout and stderr)."""
    seen: bool
    """It printed the awaited line."""
    ended: bool
    """It closed its output first (it exited, or will): `seen` will not come."""


async def spawn_until(argv: Sequence[str], until: str, timeout: float, env: dict[str, str] | None = None) -> Spawned:
    """Start a long-lived process in its own session and read what it prints until a line holds
    `until`, it closes its output, or the timeout. It outlives our reading, and this process."""
    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=write_fd, stderr=write_fd, start_new_session=True,
                                env={"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), **(env or {})})
    finally:
        os.close(write_fd)
    _spawned[proc.pid] = proc
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb"))
    lines: list[str] = []

    async def follow() -> bool:
        async for raw in reader:
            lines.append(raw.decode(errors="replace").rstrip())
            if until in lines[-1]:
                return True
        return False

    seen = ended = False
    try:
        seen = await asyncio.wait_for(follow(), timeout)
        ended = not seen
    except TimeoutError:
        pass
    finally:
        transport.close()  # what it prints later goes nowhere (an sshd's tee -p goes on with its log file)
    reap()
    return Spawned(proc, "\n".join(lines), seen, ended)


def reap() -> None:
    """Collect the exit status of spawned processes that ended (no zombie left behind)."""
    for pid, proc in list(_spawned.items()):
        if proc.poll() is not None:
            del _spawned[pid]


def netns_pids(name: str) -> list[int]:
    """Live processes in the network namespace (zombies have left it)."""
    out = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True, check=False).stdout
    return [int(word) for word in out.split() if word.isdigit()]


async def kill_pids(pids: Sequence[int], timeout: float = 10.0) -> None:
    """SIGKILL each and wait for its exit (pidfd: an event, not a poll)."""
    loop = asyncio.get_running_loop()
    waits = []
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        gone: asyncio.Future[None] = loop.create_future()
        loop.add_reader(fd, _settle, gone)
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        waits.append((fd, gone))
    try:
        if waits:
            await asyncio.wait_for(asyncio.gather(*(g for _, g in waits)), timeout)
    finally:
        for fd, _ in waits:
            loop.remove_reader(fd)
            os.close(fd)


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def kill_netns(name: str, rounds: int = 5) -> None:
    """Kill every process in the namespace, again for those forked meanwhile (a bounded few rounds)."""
    for _ in range(rounds):
        pids = netns_pids(name)
        if not pids:
            return
        await kill_pids(pids)
        reap()
    if netns_pids(name):
        raise SystemCommandError(f"processes keep appearing in network namespace {name}: {netns_pids(name)}")
