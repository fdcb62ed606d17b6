"""Run the embedded deployment: nats-server and the services as child processes.

With authorization (the default when it starts its own server, or when given `auth_dir`, the
keys of an authorizing server), the `auth` child starts first: it answers the server's auth
callout and makes, on first start, each child's identity (a token in `<auth_dir>/<name>.cred`,
mode 0600, handed to the child as `$MUSTER_CREDENTIALS`) and a super-admin credential for the
local user in `<data-dir>/credentials` (docs/security.md).

Each child is `python -m muster <service>`; readiness is the child's own "started" log line,
read from its stderr (which is also copied to `<data-dir>/logs/<name>.log`), so nothing here
ever polls. Stopping sends SIGTERM to every child, waits, and stops nats-server last, so no
orphan survives a Ctrl-C.

The data directory is locked for the deployment's life (`DataDirLock`): a second deployment
there refuses, naming this one. With `supervise`, a child (or the embedded nats-server) that
exits unasked is started again, as a process manager does (`RestartPolicy`); the others keep
running, and a job in flight goes on (its state is in the log, its tasks in the TASKS stream).
"""

from __future__ import annotations

import asyncio
import errno
import getpass
import json
import os
import re
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from muster.bus.server import DataDirLock, NatsServer, ServerError, append_private, reachable
from muster.tls.context import CA_ENV, check_listen

from .exits import STAY_DOWN_EXIT
from .lifeline import lifeline
from .tls import DeploymentTls, reload_child

SERVICES = ("solver", "planner", "provisioner", "tracker", "governance", "notifier")

READY = b'"started"'
LISTENING = b'"listening"'
"""A service with a port says where it listens before it says it started (the tracker: its URL)."""
RELOADED = b'"certificate reloaded"'
RELOADING = ("notifier", "pool", "planner")
"""The services that read their operator's files again on SIGHUP (`muster reload`)."""
SETTINGS_RELOADED = tuple(f'"{s}{said} reloaded"'.encode() for s in RELOADING for said in ("", " not"))
"""What one of them says once a SIGHUP is done: its files read, or kept with the reason
(muster/allowfile.py, services/notifier/settings.py); a tracker says RELOADED of its certificate."""
SERVER = "nats-server"


class StartError(RuntimeError):
    pass


class StartRefused(StartError):
    """What the user chose cannot be had (a port in use, an address not on this machine): bad
    input, exit 2, as a data directory in use is; not a failure of muster's."""


REFUSED_EXIT = 2
"""A child's exit status for a setting it refuses at start (click's, and `muster`'s EXIT_INVALID)."""


@dataclass(frozen=True)
class RestartPolicy:
    """A process that exits unasked starts again after `backoff_s`, doubling up to
    `max_backoff_s`; after `burst` exits within `window_s` it is left down and reported
    (systemd's StartLimitBurst / StartLimitIntervalSec, supervisord's startretries)."""

    backoff_s: float = 0.5
    max_backoff_s: float = 8.0
    burst: int = 5
    window_s: float = 60.0

    def delay(self, exits: int) -> float:
        return float(min(self.max_backoff_s, self.backoff_s * 2 ** (exits - 1)))


@dataclass
class Child:
    name: str
    process: asyncio.subprocess.Process
    log_path: Path
    copier: asyncio.Task[None] | None = None
    args: list[str] = field(default_factory=list)
    """The `muster` arguments it was started with (a restart uses the same)."""
    stopping: bool = False
    """Asked to exit (stop, kill by a fault test, retire): not a crash."""
    retired: bool = False
    """It leaves the deployment when it exits (`Deployment.retire`)."""
    last_line: str = ""
    """Its last log line: why it exited during start."""
    port: int = 0
    """The port it said it listens on (a tracker), if any."""
    reloaded: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when it says it reloaded (a tracker its certificate, a notifier its settings: after SIGHUP)."""
    reload_said: str = ""
    """The line it said that in (a notifier's may say why it kept its settings)."""
    started: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when it says it started (its signal handlers are set by then), cleared when it ends."""

    @property
    def pid(self) -> int:
        return self.process.pid


def exit_text(code: int | None) -> str:
    if code is None:
        return "did not start"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def port_problem(host: str, port: int) -> str:
    """Why a listener could not bind `host`:`port` now, said of the port ('' if it could), as
    aiohttp binds (SO_REUSEADDR). Checked on the tracker's own address: one taken there but free
    on 127.0.0.1 was found only by the tracker as it exited."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM)[0]
    except (OSError, UnicodeError) as err:
        return f"cannot be bound: {host} is not an address of this machine ({err})"
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(address)
        except OSError as err:
            if err.errno == errno.EADDRNOTAVAIL:
                return f"cannot be bound: {host} is not an address of this machine"
            return "is in use by another program" if err.errno == errno.EADDRINUSE else f"cannot be bound: {err.strerror or err}"
    return ""


def host_problem(host: str) -> str:
    """Why nothing can listen on `host` ('' if something can), said before anything starts: else
    nats-server failed first ("did not become ready"), or the tracker's port was blamed."""
    problem = port_problem(host, 0)
    if not problem.startswith("cannot be bound: "):
        return ""
    why = problem.removeprefix("cannot be bound: ").removeprefix(f"{host} is not an address of this machine").strip(" ()")
    return (f"--host {host} is not an address of this machine{f' ({why})' if why else ''}: give one of its own "
            "(127.0.0.1, an address of one of its interfaces, or 0.0.0.0 for all)")


def _stderr(message: str) -> None:
    print(f"[muster] {message}", file=sys.stderr, flush=True)


@dataclass
class Deployment:
    data_dir: Path
    nats_url: str | None = None
    tracker_port: int = 0
    capacity: int = 8
    tenants: str = "default"
    """Comma-separated: the tenants the provisioners serve (`tenant_names`)."""
    server: NatsServer | None = None
    children: list[Child] = field(default_factory=list)
    replicas: dict[str, int] = field(default_factory=dict)
    """Processes per service (default 1); several are named `<service>-1`, `<service>-2`..."""
    extra_args: dict[str, list[str]] = field(default_factory=dict)
    """More options, by service (`planner`) or by process name (`provisioner-2`)."""
    auth: bool = True
    """start our own server with authorization on (ignored when `nats_url` is given)"""
    auth_dir: Path | None = None
    """keys of the authorizing server this deployment runs the auth service for"""
    tls: DeploymentTls | None = None
    """TLS on the bus and the tracker (muster/runtime/tls.py); None: plain TCP, on loopback only"""
    host: str = "127.0.0.1"
    """where our own nats-server and the tracker listen"""
    insecure_network: bool = False
    """plain TCP on another address than loopback, as told (--insecure-network)"""
    launcher: Callable[[str], list[str]] | None = None
    """Process name -> argv put before its command (a fault test runs each process in a network
    namespace of its own, `nsenter --net=... --`, which execs: the PID stays the child's)."""
    tracker_host: str | None = None
    """Where the (first) tracker is reached (`tracker_url`), when not where it listens."""
    start_timeout_s: float = 60.0
    """How long a process has to say it started (StartError past it; one that exits is said at
    once). 60 s: `muster up` starts eight or more at once, and on a loaded 2-core machine the
    last of them (the tracker) said it 34 s after the first; the fault tests give 90 s."""

    @property
    def credentials(self) -> Path:
        """The local super admin's credentials (the CLI finds `./.muster/credentials`)."""
        return self.data_dir / "credentials"

    def admin_token(self) -> str | None:
        """The local super admin's token when this deployment runs the auth service; None
        otherwise (the caller's own credentials apply)."""
        from muster.bus.connect import read_credentials_file

        return read_credentials_file(self.credentials) if self.auth_dir is not None else None
    supervise: bool = False
    policy: RestartPolicy = field(default_factory=RestartPolicy)
    notify: Callable[[str], None] = _stderr
    """Told of every restart and every process given up on (one sentence each)."""
    given_up: dict[str, str] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)
    """How often each process was started again after an exit (`muster ps` shows it)."""
    bound_ports: dict[str, int] = field(default_factory=dict)
    """Process name -> the port it got when given `--port 0` (a tracker): it keeps it at its
    restarts, where its clients know to find it."""

    def __post_init__(self) -> None:
        self.lock = DataDirLock(self.data_dir)
        self._supervisors: dict[str, asyncio.Task[None]] = {}
        self._stopping = asyncio.Event()
        self._fatal: asyncio.Future[str] | None = None
        self._started_at = ""
        self._changed = asyncio.Condition()
        """Notified when a child says it started, when one ends, and when a restart ends."""
        self._restarting: set[str] = set()

    @property
    def started(self) -> bool:
        """It holds the data directory (a failed start has already stopped what it began)."""
        return self.lock.held

    @property
    def tracker_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.tracker_host or reachable(self.host)}:{self.tracker_port}"

    async def start(self) -> None:
        if not self.lock.held:  # (start_auth may have taken it: a harness starts auth first)
            self.lock.acquire()  # DataDirBusy (a ServerError) names the deployment that has it
        self._stopping.clear()
        self._fatal = asyncio.get_running_loop().create_future()
        self._started_at = datetime.now(UTC).isoformat(timespec="seconds")
        try:
            (self.data_dir / "logs").mkdir(parents=True, exist_ok=True, mode=0o700)
            if problem := host_problem(self.host):
                raise StartRefused(problem)
            # What was asked for is refused before what the machine has: with 8080 taken, `--host
            # 0.0.0.0` without TLS was sent to pick another port, then refused again for TLS.
            check_listen(self.host, self.tls is not None, self.insecure_network, "muster up", "pass --tls")
            if self.tracker_port and (problem := port_problem(self.host, self.tracker_port)):
                raise StartRefused(f"tracker port {self.tracker_port} on {self.host} {problem}: "
                                   "pass another --tracker-port, or 0 for any free one")
            if self.tls is not None:
                self.tls.prepare()
            if not self.nats_url:
                self.server = NatsServer(self.data_dir / "nats", hold_fds=(self.lock.fileno(),), auth=self._auth_config(),
                                         host=self.host, tls=self.tls.nats() if self.tls else None,
                                         insecure_network=self.insecure_network, launcher=tuple(lifeline()))
                await self.server.start()
                self.nats_url = self.server.url
            (self.data_dir / "nats.url").write_text(self.nats_url)
            await self.start_auth()
            commands = {name: args for name, args in self.commands().items() if name != "auth"}
            await asyncio.gather(*(self._spawn(name, args) for name, args in commands.items()))
            # No --tracker-port: each tracker was given 0, bound a port of the kernel's and said
            # which (a port chosen here could be taken by another process before it bound it).
            self.tracker_port = self.tracker_port or next(
                (self.bound_ports[n] for n in self.processes("tracker") if n in self.bound_ports), 0)
            (self.data_dir / "tracker.url").write_text(self.tracker_url)
            self._describe()
            if self.supervise:
                for name in [SERVER] * (self.server is not None) + [c.name for c in self.children]:
                    self._watch(name)
        except BaseException:
            await self.stop()
            raise

    def _auth_config(self) -> str:
        """The server's authorization block (our own server, auth on), keys made on first start."""
        if not self.auth:
            return ""
        from services.auth.keys import AuthKeys, server_auth_config

        self.auth_dir = self.auth_dir or self.data_dir / "auth"
        keys = AuthKeys.load_or_create(self.auth_dir)
        return server_auth_config(keys.issuer_public, keys.bus_secret)

    async def start_auth(self) -> None:
        """Start the auth child (once): every other connection goes through it."""
        if self.auth_dir is None or any(c.name == "auth" for c in self.children):
            return
        if not self.lock.held:  # a harness starts the auth child before the others
            self.lock.acquire()
        (self.data_dir / "logs").mkdir(parents=True, exist_ok=True, mode=0o700)
        self._write_bootstrap()
        await self._spawn("auth", self.commands()["auth"])

    def commands(self) -> dict[str, list[str]]:
        """Process name -> its `muster` arguments."""
        services = {
            "solver": ["solver"],
            "planner": ["planner"],
            "provisioner": ["provisioner", "--capacity", str(self.capacity), "--tenants", self.tenants],
            # A stable id and work dir per process, so plugin state (localhost keys)
            # survives a restart.
            "tracker": ["tracker", "--port", str(self.tracker_port), "--host", self.host, *self._tracker_tls()],
            # Where pool callbacks may go besides public addresses: as the notifier's webhooks (below).
            "pool": ["pool", "serve"],
            # Approval rules, policies, subscriptions, schedules (and the scheduler); notifications
            # (docs/governance.md). The notifier reads webhook secrets from $MUSTER_NOTIFIER_SECRETS, and where
            # webhooks may go besides public addresses from `muster up --webhook-allow` ($MUSTER_WEBHOOK_ALLOW).
            "governance": ["governance"],
            "notifier": ["notifier"],
        }
        out: dict[str, list[str]] = {}
        if self.auth_dir is not None:
            out["auth"] = ["auth", "--keys-dir", str(self.auth_dir), "--bootstrap", str(self.auth_dir / "bootstrap.json")]
        for service, args in services.items():
            n = self.replicas.get(service, 1)
            for name in [service] if n == 1 else [f"{service}-{i}" for i in range(1, n + 1)]:
                own = ["--id", name, "--work-dir", str(self.data_dir / name)] if service == "provisioner" else []
                own = ["--instance", name] if service in ("pool", "governance") else own
                out[name] = [*args, *own, *self.extra_args.get(service, []), *(self.extra_args.get(name, []) if name != service else [])]
                if name in self.bound_ports:  # (the last --port counts)
                    out[name] += ["--port", str(self.bound_ports[name])]
        return out

    def _tracker_tls(self) -> list[str]:
        return [*(self.tls.tracker_args() if self.tls else []), *(["--insecure-network"] if self.insecure_network else [])]

    async def rotate_certificates(self, timeout: float = 15.0) -> list[str]:
        """New server certificates (new keys, the same CA), read again by the running
        nats-server (a config reload) and trackers (SIGHUP), without a restart: connections stay
        open, new ones get the new certificates. Returns what reloaded."""
        if self.tls is None:
            raise StartError("this deployment runs without TLS: nothing to rotate")
        self.tls.rotate()
        done = []
        if self.server is not None:
            await self.server.reload(timeout)
            done.append(SERVER)
        trackers = [c for c in self.children if c.name.split("-")[0] == "tracker" and c.process.returncode is None]
        try:
            await asyncio.wait_for(asyncio.gather(*(reload_child(c) for c in trackers)), timeout)
        except TimeoutError:
            raise StartError(f"a tracker did not reload its certificate within {timeout:g} s; see its log") from None
        return done + [c.name for c in trackers]

    async def reload_settings(self, timeout: float = 15.0) -> list[str]:
        """Have every running notifier read its secrets file and allow file again, and the pool
        service and the planners their allow file (SIGHUP), without a restart; what each said
        (`notifier: reloaded`, or why not). One of them given up on (a file it could not read at
        its restarts) is started again: the operator fixed the file and says so by reloading."""
        down = [name for name in self.given_up if name.split("-")[0] in RELOADING and name != SERVER]
        revived = asyncio.gather(*(self._revive(name) for name in down))
        reloading = [c for c in self.children if c.name.split("-")[0] in RELOADING and c.process.returncode is None
                     and c.name not in down]
        for c in reloading:  # what each says now, not what it said at an earlier reload
            c.reload_said = ""
            c.reloaded.clear()
        try:
            await asyncio.wait_for(asyncio.gather(*(reload_child(c) for c in reloading)), timeout)
        except TimeoutError:
            late = ", ".join(c.name for c in reloading if not c.reloaded.is_set())
            raise StartError(f"{late or 'a service'} did not reload within {timeout:g} s; see its log") from None
        finally:
            again = await revived
        said = {c.name: _reload_said(c) for c in reloading}
        said.update(zip(down, again, strict=True))
        return [said[c.name] for c in self.children if c.name in said]

    async def _revive(self, name: str) -> str:
        """Start a child given up on again, as at its first start; what happened, as a reload says it."""
        old = self.child(name)
        self.children.remove(old)
        try:
            child = await self._spawn(name, old.args)
        except StartError as err:
            failed = self.child(name)
            if failed.process.returncode is None:  # (hung in its start: it is down, as before)
                failed.process.kill()
            await failed.process.wait()
            return f"{name}: not started again: {err}"
        del self.given_up[name]
        self._describe()
        self._watch(name)
        self.notify(f"{name} is running again (pid {child.pid}), as `muster reload` asked")
        return f"{name}: started again (pid {child.pid})"

    def processes(self, service: str) -> list[str]:
        n = self.replicas.get(service, 1)
        return [service] if n == 1 else [f"{service}-{i}" for i in range(1, n + 1)]

    def child_credentials(self, name: str, args: list[str] | None = None) -> Path | None:
        """The credentials file of a child: one per provisioner (its id is its principal), one
        per other service (its replicas share the identity)."""
        if self.auth_dir is None or name == "auth":
            return None
        service = name.rsplit("-", 1)[0] if name.rsplit("-", 1)[-1].isdigit() else name
        return self.auth_dir / f"{self.provisioner_id(name, args) if service == 'provisioner' else service}.cred"

    def provisioner_id(self, name: str, args: list[str] | None = None) -> str:
        """The id a provisioner process runs with (its last `--id`), which is its principal."""
        args = self.commands().get(name, []) if args is None else args
        ids = [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--id"]
        return ids[-1] if ids else name

    async def _provisioner_identity(self, name: str, args: list[str]) -> None:
        """A provisioner added after the start (an autoscaler's) gets its identity and queue
        grants from the local super admin, as the bootstrap gives the first ones theirs."""
        from contracts import subjects
        from contracts.identity import AuthReply
        from muster.bus.connect import connect, principal_of, write_credentials_file

        assert self.auth_dir is not None
        pid, path = self.provisioner_id(name, args), self.child_credentials(name, args)
        if path is None or path.exists():
            return
        klass = _option(args, "--class") or "default"
        tenants = tenant_names(_option(args, "--tenants") or self.tenants)
        nc = await connect(self.nats_url, name="muster-up", token=self.admin_token(), data_dir=self.data_dir)
        try:
            async def ask(verb: str, **body: str) -> Any:
                msg = await nc.request(subjects.auth_request(principal_of(nc), verb), json.dumps(body).encode(), timeout=10)
                reply = AuthReply.model_validate_json(msg.data)
                if not reply.ok:
                    raise StartError(f"no identity for provisioner {pid}: {reply.reason}")
                return reply.data

            made = await ask("user-create", principal=pid, role="service", service="provisioner")
            for tenant in tenants:
                await ask("grant", principal=pid, permission="execute", tenant=tenant, scope=f"queue:{klass}")
        finally:
            await nc.close()
        write_credentials_file(path, made["token"])

    def _write_bootstrap(self) -> None:
        from services.auth.bootstrap import Bootstrap, BootstrapPrincipal

        assert self.auth_dir is not None
        tenants = tenant_names(self.tenants)
        klass = _option(self.extra_args.get("provisioner", []), "--class") or "default"
        people = [BootstrapPrincipal(local_principal(), "super_admin", self.credentials)]
        for service in ("solver", "planner", "tracker", "pool", "governance", "notifier"):
            people.append(BootstrapPrincipal(service, "service", self.auth_dir / f"{service}.cred", service=service))
        for name in self.processes("provisioner"):
            own, pid = _option(self.extra_args.get(name, []), "--class") or klass, self.provisioner_id(name)
            people.append(BootstrapPrincipal(pid, "service", self.auth_dir / f"{pid}.cred", service="provisioner",
                                             queues=tuple((t, own) for t in tenants)))
        spec = Bootstrap(tenants=tenants, principals=tuple(people), by="muster-up")
        (self.auth_dir / "bootstrap.json").write_text(json.dumps(spec.to_json(), indent=1))

    def child(self, name: str) -> Child:
        for c in self.children:
            if c.name == name:
                return c
        raise KeyError(name)

    def _describe(self) -> None:
        """Who holds the data directory, for the next `muster up` there and for operators: the
        processes that run, and those given up on with why (their last pid named nothing)."""
        processes = {c.name: c.pid for c in self.children if c.name not in self.given_up}
        # Absolute: `muster ps` runs in another shell, often elsewhere (a relative data dir
        # named `.muster/logs/...`, which is not there from where it runs).
        logs = {c.name: str(c.log_path.resolve()) for c in self.children}
        if self.server is not None and self.server.process is not None:
            processes = {SERVER: self.server.process.pid, **processes}
        if self.server is not None and self.server.log_path is not None:
            logs = {SERVER: str(self.server.log_path.resolve()), **logs}
        self.lock.describe(pid=os.getpid(), nats_url=self.nats_url, tracker_url=self.tracker_url,
                           started_at=self._started_at, processes=processes, given_up=dict(self.given_up),
                           restarts=dict(self.restarts), logs=logs)

    async def kill(self, name: str) -> int:
        """kill -9 one child by its PID (fault tests; it is not restarted); returns the PID."""
        child = self.child(name)
        child.stopping = True
        # Through the process handle, never a bare PID: a reaped child's PID may belong to
        # someone else by now.
        if child.process.returncode is None:
            child.process.kill()
        await child.process.wait()
        if child.copier is not None:
            await asyncio.gather(child.copier, return_exceptions=True)
        self.children.remove(child)
        return child.pid

    async def restart(self, name: str, args: list[str] | None = None) -> Child:
        """Start a child that was killed again, with the same arguments (or `args`)."""
        if any(c.name == name for c in self.children):
            raise StartError(f"{name} is running")
        child = await self._spawn(name, args if args is not None else self.commands()[name])
        self._describe()
        if self.supervise:
            self._watch(name)
        return child

    async def add(self, name: str, args: list[str]) -> Child:
        """Start one more child (say `provisioner-3`, for an autoscaler), supervised like the
        others; with auth on, a provisioner gets its own identity first."""
        if self.auth_dir is not None and args[:1] == ["provisioner"]:
            await self._provisioner_identity(name, args)
        return await self.restart(name, args)

    def retire(self, name: str) -> None:
        """The child's next exit is expected (a drained provisioner exits on its own): it is
        not restarted, and it leaves `children` then."""
        child = self.child(name)
        child.stopping = child.retired = True
        if child.process.returncode is not None:
            self._leave(child)

    def _leave(self, child: Child) -> None:
        if child in self.children:
            self.children.remove(child)
            self._describe()
            self.notify(f"{child.name} has left, as asked ({exit_text(child.process.returncode)})")

    async def _spawn(self, name: str, args: list[str]) -> Child:
        timeout = self.start_timeout_s
        env = {**os.environ, "NATS_URL": self.nats_url or "", "MUSTER_LOG_LEVEL": os.environ.get("MUSTER_LOG_LEVEL", "INFO")}
        own = self.child_credentials(name, args)
        if own is not None:  # its own identity, not whatever the caller's environment holds
            env.pop("MUSTER_TOKEN", None)
            env["MUSTER_CREDENTIALS"] = str(own)
        if self.tls is not None:
            trust = self.tls.child_env(name)
            if self.server is None and os.environ.get(CA_ENV):  # NATS_URL's server: trusted as the caller says
                trust.pop(CA_ENV)
            env.update(trust)
        process = await asyncio.create_subprocess_exec(
            *(self.launcher(name) if self.launcher is not None else []), *lifeline(),
            sys.executable, "-m", "muster", *args, "--nats-url", self.nats_url or "",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, env=env,
            pass_fds=(self.lock.fileno(),),  # the lock lasts while any of our processes does
        )
        child = Child(name, process, self.data_dir / "logs" / f"{name}.log", args=list(args))
        self.children.append(child)
        ready = asyncio.get_running_loop().create_future()
        child.copier = asyncio.create_task(self._copy(child, ready))
        try:
            await asyncio.wait_for(ready, timeout)
        except TimeoutError:
            raise StartError(f"{name} did not start within {timeout:g}s; see {child.log_path}") from None
        if child.port and _last_option(args, "--port") == "0":
            self.bound_ports[name] = child.port
            child.args = [*args, "--port", str(child.port)]  # its restarts keep it
        return child

    async def _copy(self, child: Child, ready: asyncio.Future[None]) -> None:
        assert child.process.stderr is not None
        with append_private(child.log_path) as log:
            async for line in lines_of(child.process.stderr):
                log.write(line)
                log.flush()
                if line.strip():
                    child.last_line = line.decode(errors="replace").strip()
                if not ready.done() and LISTENING in line:
                    child.port = _said_port(line)
                if not ready.done() and READY in line:
                    ready.set_result(None)
                    child.started.set()
                    await self._note_change()
                if RELOADED in line or any(said in line for said in SETTINGS_RELOADED):
                    child.reload_said = line.decode(errors="replace").strip()
                    child.reloaded.set()
        child.started.clear()
        await self._note_change()
        if not ready.done():
            # Its exit status says whose fault it was: a setting it refused (a port taken a
            # moment after our own check) is bad input, as when we find it first.
            refused = await child.process.wait() == REFUSED_EXIT
            if not ready.done():  # (a start given up on while it exited)
                ready.set_exception((StartRefused if refused else StartError)(
                    f"{child.name} exited during start{_why(child.last_line)}; see {child.log_path}"))

    # -- supervision -----------------------------------------------------------------------

    def _watch(self, name: str) -> None:
        self._supervisors[name] = asyncio.create_task(self._supervise(name), name=f"supervise-{name}")

    async def _supervise(self, name: str) -> None:
        """Wait for `name` to exit; unless asked to, start it again after a backoff, or give
        up after `policy.burst` exits within `policy.window_s`."""
        loop = asyncio.get_running_loop()
        exits: list[float] = []
        while True:
            asked, code, log_path = await self._exited(name)
            if asked:
                return
            if code == STAY_DOWN_EXIT and name != SERVER:
                self._stay_down(name, code, log_path)
                await self._note_change()
                return
            now = loop.time()
            exits = [t for t in exits if now - t < self.policy.window_s] + [now]
            if len(exits) >= self.policy.burst:
                self._give_up(name, code, len(exits), log_path)
                await self._note_change()
                return
            self._restarting.add(name)
            delay = self.policy.delay(len(exits))
            self.notify(f"{name} exited ({exit_text(code)}); restarting it in {delay:g} s; see {log_path}")
            try:
                await asyncio.wait_for(self._stopping.wait(), delay)
                return
            except TimeoutError:
                pass
            pid = await self._start_again(name)
            if pid is not None:
                self.restarts[name] = self.restarts.get(name, 0) + 1
                self._restarting.discard(name)
                self.notify(f"{name} is running again (pid {pid})")
                self._describe()
                await self._note_change()

    async def _note_change(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def steady(self, timeout: float = 60.0) -> None:
        """Until no restart is under way and every child runs (has said it started, not ended
        since); those given up on or asked to stop are not waited for. TimeoutError past `timeout`."""

        def steady() -> bool:
            return not self._restarting and all(c.started.is_set() for c in self.children
                                                if not c.stopping and c.name not in self.given_up)

        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(steady)

    async def _exited(self, name: str) -> tuple[bool, int | None, Path]:
        """The exit code of `name`'s current process when it exits (None: it never started),
        and whether we asked it to."""
        if name == SERVER:
            server = self.server
            assert server is not None and server.log_path is not None
            proc = server.process
            code = None if proc is None else await proc.wait()
            return self._stopping.is_set(), code, server.log_path
        child = self.child(name)
        code = await child.process.wait()
        if child.copier is not None:
            await asyncio.gather(child.copier, return_exceptions=True)
        if child.retired:
            self._leave(child)
        return child.stopping or self._stopping.is_set(), code, child.log_path

    async def _start_again(self, name: str) -> int | None:
        """Start `name` again (same arguments; the server on the same port and store). A
        failed start is reported and counts as one more exit."""
        try:
            if name == SERVER:
                assert self.server is not None
                await self.server.start()
                assert self.server.process is not None
                return self.server.process.pid
            old = self.child(name)
            self.children.remove(old)
            return (await self._spawn(name, old.args)).pid
        except (StartError, ServerError) as err:
            self.notify(f"{name} failed to start again: {err}")
            if name != SERVER:
                child = self.child(name)
                try:  # it exited during its start: let the event loop reap it, so its exit code is known
                    await asyncio.wait_for(child.process.wait(), 1.0)
                except TimeoutError:  # hung in its start: count it as an exit (a kill of an exited,
                    child.process.kill()  # unreaped child would reap it here: exit code "255")
            return None

    def _stay_down(self, name: str, code: int, log_path: Path) -> None:
        """It asked not to be started again (`STAY_DOWN_EXIT`: a provisioner whose id another
        process took over); its log says why."""
        message = (f"{name} exited ({exit_text(code)}: it must not be started again); leaving it down, the others "
                   f"keep running; see {log_path}")
        self.given_up[name] = message
        self._restarting.discard(name)
        self._describe()
        self.notify(message)

    def _give_up(self, name: str, code: int | None, exits: int, log_path: Path) -> None:
        last = exit_text(code)
        if name == SERVER:
            message = (f"{name} exited {exits} times within {self.policy.window_s:g} s (last: {last}); "
                       f"nothing works without it, so everything stops; see {log_path}")
            if self._fatal is not None and not self._fatal.done():
                self._fatal.set_result(message)
        else:
            message = (f"{name} exited {exits} times within {self.policy.window_s:g} s (last: {last}); giving up "
                       f"on it, the others keep running; see {log_path}")
        self.given_up[name] = message
        self._restarting.discard(name)
        self._describe()
        self.notify(message)

    async def wait_failed(self) -> str:
        """Returns (a sentence) when the deployment cannot go on: supervised, when the
        nats-server was given up on; unsupervised, when any child exits."""
        if self.supervise:
            assert self._fatal is not None
            return await self._fatal
        waits = {asyncio.ensure_future(c.process.wait()): c for c in self.children if not c.retired}
        try:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        child = waits[done.pop()]
        return f"{child.name} exited unexpectedly ({exit_text(child.process.returncode)}); see {child.log_path}"

    # -- stopping --------------------------------------------------------------------------

    async def stop(self, timeout: float = 15.0) -> None:
        self._stopping.set()
        supervisors, self._supervisors = list(self._supervisors.values()), {}
        for task in supervisors:
            task.cancel()
        await asyncio.gather(*supervisors, return_exceptions=True)
        for child in self.children:
            child.stopping = True
            if child.process.returncode is None:
                child.process.send_signal(signal.SIGTERM)
        for child in self.children:
            try:
                await asyncio.wait_for(child.process.wait(), timeout)
            except TimeoutError:
                child.process.kill()
                await child.process.wait()
            if child.copier is not None:
                await asyncio.gather(child.copier, return_exceptions=True)
        self.children.clear()
        if self.server is not None:
            await self.server.stop()
            self.server = None
        self.lock.release()


def tenant_names(tenants: str) -> tuple[str, ...]:
    """`default,acme` (`muster up --tenant`, a provisioner's `--tenants`) as its names."""
    return tuple(t for t in tenants.split(",") if t)


def _option(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args[:-1] else None


def _last_option(args: list[str], name: str) -> str | None:
    """The value an option has (click keeps the last one given)."""
    values = [args[i + 1] for i, a in enumerate(args[:-1]) if a == name]
    return values[-1] if values else None


def _said_port(line: bytes) -> int:
    """The port in a `listening` log line's URL (0 if none can be read)."""
    try:
        url = str(json.loads(line).get("url", ""))
        return int(url.rsplit(":", 1)[1])
    except (ValueError, IndexError, AttributeError):
        return 0


def local_principal() -> str:
    """The local user as a principal id (`muster up`'s super admin)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = ""
    cleaned = re.sub(r"[^a-z0-9-]", "-", user.lower()).strip("-")[:64]
    return cleaned or "admin"


async def lines_of(stream: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """Every line of `stream` to its end; a line longer than the reader's limit (64 KiB: a
    traceback, an event's body) in pieces, the last one ending it. `async for` over the stream
    raises at such a line instead, and the copier that died of it left the child writing to a
    pipe nobody read: the child hung at its next 64 KiB of log."""
    while True:
        try:
            yield await stream.readuntil(b"\n")
        except asyncio.LimitOverrunError as long:
            yield await stream.readexactly(long.consumed)
        except asyncio.IncompleteReadError as end:
            if end.partial:
                yield end.partial
            return


def _reload_said(child: Child) -> str:
    """What one process did on `muster reload`, for `muster up`'s line."""
    if not child.reloaded.is_set():  # (it exited: reload_child waits for its word or its end)
        return (f"{child.name}: exited before it reloaded ({exit_text(child.process.returncode)}); started again, it "
                "reads the files at its start")
    return f"{child.name}: not reloaded{_why(child.reload_said)}" if "not reloaded" in child.reload_said else f"{child.name}: reloaded"


def _why(line: str) -> str:
    """The reason in a child's last (JSON) log line, if it gave one."""
    try:
        record = json.loads(line)
    except ValueError:
        return f": {line.removeprefix('Error: ')[:200]}" if line else ""
    if not isinstance(record, dict):
        return ""
    reason = record.get("error") or record.get("event") or ""
    return f": {str(reason)[:200]}" if reason else ""
