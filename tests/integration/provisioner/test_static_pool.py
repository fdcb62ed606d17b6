"""The static-pool provider (a node's host is its pool grant) against (a) localhost-provider
endpoints and (b) a real OpenSSH sshd."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncssh
import pytest

from contracts.tasks import TaskMessage, TaskOutcome
from services.provisioner.plugins import PluginRegistry
from services.provisioner.plugins.builtin.localhost.provider import LocalhostProvider
from services.provisioner.plugins.ssh import write_private_key
from services.provisioner.plugins.testing import NodeFactory, make_task, next_task, process_exited, service_task
from tests.ports import refused_port

POOL = "lab"


def grant_of_node(node: TaskMessage, **overrides: Any) -> dict[str, Any]:
    """A localhost-provider node as the pool would grant it (what the planner puts in results)."""
    return {"pool": POOL, "host_id": node.node.id, "address": node.node.ipaddresses["access_v4"], "port": node.results["ssh_port"],
            "user": node.results["ssh-auth"]["user"], "host_keys": list(node.results["ssh_host_keys"].values()),
            **overrides}


@contextlib.asynccontextmanager
async def pool_registry(work: Path, identityfile: str, **fields: Any) -> AsyncIterator[PluginRegistry]:
    """A registry whose secrets file holds the provider's login key (closed on exit)."""
    reg = PluginRegistry.discover(secrets={"pool": {"identityfile": identityfile, **fields}}, work_dir=work)
    try:
        yield reg
    finally:
        await reg.aclose()


def pool_task(action: str, grant: dict[str, Any] | None, cluster: str = "c1", node: str = "n1", **kw: Any) -> TaskMessage:
    results = {"pool_host": grant} if grant is not None else {}
    return make_task(action, providertype="static-pool", provider_name="pool", provider_fields={"pool": POOL},
                     cluster_id=cluster, node_id=node, automators=["shell"], results=results, **kw)


async def pool_node(reg: PluginRegistry, grant: dict[str, Any]) -> tuple[TaskMessage, TaskOutcome]:
    """Create and confirm a pool node: (its bootstrap task, carrying its results; confirm's outcome)."""
    create = pool_task("create", grant)
    created = await reg.execute(create)
    assert created.ok, created.error
    confirm = next_task(create, created, "confirm")
    confirmed = await reg.execute(confirm)
    assert confirmed.ok, confirmed.error
    return next_task(confirm, confirmed, "bootstrap"), confirmed


async def test_create_takes_the_granted_host_and_nothing_else(registry: PluginRegistry, localhost_node: NodeFactory) -> None:
    a = await localhost_node("host-a")
    grant = grant_of_node(a)
    async with pool_registry(registry.work_dir, a.results["ssh-auth"]["identityfile"]) as reg:
        created = await reg.execute(pool_task("create", grant))
        assert created.ok and created.result["providerid"] == "host-a"
        assert created.result["ssh-auth"] == {"user": grant["user"], "identityfile": a.results["ssh-auth"]["identityfile"]}
        assert created.ipaddresses == {"access_v4": grant["address"], "bind_v4": grant["address"]}
        assert "granted by pool 'lab'" in created.stdout
        ungranted = await reg.execute(pool_task("create", None))
        assert not ungranted.ok and ungranted.error.startswith("create: node n1 has no host from pool 'lab' yet")
        other = await reg.execute(pool_task("create", grant | {"pool": "elsewhere"}))
        assert not other.ok and "holds a host of pool 'elsewhere', but provider 'pool' lends from pool 'lab'" in other.error
        assert not list((registry.work_dir / "plugins" / "provider").glob("static-pool/*"))  # no file of its own


async def test_confirm_checks_the_registered_key_and_the_shell_automator_runs_there(
    registry: PluginRegistry, localhost_node: NodeFactory
) -> None:
    a = await localhost_node("host-a")
    async with pool_registry(registry.work_dir, a.results["ssh-auth"]["identityfile"]) as reg:
        node, confirmed = await pool_node(reg, grant_of_node(a))
        assert confirmed.result["ssh_host_keys"] == a.results["ssh_host_keys"]
        out = await reg.execute(service_task(node, "install", "echo $MUSTER_CLUSTER_ID > pooled.txt"))
        assert out.ok, out.error
        localhost = registry.provider("localhost")
        assert isinstance(localhost, LocalhostProvider)
        home = localhost.nodes[a.results["providerid"]].endpoint.workdir
        assert (home / "pooled.txt").read_text() == "c1\n"


async def test_a_host_that_answers_with_another_key_fails_confirm(registry: PluginRegistry, localhost_node: NodeFactory) -> None:
    a = await localhost_node("host-a")
    wrong = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
    async with pool_registry(registry.work_dir, a.results["ssh-auth"]["identityfile"]) as reg:
        create = pool_task("create", grant_of_node(a, host_keys=[wrong]))
        out = await reg.execute(next_task(create, await reg.execute(create), "confirm"))
        assert not out.ok and "host key verification failed" in out.error and out.permanent


async def test_release_command_runs_before_the_host_goes_back(registry: PluginRegistry, localhost_node: NodeFactory) -> None:
    a = await localhost_node("host-a")
    key = a.results["ssh-auth"]["identityfile"]
    absolute_key = str(registry.work_dir / "keys" / key)
    async with (
        pool_registry(registry.work_dir, key, release_command="rm -f pooled.txt && echo wiped") as reg,
        pool_registry(registry.work_dir / "other", absolute_key, release_command="exit 4") as failing,
    ):
        node, confirmed = await pool_node(reg, grant_of_node(a))
        out = await reg.execute(next_task(node, confirmed, "delete"))
        assert out.ok and out.stdout.startswith("wiped\n") and "host host-a released to pool 'lab'" in out.stdout
        node, confirmed = await pool_node(failing, grant_of_node(a))
        out = await failing.execute(next_task(node, confirmed, "delete"))
        assert not out.ok and out.error == "delete: release command exited with status 4 on host host-a"
        assert not out.permanent
        create = pool_task("create", grant_of_node(a))  # never confirmed: nothing of ours ran there
        out = await failing.execute(next_task(create, await failing.execute(create), "delete"))
        assert out.ok and "was never confirmed: nothing to release" in out.stdout
        nothing = await reg.execute(pool_task("delete", None))
        assert nothing.ok and "holds no pool host" in nothing.stdout


async def test_a_provider_without_its_pool_or_key_is_a_clear_failure(tmp_path: Path) -> None:
    reg = PluginRegistry.discover(secrets={}, work_dir=tmp_path / "w")
    try:
        out = await reg.execute(make_task("create", providertype="static-pool", provider_name="nothing"))
        assert not out.ok and "missing required field" in out.error and "'pool'" in out.error
        out = await reg.execute(make_task("create", providertype="static-pool", provider_name="nothing",
                                          provider_fields={"pool": POOL}))
        assert not out.ok and "missing required field 'identityfile'" in out.error
    finally:
        await reg.aclose()


# ---------------------------------------------------------------------------- real sshd


async def test_real_sshd_create_confirm_install_delete(sshd: Any, tmp_path: Path) -> None:
    async with pool_registry(tmp_path / "w", str(sshd.client_key)) as reg:
        node, confirmed = await pool_node(reg, sshd.grant(POOL))
        assert confirmed.result["ssh_host_keys"] == {"ssh-ed25519": sshd.host_key}
        assert (await reg.execute(node)).ok
        out = await reg.execute(
            service_task(
                node, "install", 'echo "$MUSTER_SERVICE $(id -un) $SSH_CONNECTION $PWD" | cut -d" " -f1-3,7; echo oops >&2; exit 4',
                workdir=str(tmp_path / "node"),
            )
        )
        assert not out.ok and out.error == "svc install: script exited with status 4: oops"
        assert out.stdout == f"svc {sshd.user} 127.0.0.1 {tmp_path / 'node'}\n" and out.stderr == "oops\n"
        assert list((tmp_path / "node").iterdir()) == [tmp_path / "node" / ".muster"]
        assert not list((tmp_path / "node" / ".muster").iterdir())  # task files removed
        assert any("Accepted publickey" in line for line in sshd.log)
        assert (await reg.execute(next_task(node, confirmed, "delete"))).ok


async def test_real_sshd_with_a_wrong_host_key_is_refused(sshd: Any, tmp_path: Path) -> None:
    wrong = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    async with pool_registry(tmp_path / "w", str(sshd.client_key)) as reg:
        create = pool_task("create", sshd.grant(POOL) | {"host_keys": [wrong]})
        out = await reg.execute(next_task(create, await reg.execute(create), "confirm"))
        assert not out.ok and "host key verification failed" in out.error


async def test_real_sshd_refusing_the_client_key_or_not_answering_is_retried(sshd: Any, tmp_path: Path) -> None:
    """OpenSSH's refusal of the key (a machine still booting refuses it until its key is
    written) and a port where nothing listens (it may listen on a retry): neither permanent."""
    stranger = tmp_path / "stranger"
    write_private_key(stranger, asyncssh.generate_private_key("ssh-ed25519"))
    async with pool_registry(tmp_path / "w", str(stranger)) as reg:
        create = pool_task("create", sshd.grant(POOL))
        refused = await reg.execute(next_task(create, await reg.execute(create), "confirm"))
        assert not refused.ok and not refused.permanent, refused.error
        assert refused.error == f"confirm: ssh login refused for {sshd.user}@127.0.0.1:{sshd.port} (client key not accepted)"
        assert any("Connection closed by authenticating user" in line or "Failed publickey" in line for line in sshd.log), sshd.log[-5:]
    async with pool_registry(tmp_path / "w2", str(sshd.client_key)) as reg:
        with refused_port() as port:
            create = pool_task("create", sshd.grant(POOL) | {"port": port})
            down = await reg.execute(next_task(create, await reg.execute(create), "confirm"))
        assert not down.ok and not down.permanent and "cannot connect to" in down.error, down.error


async def test_real_sshd_timeout(sshd: Any, tmp_path: Path) -> None:
    async with pool_registry(tmp_path / "w", str(sshd.client_key)) as reg:
        node, _ = await pool_node(reg, sshd.grant(POOL))
        workdir = tmp_path / "node"
        script = "echo $$ > pid; echo started; exec sleep 30"
        # The deadline covers the SSH connection too: 2 s leaves a loaded machine time to run the echo.
        out = await reg.execute(service_task(node, "start", script, timeout_s="2", workdir=str(workdir)))
        assert not out.ok and "timed out after 2 s" in out.error and out.stdout == "started\n"
        await process_exited(int((workdir / "pid").read_text()), 5)  # killed, not left behind
        assert not list((workdir / ".muster").iterdir())


async def test_a_pool_host_may_be_a_namespace_node_with_debians_sshd(tmp_path: Path) -> None:
    """`muster demo --pool --real`'s hosts: each a namespace node (own address, hostname, sshd), lent
    by the pool; the automator lands on the host it was granted, checking its registered key."""
    from muster.demo.pool_hosts import NamespacePoolHosts
    from services.provisioner.plugins.builtin.namespaces import system

    refusal = system.root_refusal()
    if refusal or not Path("/usr/sbin/sshd").exists():
        pytest.skip(refusal or "/usr/sbin/sshd not found: install Debian's openssh-server")
    hosts = NamespacePoolHosts(tmp_path / "hosts")
    try:
        spec = await hosts.start("host-a")
        assert spec.address.startswith("10.213.") and spec.user == "root"
        grant = {"pool": POOL, "host_id": spec.id, "address": spec.address, "port": spec.port, "user": spec.user,
                 "host_keys": spec.host_keys}
        async with pool_registry(tmp_path / "w", str(hosts.key_path)) as reg:
            node, confirmed = await pool_node(reg, grant)
            assert list(confirmed.result["ssh_host_keys"].values()) == spec.host_keys
            out = await reg.execute(service_task(node, "install", "hostname; echo $MUSTER_CLUSTER_ID > /etc/pooled"))
            assert out.ok, out.error
            assert out.stdout == "host-a\n"  # the host's own hostname, not this machine's
            assert (hosts.nodes["host-a"][0].directory / "upper" / "etc" / "pooled").read_text() == "c1\n"
            assert (await reg.execute(next_task(node, confirmed, "delete"))).ok
    finally:
        await hosts.stop()
    assert not list(Path("/run/netns").glob(f"{hosts.prefix}-*")) and not list(Path("/sys/class/net").glob(f"{hosts.prefix}-*"))
