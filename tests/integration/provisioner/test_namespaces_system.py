"""The namespaces provider's system helpers against the real kernel: a bridge in its own /24, network
namespaces on it, a node's own hostname and file system, a real sshd inside, and the sweep.

Each test has its own name prefix and /24 of 10.213.0.0/16 (`ns_net`), swept afterwards."""

from __future__ import annotations

import asyncio
import ipaddress
from pathlib import Path
from typing import Any

import asyncssh
import pytest
from namespaces_support import NsNet

from services.provisioner.plugins.builtin.namespaces import rootfs, system
from services.provisioner.plugins.ssh import SshTarget, connect, run


async def test_a_bridge_takes_a_free_range_and_keeps_it(ns_net: NsNet) -> None:
    bridge = ns_net.bridge
    assert bridge.network.subnet_of(ipaddress.IPv4Network("10.213.0.0/16")) and bridge.network.prefixlen == 24
    assert await system.bridge_network(bridge.name) == bridge.network
    async with system.host_lock():
        again = await system.claim_bridge(bridge.name, "10.213.0.0/16")  # exists: kept as it is
        other = await system.free_network("10.213.0.0/16")
    assert again == bridge
    assert other != bridge.network  # the host now routes this /24: the next caller gets another
    with pytest.raises(system.SystemCommandError, match="overlaps the host's"):
        await system.create_bridge(system.object_name(ns_net.prefix, "b2", interface=True), bridge.network)


async def test_namespaces_on_the_bridge_reach_each_other_and_the_host(ns_net: NsNet) -> None:
    a = await ns_net.netns("a")
    b = await ns_net.netns("b")
    assert a.address != b.address and a.address.network == ns_net.bridge.network
    assert set(await system.bridge_ports(ns_net.bridge.name)) == {a.veth, b.veth}
    server = await asyncio.create_subprocess_exec(
        *a.exec_argv(), "python3", "-c",
        f"import socket; s=socket.socket(); s.bind(('{a.ip}', 7000)); s.listen(); print('up', flush=True); "
        "c,_=s.accept(); c.sendall(b'hello from a'); c.close(); c,_=s.accept(); c.sendall(b'again'); c.close()",
        stdout=asyncio.subprocess.PIPE,
    )
    assert server.stdout is not None
    assert (await asyncio.wait_for(server.stdout.readline(), 10)).strip() == b"up"
    _, out, _ = await system.run([*b.exec_argv(), "python3", "-c",
                                  f"import socket; print(socket.create_connection(('{a.ip}', 7000), 5).recv(100).decode())"])
    assert out.strip() == "hello from a"  # namespace to namespace, over the bridge
    reader, writer = await asyncio.wait_for(asyncio.open_connection(a.ip, 7000), 5)  # host to namespace
    assert await reader.read() == b"again"
    writer.close()
    await asyncio.wait_for(server.wait(), 10)
    assert system.netns_pids(a.name) == []
    await system.set_link(b.veth, False)  # what a partition does to a node
    _, shown, _ = await system.run(["ip", "-o", "link", "show", "dev", b.veth])
    assert "state DOWN" in shown


async def test_the_bridge_keeps_its_mac_as_nodes_come_and_go(ns_net: NsNet) -> None:
    """A bridge's MAC would otherwise follow the lowest of its ports': each change flushes the host's
    neighbour entries on it, and a node's entry for the gateway keeps the MAC of a port since deleted."""
    bridge = ns_net.bridge.name
    mac = Path("/sys/class/net", bridge, "address").read_text()
    made = [await ns_net.netns(name) for name in ("a", "b", "c")]
    assert Path("/sys/class/net", bridge, "address").read_text() == mac
    for ns in made[:2]:
        await system.delete_netns(ns.name, ns.veth)
    assert Path("/sys/class/net", bridge, "address").read_text() == mac


async def test_a_node_made_at_a_just_freed_address_answers_the_host(ns_net: NsNet) -> None:
    """The host's neighbour entry of a deleted node outlives it (reachable for 15-45 s): without a
    flush, what the host sends to the next node at that address goes to the old MAC, and is lost."""
    bridge = ns_net.bridge.name
    await ns_net.netns("k")  # the bridge stays, with its neighbour table, while nodes come and go
    old = await ns_net.netns("a")
    with pytest.raises(ConnectionRefusedError):  # its kernel answers (nothing listens): the host knows its MAC
        await asyncio.wait_for(asyncio.open_connection(old.ip, 9), 10)
    _, known, _ = await system.run(["ip", "neigh", "show", old.ip, "dev", bridge])
    _, eth0, _ = await system.run(["ip", "-n", old.name, "-o", "link", "show", "eth0"])
    old_mac = eth0.split("link/ether ")[1].split()[0]
    assert old_mac in known
    await system.delete_netns(old.name, old.veth)
    system.release_leases(bridge, old.name)
    new = await ns_net.netns("b")
    assert new.ip == old.ip  # the lowest free address: the one just freed
    _, shown, _ = await system.run(["ip", "neigh", "show", new.ip, "dev", bridge])
    assert old_mac not in shown, shown
    with pytest.raises(ConnectionRefusedError):
        await asyncio.wait_for(asyncio.open_connection(new.ip, 9), 10)


async def test_a_node_has_its_own_hostname_and_files(ns_net: NsNet) -> None:
    one = await ns_net.node("one")
    two = await ns_net.node("two")
    _, name, _ = await system.run([*one.exec_argv(), "hostname"])
    assert name.strip() == "one"
    await system.run([*one.exec_argv(), "sh", "-c", "echo mine > /etc/muster-ns-test && mkdir -p /opt/app && touch /opt/app/x /tmp/t"])
    assert not Path("/etc/muster-ns-test").exists() and not Path("/opt/app/x").exists()  # not on the host
    assert (one.directory / "upper" / "etc" / "muster-ns-test").read_text() == "mine\n"
    assert (one.directory / "upper" / "tmp" / "t").exists() and not Path("/tmp/t").exists()
    status, _, _ = await system.run([*two.exec_argv(), "test", "-e", "/etc/muster-ns-test"], check=False)
    assert status == 1  # nor on the other node
    host_file = ns_net.directory.parent / "from-the-host"
    host_file.write_text("seen")  # under /tmp: the host's /tmp is the lower layer of the node's
    _, seen, _ = await system.run([*two.exec_argv(), "cat", str(host_file)])
    assert seen == "seen"
    _, out, _ = await system.run([*two.exec_argv(), "sh", "-c", "python3 --version && cat /etc/hostname >/dev/null && hostname"])
    assert "Python 3" in out and out.split()[-1] == "two"  # the host's software, seen through the overlay
    assert rootfs.find_holder(one.netns.name) == one.holder


async def test_a_node_has_a_home_of_its_own_not_the_hosts(ns_net: NsNet) -> None:
    # The host's shell start files ran in every command a node's sshd ran: this host's `pyenv init`
    # waited for a lock a host shell had taken, and the node's overlay still saw it after the host
    # removed it, so every command on that node hung. Nor are the host's dotfiles a node's to read.
    marker = Path("/root", f".muster-test-{ns_net.prefix}")
    marker.write_text("the host's")
    try:
        node = await ns_net.node("h1")
        status, _, _ = await system.run([*node.exec_argv(), "test", "-e", str(marker)], check=False)
        assert status == 1
    finally:
        marker.unlink()
    _, listed, _ = await system.run([*node.exec_argv(), "ls", "-A", "/root"])
    assert sorted(listed.split()) == sorted(p.name for p in rootfs.SKEL.iterdir())  # a fresh machine's home
    await system.run([*node.exec_argv(), "sh", "-c", "echo mine > /root/notes"])
    assert node.inside("/root/notes").read_text() == "mine\n" and not Path("/root/notes").exists()


async def _hostname(target: SshTarget) -> Any:
    async with await connect(target, 30) as conn:
        return await run(conn, "hostname; cat /proc/self/mountinfo | grep -c ' /etc ' ", timeout=20)


async def test_sshd_answers_on_the_node_address_with_its_own_host_key(ns_net: NsNet) -> None:
    node = await ns_net.node("s1")
    client = asyncssh.generate_private_key("ssh-ed25519")
    sshd = await rootfs.start_sshd(node, client.export_public_key().decode())
    assert sshd.address == node.netns.ip and sshd.fingerprint.startswith("SHA256:")
    assert sshd.fingerprint == asyncssh.import_public_key(sshd.host_key).get_fingerprint("sha256")
    target = SshTarget(host=sshd.address, port=22, user="root", client_key=client, host_keys=(sshd.host_key,))
    result = await _hostname(target)
    assert result.stdout.split()[0] == "s1"
    wrong = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    with pytest.raises(Exception, match="host key verification failed"):
        await connect(SshTarget(host=sshd.address, port=22, user="root", client_key=client, host_keys=(wrong,)), 10)


async def test_an_sshd_that_cannot_start_is_named_with_its_address(ns_net: NsNet) -> None:
    node = await ns_net.node("s2")
    blocker = await system.spawn_until(
        [*node.exec_argv(), "python3", "-c",
         f"import socket,time; s=socket.socket(); s.bind(('{node.netns.ip}', 22)); s.listen(); print('bound', flush=True); time.sleep(60)"],
        "bound", 10)
    assert blocker.seen and not blocker.ended
    with pytest.raises(system.SystemCommandError, match=rf"sshd of node s2 on {node.netns.ip}:22 exited: .*"):
        await rootfs.start_sshd(node, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGV4YW1wbGVleGFtcGxlZXhhbXBsZWV4YW1wbGU=", timeout=10)
    assert blocker.process.poll() is None


async def test_delete_leaves_no_namespace_process_veth_mount_or_directory(ns_net: NsNet) -> None:
    node = await ns_net.node("gone")
    client = asyncssh.generate_private_key("ssh-ed25519")
    await rootfs.start_sshd(node, client.export_public_key().decode())
    pids = system.netns_pids(node.netns.name)
    assert node.holder in pids and len(pids) >= 3  # holder, sshd, its log
    await rootfs.delete_node(node.netns.name, node.netns.veth, node.directory)
    assert not Path("/run/netns", node.netns.name).exists()
    assert not await system.link_exists(node.netns.veth)
    assert not [pid for pid in pids if Path(f"/proc/{pid}/ns/net").exists()]
    assert not node.directory.exists()
    assert not ns_net.mounts_naming(node.directory)  # no mount table anywhere names the overlay
    await rootfs.delete_node(node.netns.name, node.netns.veth, node.directory)  # again: nothing to do


async def test_sweep_removes_its_prefix_and_nothing_else(ns_net: NsNet, tmp_path: Path) -> None:
    other = NsNet.fresh(tmp_path / "other")
    async with other:
        mine = await ns_net.node("left")
        theirs = await other.node("kept")
        removed = await system.sweep(ns_net.prefix, [ns_net.directory])
        assert f"netns {mine.netns.name}" in removed and f"link {ns_net.bridge.name}" in removed
        assert not Path("/run/netns", mine.netns.name).exists() and not mine.directory.exists()
        assert not await system.link_exists(ns_net.bridge.name)
        assert theirs.holder in system.netns_pids(theirs.netns.name) and theirs.directory.exists()
        assert await system.link_exists(other.bridge.name)


def test_names_fit_the_kernel_and_keep_prefixes_apart() -> None:
    assert system.object_name("t1a2b3", "12345678", interface=True) == "t1a2b3-12345678"
    with pytest.raises(system.SystemCommandError, match="at most 15 characters"):
        system.object_name("t1a2b3", "123456789", interface=True)
    for bad in ("", "abcdefg", "A1", "a-b"):
        with pytest.raises(system.SystemCommandError, match="invalid name prefix"):
            system.check_prefix(bad)
