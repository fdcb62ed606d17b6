"""An in-process SSH server that runs real shell commands in its own working directory.

One `LocalSshEndpoint` is one "machine" of the localhost provider: its own host key, its own
port on 127.0.0.1, its own directory (cwd and HOME of every command), public-key login with
one authorized client key. Commands run as the provisioner's own user.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterable, Mapping
from pathlib import Path

import asyncssh
import structlog

log = structlog.get_logger("muster.provisioner.sshserver")

# Commands may run longer than a client waits; when the client's channel closes (timeout,
# disconnect) the command's whole process group is killed.
_KILL_GRACE_S = 2.0


class _Server(asyncssh.SSHServer):
    def __init__(self, endpoint: LocalSshEndpoint) -> None:
        self._endpoint = endpoint
        self._conn: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._conn = conn
        self._endpoint._connections.add(conn)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._conn is not None:
            self._endpoint._connections.discard(self._conn)

    def password_auth_supported(self) -> bool:
        return False

    def kbdint_auth_supported(self) -> bool:
        return False


class LocalSshEndpoint:
    def __init__(
        self,
        workdir: Path,
        host_key: asyncssh.SSHKey,
        client_public_key: str,
        *,
        env: Mapping[str, str] | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.workdir = workdir
        self.host = host
        self.host_key = host_key
        self._client_public_key = client_public_key
        self._env = dict(env or {})
        self._acceptor: asyncssh.SSHAcceptor | None = None
        self._connections: set[asyncssh.SSHServerConnection] = set()
        self._running: set[asyncio.subprocess.Process] = set()
        self._reaping: set[asyncio.Future[int]] = set()
        self._sessions: set[int] = set()
        self._started_ticks = 0
        self.port = 0

    @property
    def host_public_key(self) -> str:
        """`algorithm base64`, as in known_hosts."""
        return self.host_key.export_public_key().decode().strip()

    async def start(self, port: int = 0) -> int:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._started_ticks = _now_ticks()
        self._acceptor = await asyncssh.create_server(
            lambda: _Server(self),
            self.host,
            port,
            server_host_keys=[self.host_key],
            authorized_client_keys=asyncssh.import_authorized_keys(self._client_public_key),
            process_factory=self._handle,
            encoding=None,  # bytes: commands may print anything
            allow_scp=False,
            agent_forwarding=False,
            x11_forwarding=False,
            allow_pty=False,
            config=None,
        )
        self.port = self._acceptor.get_port()
        return self.port

    async def stop(self) -> None:
        """Stop listening, close every connection, kill every command still running and every
        process those commands left behind (daemons started by scripts): in their sessions, or
        found by `left_behind`."""
        if self._acceptor is not None:
            self._acceptor.close()
            await self._acceptor.wait_closed()
            self._acceptor = None
        for proc in list(self._running):
            _kill_group(proc)
        for conn in list(self._connections):
            conn.close()
        for conn in list(self._connections):
            await conn.wait_closed()
        if self._running:
            await asyncio.wait([asyncio.ensure_future(p.wait()) for p in self._running], timeout=_KILL_GRACE_S)
        if self._reaping:
            await asyncio.wait(set(self._reaping), timeout=_KILL_GRACE_S)
            for waited in list(self._reaping):
                waited.cancel()
        # and daemons that left their session (redis-server's daemonize calls setsid)
        kill_all(set(_members(self._sessions, self._started_ticks)) | set(left_behind(self._env, self.workdir)))

    async def _handle(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        command = process.command
        if not command:
            process.stderr.write(b"this endpoint runs commands only; no interactive shell\n")
            process.exit(1)
            return
        env = {
            **os.environ,
            **self._env,
            "HOME": str(self.workdir),
            "PWD": str(self.workdir),
            "SSH_CONNECTION": "127.0.0.1",
        }
        try:
            proc = await asyncio.create_subprocess_shell(
                command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=self.workdir,
                env=env,
                start_new_session=True,  # its own process group, killed as a whole
            )
        except OSError as err:
            process.stderr.write(f"cannot run command: {err}\n".encode())
            process.exit(127)
            return
        self._running.add(proc)
        self._sessions.add(proc.pid)  # start_new_session: the shell's pid is the session id
        try:
            # send_eof=False, then drain both: otherwise the channel closes when stdout ends and
            # stderr is lost (nats-and-eventsourcing.md §5.1).
            await process.redirect(stdin=proc.stdin, stdout=proc.stdout, stderr=proc.stderr, send_eof=False)
            exited = asyncio.ensure_future(proc.wait())
            # wait_closed also finishes asyncssh's redirect clean-up: let it run to the end.
            closed = asyncio.ensure_future(process.wait_closed())
            await asyncio.wait({exited, closed}, return_when=asyncio.FIRST_COMPLETED)
            if not exited.done():  # the client went away: kill the command
                _kill_group(proc)
                await asyncio.wait({exited}, timeout=_KILL_GRACE_S)
                return
            status = exited.result()
            try:
                await process.stdout.drain()
                await process.stderr.drain()
            except (BrokenPipeError, ConnectionError, asyncssh.Error):
                return
            process.exit(status if status >= 0 else 128 - status)
            await asyncio.wait({closed}, timeout=_KILL_GRACE_S)
        finally:
            self._running.discard(proc)
            if proc.returncode is None:
                _kill_group(proc)
                self._reap(proc)
            # A command killed because its client went away leaves its pipes open (nobody reads
            # them now): closed here, not by the garbage collector's ResourceWarning.
            transport = getattr(proc, "_transport", None)
            if transport is not None:
                transport.close()

    def _reap(self, proc: asyncio.subprocess.Process) -> None:
        """A command killed and not yet exited is held until it has (and `stop` waits for it):
        dropped at once, the garbage collector met it still running on a loaded machine
        ("ResourceWarning: subprocess N is still running", a shell task's clean-up command
        whose client had gone, after its handler had returned or been cancelled)."""
        waited = asyncio.ensure_future(proc.wait())
        self._reaping.add(waited)
        waited.add_done_callback(self._reaping.discard)


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _now_ticks() -> int:
    """Now, in clock ticks since boot (the unit of /proc/<pid>/stat's start time); 0 off Linux."""
    try:
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0
    return int(uptime * os.sysconf("SC_CLK_TCK"))


def kill_all(pids: Iterable[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def left_behind(env: Mapping[str, str], directory: Path) -> list[int]:
    """Processes a node's commands started, whatever session they are in: those whose environment
    has every entry of `env` (the endpoint gives it to its commands; none when empty), or whose
    working directory is in `directory` (the node's: a daemon may have reused its environment's
    memory for its process title, as redis-server does). Linux only: empty without /proc."""
    entries = {f"{name}={value}".encode() for name, value in env.items()}
    inside = str(directory)
    found = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            environ = set(Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"))
            cwd = os.readlink(f"/proc/{entry}/cwd").removesuffix(" (deleted)")
        except OSError:
            continue
        if (entries and entries <= environ) or cwd == inside or cwd.startswith(inside + "/"):
            found.append(int(entry))
    return found


def _members(sessions: set[int], not_before: int) -> list[int]:
    """Processes still in one of `sessions` that started after `not_before` (so a recycled
    session id of an unrelated process is never hit). Linux only: empty without /proc."""
    if not sessions:
        return []
    found = []
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []
    for entry in entries:
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()  # after "pid (comm) "
        try:
            session, started = int(fields[3]), int(fields[19])
        except (IndexError, ValueError):
            continue
        if session in sessions and started >= not_before - 1:
            found.append(int(entry))
    return found
