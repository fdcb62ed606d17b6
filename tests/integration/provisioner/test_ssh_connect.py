"""What a task says when its node cannot be reached, over real sockets on loopback: the reason by
name (a node whose sshd died and one whose link is down said the same `Connect call failed
('10.239.0.4', 22)`), and a node that answers nothing fails its attempt after the connect timeout,
not the task's whole time (a check of a node with its link down took 71 s for one attempt)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncssh
import pytest

from services.provisioner.plugins import PluginRegistry
from services.provisioner.plugins.ssh import SshError, SshTarget, connect, write_private_key
from services.provisioner.plugins.testing import make_task


async def test_a_refused_connection_is_named(closed_port: int) -> None:
    key = asyncssh.generate_private_key("ssh-ed25519")
    target = SshTarget("127.0.0.1", closed_port, "root", key, (key.export_public_key().decode(),))
    with pytest.raises(SshError) as err:
        await connect(target, 5)
    assert str(err.value) == f"cannot connect to {target.address}: connection refused (ECONNREFUSED)"
    assert "Connect call failed" not in str(err.value)


@pytest.fixture
async def silent_port() -> AsyncIterator[int]:
    """A listener that takes connections and never says a word (no SSH banner)."""
    held: list[asyncio.StreamWriter] = []

    async def hold(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    yield int(server.sockets[0].getsockname()[1])
    for writer in held:
        writer.close()
    server.close()
    await server.wait_closed()


async def test_the_shell_automator_gives_up_connecting_after_its_connect_timeout(registry: PluginRegistry, silent_port: int) -> None:
    key = asyncssh.generate_private_key("ssh-ed25519")
    write_private_key(registry.work_dir / "keys" / "silent", key)
    results = {"ssh-auth": {"user": "root", "identityfile": "silent"}, "ssh_port": silent_port,
               "ssh_host_keys": {"ssh-ed25519": key.export_public_key().decode().strip()}}
    # (the task has 8 s: before, the connect waited for all but the cleanup margin, 7.2 s)
    task = make_task("status", service="svc", automator="shell", action_fields={"script": "true", "connect_timeout_s": "0.3"},
                     results=results, ipaddresses={"access_v4": "127.0.0.1"}, timeout_s=8)
    out = await registry.execute(task)
    assert not out.ok and not out.permanent
    assert out.error == f"svc status: ssh to root@127.0.0.1:{silent_port} timed out after 0.3 s", out.error
