"""The static-pool provider against (a) localhost-provider endpoints and (b) a real OpenSSH sshd."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncssh

from contracts.tasks import TaskMessage, TaskOutcome
from services.provisioner.plugins import PluginRegistry
from services.provisioner.plugins.builtin.localhost.provider import LocalhostProvider
from services.provisioner.plugins.builtin.static_pool.provider import StaticPoolProvider
from services.provisioner.plugins.testing import NodeFactory, make_task, next_task, process_exited, service_task


def pool_host(node: TaskMessage) -> dict[str, Any]:
    """A localhost-provider node described as an existing SSH host."""
    return {
        "host": "127.0.0.1",
        "port": node.results["ssh_port"],
        "user": node.results["ssh-auth"]["user"],
        "identityfile": node.results["ssh-auth"]["identityfile"],  # relative to the key dir
        "host_key": next(iter(node.results["ssh_host_keys"].values())),
    }


@contextlib.asynccontextmanager
async def pool_registry(hosts: list[dict[str, Any]], work: Path, **fields: Any) -> AsyncIterator[PluginRegistry]:
    """A registry whose secrets file describes the pool `pool` (closed on exit)."""
    reg = PluginRegistry.discover(secrets={"pool": {"hosts": hosts, **fields}}, work_dir=work)
    try:
        yield reg
    finally:
        await reg.aclose()


def pool_task(action: str, cluster: str, node: str = "n1", **kw: Any) -> TaskMessage:
    return make_task(action, providertype="static-pool", provider_name="pool", cluster_id=cluster, node_id=node,
                     automators=["shell"], **kw)


async def lifecycle(reg: PluginRegistry, cluster: str, node: str = "n1") -> tuple[TaskMessage, TaskOutcome]:
    create = pool_task("create", cluster, node)
    return create, await reg.execute(create)


async def pool_node(reg: PluginRegistry, cluster: str) -> tuple[TaskMessage, TaskOutcome]:
    """Create and confirm a pool node: (its bootstrap task, carrying its results; confirm's outcome)."""
    create, created = await lifecycle(reg, cluster)
    assert created.ok, created.error
    confirm = next_task(create, created, "confirm")
    confirmed = await reg.execute(confirm)
    assert confirmed.ok, confirmed.error
    return next_task(confirm, confirmed, "bootstrap"), confirmed


async def test_hosts_are_lent_to_one_cluster_at_a_time_and_returned(
    registry: PluginRegistry, localhost_node: NodeFactory
) -> None:
    a, b = await asyncio.gather(localhost_node("host-a"), localhost_node("host-b"))
    hosts = [pool_host(a), pool_host(b)]
    async with pool_registry(hosts, registry.work_dir) as reg:  # shares the key dir
        c1, out1 = await lifecycle(reg, "cluster-1")
        c2, out2 = await lifecycle(reg, "cluster-2")
        assert out1.ok and out2.ok
        assert {out1.result["providerid"], out2.result["providerid"]} == {f"127.0.0.1:{h['port']}" for h in hosts}
        assert out1.result["ssh-auth"] == {"user": hosts[0]["user"], "identityfile": hosts[0]["identityfile"]}

        _, exhausted = await lifecycle(reg, "cluster-3")
        assert not exhausted.ok
        assert exhausted.error == (
            "static pool 'pool' is exhausted: all 2 hosts are assigned (to clusters cluster-1, cluster-2); "
            "delete a cluster or add hosts"
        )
        retry = await reg.execute(c1.model_copy(update={"attempt": 2}))
        assert retry.ok and retry.result["providerid"] == out1.result["providerid"]  # same host again

        # A stale delete from another cluster does not release cluster-1's host.
        stale = pool_task("delete", "cluster-3", results={"providerid": out1.result["providerid"]})
        assert (await reg.execute(stale)).ok
        assert not (await lifecycle(reg, "cluster-3"))[1].ok

        deleted = await reg.execute(next_task(c1, out1, "delete"))
        assert deleted.ok and "returned" in deleted.stdout
        _, out3 = await lifecycle(reg, "cluster-3")
        assert out3.ok and out3.result["providerid"] == out1.result["providerid"]
        provider = reg.provider("static-pool")
        assert isinstance(provider, StaticPoolProvider)
        assert {v["cluster_id"] for v in provider.assignments("pool").values()} == {"cluster-2", "cluster-3"}


async def test_confirm_learns_host_keys_and_the_shell_automator_runs_there(
    registry: PluginRegistry, localhost_node: NodeFactory
) -> None:
    a = await localhost_node("host-a")
    async with pool_registry([pool_host(a)], registry.work_dir) as reg:
        node, confirmed = await pool_node(reg, "c1")
        assert confirmed.result["ssh_host_keys"] == a.results["ssh_host_keys"]
        out = await reg.execute(service_task(node, "install", "echo $MUSTER_CLUSTER_ID > pooled.txt"))
        assert out.ok, out.error
        localhost = registry.provider("localhost")
        assert isinstance(localhost, LocalhostProvider)
        home = localhost.nodes[a.results["providerid"]].endpoint.workdir
        assert (home / "pooled.txt").read_text() == "c1\n"


async def test_a_pool_host_with_a_wrong_known_key_fails_confirm(
    registry: PluginRegistry, localhost_node: NodeFactory
) -> None:
    a = await localhost_node("host-a")
    wrong = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
    async with pool_registry([pool_host(a) | {"host_key": wrong}], registry.work_dir) as reg:
        create, created = await lifecycle(reg, "c1")
        out = await reg.execute(next_task(create, created, "confirm"))
        assert not out.ok and "host key verification failed" in out.error


async def test_release_command_runs_before_the_host_goes_back(
    registry: PluginRegistry, localhost_node: NodeFactory
) -> None:
    a = await localhost_node("host-a")
    absolute_key = str(registry.work_dir / "keys" / pool_host(a)["identityfile"])
    async with (
        pool_registry([pool_host(a)], registry.work_dir, release_command="rm -f pooled.txt && echo wiped") as reg,
        pool_registry([pool_host(a) | {"identityfile": absolute_key}], registry.work_dir / "other", release_command="exit 4") as failing,
    ):
        create, created = await lifecycle(reg, "c1")
        out = await reg.execute(next_task(create, created, "delete"))
        assert out.ok and out.stdout.startswith("wiped\n")
        create, created = await lifecycle(failing, "c2")
        out = await failing.execute(next_task(create, created, "delete"))
        assert not out.ok and "release command exited with status 4" in out.error and "stays assigned" in out.error


async def test_a_bad_pool_description_is_a_clear_failure(tmp_path: Path) -> None:
    async with pool_registry([{"host": "h", "identityfile": "/k"}], tmp_path / "w") as reg:
        out = await reg.execute(pool_task("create", "c1"))
        assert not out.ok and out.error == "static pool 'pool': field 'hosts[0].host_key': Field required"
        out = await reg.execute(make_task("create", providertype="static-pool", provider_name="nothing"))
        assert not out.ok and "missing required field 'hosts'" in out.error


async def test_assignments_survive_a_restart_with_the_same_work_dir(tmp_path: Path) -> None:
    host = {"host": "10.9.9.9", "identityfile": "/k", "host_key": asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()}
    async with pool_registry([host], tmp_path / "w") as first:
        assert (await first.execute(pool_task("create", "c1"))).ok
    async with pool_registry([host], tmp_path / "w") as second:
        out = await second.execute(pool_task("create", "c2"))
        assert not out.ok and "exhausted" in out.error
        state = json.loads((tmp_path / "w" / "plugins" / "provider" / "static-pool" / "pool.json").read_text())
        assert state == {"assignments": {"10.9.9.9:22": {"cluster_id": "c1", "node_id": "n1"}}}


# ---------------------------------------------------------------------------- real sshd


async def test_real_sshd_create_confirm_install_delete(sshd: Any, tmp_path: Path) -> None:
    async with pool_registry([sshd.pool_host()], tmp_path / "w") as reg:
        node, confirmed = await pool_node(reg, "c1")
        assert confirmed.result["ssh_host_keys"] == {"ssh-ed25519": sshd.host_key}
        assert (await reg.execute(node)).ok
        out = await reg.execute(
            service_task(
                node, "install", 'echo "$MUSTER_SERVICE $(id -un) $SSH_CONNECTION $PWD" | cut -d" " -f1-3,7; echo oops >&2; exit 4',
                workdir=str(tmp_path / "node"),
            )
        )
        assert not out.ok and out.error == "svc install: script exited with status 4"
        assert out.stdout == f"svc {sshd.user} 127.0.0.1 {tmp_path / 'node'}\n" and out.stderr == "oops\n"
        assert list((tmp_path / "node").iterdir()) == [tmp_path / "node" / ".muster"]
        assert not list((tmp_path / "node" / ".muster").iterdir())  # task files removed
        assert any("Accepted publickey" in line for line in sshd.log)
        deleted = await reg.execute(next_task(node, confirmed, "delete"))
        assert deleted.ok
        assert (await lifecycle(reg, "c2"))[1].ok  # the host is back in the pool


async def test_real_sshd_with_a_wrong_host_key_is_refused(sshd: Any, tmp_path: Path) -> None:
    wrong = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    async with pool_registry([sshd.pool_host(host_key=wrong)], tmp_path / "w") as reg:
        create, created = await lifecycle(reg, "c1")
        out = await reg.execute(next_task(create, created, "confirm"))
        assert not out.ok and "host key verification failed" in out.error


async def test_real_sshd_timeout(sshd: Any, tmp_path: Path) -> None:
    async with pool_registry([sshd.pool_host()], tmp_path / "w") as reg:
        node, _ = await pool_node(reg, "c1")
        workdir = tmp_path / "node"
        script = "echo $$ > pid; echo started; exec sleep 30"
        # The deadline covers the SSH connection too: 2 s leaves a loaded machine time to run the echo.
        out = await reg.execute(service_task(node, "start", script, timeout_s="2", workdir=str(workdir)))
        assert not out.ok and "timed out after 2 s" in out.error and out.stdout == "started\n"
        await process_exited(int((workdir / "pid").read_text()), 5)  # killed, not left behind
        assert not list((workdir / ".muster").iterdir())
