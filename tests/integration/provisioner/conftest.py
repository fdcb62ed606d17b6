"""Fixtures for real-SSH provisioner tests: a plugin registry, localhost nodes, a real sshd."""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
import shutil
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh
import pytest
import pytest_asyncio

from contracts.tasks import TaskMessage
from muster.bus.server import free_port
from services.provisioner.plugins import PluginRegistry
from services.provisioner.plugins.builtin.namespaces import system
from services.provisioner.plugins.testing import NodeFactory, made_node, make_task

SSHD = Path("/usr/sbin/sshd")
SSHD_START_TIMEOUT_S = 10.0


@pytest_asyncio.fixture
async def registry(tmp_path: Path) -> AsyncIterator[PluginRegistry]:
    reg = PluginRegistry.discover(work_dir=tmp_path / "work")
    yield reg
    await reg.aclose()


@pytest.fixture
def localhost_node(registry: PluginRegistry) -> NodeFactory:
    """Create and confirm a localhost node; returns a task template carrying its results."""

    async def make(node_id: str = "n1", cluster_id: str = "c1", **kw: Any) -> TaskMessage:
        create = make_task(
            "create", providertype="localhost", provider_name="local", node_id=node_id, cluster_id=cluster_id,
            automators=["shell"], **kw,
        )
        return await made_node(registry, create)

    return make


# ---------------------------------------------------------------------------- real sshd


@dataclass
class Sshd:
    host: str
    port: int
    user: str
    client_key: Path
    host_key: str
    """The host public key, 'algorithm base64'."""
    log: list[str] = field(default_factory=list)

    def grant(self, pool: str, host_id: str = "sshd-1") -> dict[str, Any]:
        """This sshd as a pool grants it (what the planner puts in a node's results)."""
        return {"pool": pool, "host_id": host_id, "address": self.host, "port": self.port, "user": self.user,
                "host_keys": [self.host_key]}


@pytest_asyncio.fixture
async def sshd(tmp_path: Path) -> AsyncIterator[Sshd]:
    """A real OpenSSH sshd on a free 127.0.0.1 port with a temporary config (stopped by PID)."""
    if not SSHD.exists():
        pytest.skip(f"{SSHD} not found: install Debian's openssh-server to run real-sshd tests")
    try:
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    except OSError as err:
        pytest.skip(f"sshd needs its privilege-separation directory /run/sshd: {err}")
    d = tmp_path / "sshd"
    d.mkdir(mode=0o700)
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    for name, key in (("ssh_host_ed25519_key", host_key), ("client_key", client_key)):
        (d / name).write_bytes(key.export_private_key())
        (d / name).chmod(0o600)
    (d / "authorized_keys").write_bytes(client_key.export_public_key())
    (d / "authorized_keys").chmod(0o600)
    config = (f"ListenAddress 127.0.0.1\nHostKey {d}/ssh_host_ed25519_key\nPidFile {d}/sshd.pid\n"
              f"AuthorizedKeysFile {d}/authorized_keys\nPubkeyAuthentication yes\nPasswordAuthentication no\n"
              "KbdInteractiveAuthentication no\nUsePAM no\nPermitRootLogin prohibit-password\nStrictModes no\n"
              "LogLevel VERBOSE\n")
    (d / "sshd_config").write_text(f"{config}Port {free_port()}\n")
    check = await asyncio.create_subprocess_exec(
        str(SSHD), "-t", "-f", str(d / "sshd_config"), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await check.communicate()
    if check.returncode != 0:
        pytest.skip(f"sshd rejects the test config: {out.decode(errors='replace').strip()}")
    proc, port, log, follower = await _sshd_on_a_free_port(d, config)
    try:
        yield Sshd(
            host="127.0.0.1", port=port, user=getpass.getuser(), client_key=d / "client_key",
            host_key=host_key.export_public_key().decode().strip(), log=log,
        )
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, 15)  # stop it by its PID
            await asyncio.wait_for(proc.wait(), SSHD_START_TIMEOUT_S)
        await follower
        shutil.rmtree(d, ignore_errors=True)


SSHD_ATTEMPTS = 5


async def _sshd_on_a_free_port(d: Path, config: str) -> tuple[asyncio.subprocess.Process, int, list[str], asyncio.Future[None]]:
    """sshd started on a free port (it cannot be given 0 and say which it got): one that another
    process took between the choice and sshd's bind ("Address already in use") is chosen again,
    `SSHD_ATTEMPTS` times at most; skips the test when sshd does not start otherwise."""
    for attempt in range(1, SSHD_ATTEMPTS + 1):
        port = free_port()
        (d / "sshd_config").write_text(f"{config}Port {port}\n")
        # -D: stay in the foreground as our child; -e: log to stderr, where we see it start listening.
        proc = await asyncio.create_subprocess_exec(
            str(SSHD), "-D", "-e", "-f", str(d / "sshd_config"), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )
        log: list[str] = []
        listening: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

        async def follow(proc: asyncio.subprocess.Process = proc, log: list[str] = log,
                         listening: asyncio.Future[bool] = listening) -> None:
            assert proc.stderr is not None
            async for raw in proc.stderr:
                line = raw.decode(errors="replace").rstrip()
                log.append(line)
                if "Server listening on" in line and not listening.done():
                    listening.set_result(True)
            if not listening.done():
                listening.set_exception(RuntimeError("sshd exited: " + " | ".join(log[-5:])))

        follower = asyncio.ensure_future(follow())
        try:
            await asyncio.wait_for(asyncio.shield(listening), SSHD_START_TIMEOUT_S)
        except (TimeoutError, RuntimeError) as err:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, 15)  # stop it by its PID
            await proc.wait()
            await follower
            if "Address already in use" in str(err) and attempt < SSHD_ATTEMPTS:
                continue
            pytest.skip(f"sshd did not start: {err}")
        return proc, port, log, follower
    raise AssertionError("unreachable")


# ---------------------------------------------------------------------- namespace nodes

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.append(_HERE)  # `namespaces_support` (test folders are not on sys.path under importlib mode)

from namespaces_support import NsNet  # noqa: E402


@pytest_asyncio.fixture
async def ns_net(tmp_path: Path) -> AsyncIterator[NsNet]:
    """This test's own bridge, /24 and name prefix; everything of the prefix is swept afterwards."""
    refusal = system.root_refusal()
    if refusal:
        pytest.skip(refusal)
    async with NsNet.fresh(tmp_path / "nodes") as net:
        yield net


@pytest_asyncio.fixture
async def ns_registry(tmp_path: Path) -> AsyncIterator[tuple[PluginRegistry, dict[str, Any]]]:
    refusal = system.root_refusal()
    if refusal:
        pytest.skip(refusal)
    prefix = NsNet.fresh(tmp_path).prefix
    fields = {"prefix": prefix, "network": "10.213.0.0/16", "base_dir": str(tmp_path / "nodes")}
    reg = PluginRegistry.discover(work_dir=tmp_path / "work")
    try:
        yield reg, fields
    finally:
        await reg.aclose()
        await system.sweep(prefix, [tmp_path / "nodes"])
