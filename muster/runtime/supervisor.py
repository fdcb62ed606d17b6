"""Run the embedded deployment: nats-server and the four services as child processes.

Each child is `python -m muster <service>`; readiness is the child's own "started" log line,
read from its stderr (which is also copied to `<data-dir>/logs/<name>.log`), so nothing here
ever polls. Stopping sends SIGTERM to every child, waits, and stops nats-server last, so no
orphan survives a Ctrl-C.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

from muster.bus.server import NatsServer, free_port

READY = b'"started"'


class StartError(RuntimeError):
    pass


@dataclass
class Child:
    name: str
    process: asyncio.subprocess.Process
    log_path: Path
    copier: asyncio.Task[None] | None = None
    args: list[str] = field(default_factory=list)
    """The `muster` arguments it was started with (a restart uses the same)."""

    @property
    def pid(self) -> int:
        return self.process.pid


@dataclass
class Deployment:
    data_dir: Path
    nats_url: str | None = None
    tracker_port: int = 0
    capacity: int = 8
    tenants: str = "default"
    server: NatsServer | None = None
    children: list[Child] = field(default_factory=list)
    replicas: dict[str, int] = field(default_factory=dict)
    """Processes per service (default 1); several are named `<service>-1`, `<service>-2`..."""
    extra_args: dict[str, list[str]] = field(default_factory=dict)
    """More options, by service (`planner`) or by process name (`provisioner-2`)."""

    @property
    def tracker_url(self) -> str:
        return f"http://127.0.0.1:{self.tracker_port}"

    async def start(self) -> None:
        (self.data_dir / "logs").mkdir(parents=True, exist_ok=True)
        if not self.nats_url:
            self.server = await NatsServer(self.data_dir / "nats").start()
            self.nats_url = self.server.url
        (self.data_dir / "nats.url").write_text(self.nats_url)
        self.tracker_port = self.tracker_port or free_port()
        (self.data_dir / "tracker.url").write_text(self.tracker_url)
        try:
            await asyncio.gather(*(self._spawn(name, args) for name, args in self.commands().items()))
        except BaseException:
            await self.stop()
            raise

    def commands(self) -> dict[str, list[str]]:
        """Process name -> its `muster` arguments."""
        services = {
            "solver": ["solver"],
            "planner": ["planner"],
            "provisioner": ["provisioner", "--capacity", str(self.capacity), "--tenants", self.tenants],
            # A stable id and work dir per process, so plugin state (static-pool
            # assignments, localhost keys) survives a restart.
            "tracker": ["tracker", "--port", str(self.tracker_port)],
        }
        out: dict[str, list[str]] = {}
        for service, args in services.items():
            n = self.replicas.get(service, 1)
            for name in [service] if n == 1 else [f"{service}-{i}" for i in range(1, n + 1)]:
                own = ["--id", name, "--work-dir", str(self.data_dir / name)] if service == "provisioner" else []
                out[name] = [*args, *own, *self.extra_args.get(service, []), *(self.extra_args.get(name, []) if name != service else [])]
        return out

    def child(self, name: str) -> Child:
        for c in self.children:
            if c.name == name:
                return c
        raise KeyError(name)

    async def kill(self, name: str) -> int:
        """kill -9 one child by its PID (fault tests); returns the PID."""
        child = self.child(name)
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
        await self._spawn(name, args if args is not None else self.commands()[name])
        return self.child(name)

    async def _spawn(self, name: str, args: list[str], timeout: float = 30.0) -> None:
        env = {**os.environ, "NATS_URL": self.nats_url or "", "MUSTER_LOG_LEVEL": os.environ.get("MUSTER_LOG_LEVEL", "INFO")}
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "muster", *args, "--nats-url", self.nats_url or "",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, env=env,
        )
        child = Child(name, process, self.data_dir / "logs" / f"{name}.log", args=list(args))
        self.children.append(child)
        ready = asyncio.get_running_loop().create_future()
        child.copier = asyncio.create_task(self._copy(child, ready))
        try:
            await asyncio.wait_for(ready, timeout)
        except TimeoutError:
            raise StartError(f"{name} did not start within {timeout:.0f}s; see {child.log_path}") from None

    async def _copy(self, child: Child, ready: asyncio.Future[None]) -> None:
        assert child.process.stderr is not None
        with child.log_path.open("ab") as log:
            async for line in child.process.stderr:
                log.write(line)
                log.flush()
                if not ready.done() and READY in line:
                    ready.set_result(None)
        if not ready.done():
            ready.set_exception(StartError(f"{child.name} exited during start; see {child.log_path}"))

    async def stop(self, timeout: float = 15.0) -> None:
        for child in self.children:
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

    async def wait_for_exit(self) -> Child:
        """Returns the first child that exits (which is a failure while running)."""
        waits = {asyncio.ensure_future(c.process.wait()): c for c in self.children}
        try:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        return waits[done.pop()]
