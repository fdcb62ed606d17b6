"""The namespaces provider through the plugin registry, as a provisioner runs it: real namespaces,
a real sshd per node, the shell automator logging in with the recorded host key."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from namespaces_support import NsNet, made, ns_task

from contracts.catalog import Action
from services.provisioner.plugins import PluginRegistry
from services.provisioner.plugins.builtin.namespaces import rootfs, system
from services.provisioner.plugins.testing import made_node, next_task, service_task


async def test_create_confirm_run_delete_leaves_nothing(ns_registry: tuple[PluginRegistry, dict[str, Any]], tmp_path: Path) -> None:
    reg, fields = ns_registry
    a = await made(reg, fields, "n1")
    b = await made(reg, fields, "n2")
    name = a.results["providerid"]
    assert name.startswith(fields["prefix"] + "-") and a.results["ssh-auth"] == {"user": "root", "identityfile": f"namespaces/{name}"}
    assert a.results["ssh_host_key_fingerprint"].startswith("SHA256:") and a.results["ssh_host_keys"]
    assert a.node.ipaddresses["access_v4"] != b.node.ipaddresses["access_v4"]
    out = await reg.execute(service_task(a, "install", "hostname; echo installed > /etc/muster-test; ls /etc/muster-test"))
    assert out.ok, out.error
    assert out.stdout.split() == ["n1.c1.muster", "/etc/muster-test"]
    other = await reg.execute(service_task(b, "install", "test -e /etc/muster-test"))
    assert not other.ok  # a node's /etc is its own
    bridge = fields["prefix"] + "-br"
    for node in (a, b):
        gone = await reg.execute(next_task(node, out, "delete"))
        assert gone.ok, gone.error
    assert not any(Path("/run/netns").glob(fields["prefix"] + "-*"))
    assert not await system.link_exists(name) and not await system.link_exists(bridge)
    assert not list((tmp_path / "nodes").iterdir())
    assert not list((system.STATE_ROOT).glob(fields["prefix"] + "-*"))
    assert not list((reg.work_dir / "keys" / "namespaces").iterdir())
    assert not NsNet.mounts_naming(tmp_path / "nodes")
    again = await reg.execute(next_task(a, out, "delete"))
    assert again.ok and "did not exist any more" in again.stdout


async def test_a_confirm_starts_again_the_sshd_of_a_node_whose_sshd_died(
    ns_registry: tuple[PluginRegistry, dict[str, Any]], tmp_path: Path
) -> None:
    """The provider owns the node: a repair's confirm (docs/planner.md, "reconnect") brings its
    sshd back, with the host key recorded at create (the automators check it)."""
    reg, fields = ns_registry
    a = await made(reg, fields, "n1")
    name = a.results["providerid"]
    first = rootfs.find_sshd(name)
    assert first is not None
    os.kill(first, signal.SIGKILL)  # as a crash would
    down = await reg.execute(service_task(a, "status", "echo up"))
    assert not down.ok and "cannot connect" in down.error
    confirmed = await reg.execute(a.model_copy(update={"action": Action.CONFIRM, "service": None}))
    assert confirmed.ok, confirmed.error
    assert "its sshd was not running: started it again" in confirmed.stdout
    assert confirmed.result["ssh_host_keys"] == a.results["ssh_host_keys"]
    up = await reg.execute(service_task(a, "status", "echo up"))
    assert up.ok and up.stdout.strip() == "up", up.error
    again = await reg.execute(a.model_copy(update={"action": Action.CONFIRM, "service": None}))
    assert again.ok and "started it again" not in again.stdout and rootfs.find_sshd(name) not in (None, first)
    assert (await reg.execute(next_task(a, again, "delete"))).ok


async def test_a_confirm_brings_back_a_node_whose_every_process_ended_with_its_disk_as_it_was(
    ns_registry: tuple[PluginRegistry, dict[str, Any]], tmp_path: Path
) -> None:
    """Every process of the node killed (its holder's too: the mount namespace, its overlays and
    hostname went with it), its namespace, veth and directory still there: a repair's confirm
    brings it back as a machine comes back from a restart, with what it wrote. It failed `does not
    exist on this machine`, and each repair rolled back."""
    reg, fields = ns_registry
    a = await made(reg, fields, "n1")
    name = a.results["providerid"]
    wrote = await reg.execute(service_task(a, "install", "echo kept > /etc/muster-kept; echo mine > /root/mine"))
    assert wrote.ok, wrote.error
    await system.kill_pids(system.netns_pids(name))  # as `ip netns pids NAME | xargs kill -9` would
    system.reap()
    assert rootfs.find_holder(name) is None and not system.netns_pids(name)
    confirmed = await reg.execute(a.model_copy(update={"action": Action.CONFIRM, "service": None}))
    assert confirmed.ok, confirmed.error
    assert "its processes had all ended: set up its file system and hostname again" in confirmed.stdout
    assert "its sshd was not running: started it again" in confirmed.stdout
    assert confirmed.result["ssh_host_keys"] == a.results["ssh_host_keys"]
    back = await reg.execute(service_task(a, "status", "hostname; cat /etc/muster-kept /root/mine"))
    assert back.ok and back.stdout.split() == ["n1.c1.muster", "kept", "mine"], (back.error, back.stdout)
    gone = await reg.execute(next_task(a, back, "delete"))
    assert gone.ok and not Path("/run/netns", name).exists() and not NsNet.mounts_naming(tmp_path / "nodes")


async def test_a_confirm_sets_up_again_the_links_of_a_node_taken_down_by_hand(
    ns_registry: tuple[PluginRegistry, dict[str, Any]], tmp_path: Path
) -> None:
    """A node's link taken down (`ip link set <veth> down`, as a walk did by hand) left it
    unreachable with its sshd running: every repair's confirm failed `cannot connect`, three
    times, and the job rolled back. The confirm now sets up again what is down."""
    reg, fields = ns_registry
    a = await made(reg, fields, "n1")
    name = a.results["providerid"]
    await system.set_link(name, False)  # the host end of its veth
    await system.set_link("eth0", False, name)
    down = await reg.execute(service_task(a, "status", "echo up"))
    assert not down.ok and "cannot connect" in down.error
    confirmed = await reg.execute(a.model_copy(update={"action": Action.CONFIRM, "service": None}))
    assert confirmed.ok, confirmed.error
    assert f"its link was down: set up {name}, eth0 (in {name})" in confirmed.stdout
    assert "sshd was not running" not in confirmed.stdout
    up = await reg.execute(service_task(a, "status", "echo up"))
    assert up.ok and up.stdout.strip() == "up", up.error
    again = await reg.execute(a.model_copy(update={"action": Action.CONFIRM, "service": None}))
    assert again.ok and "link was down" not in again.stdout
    assert (await reg.execute(next_task(a, again, "delete"))).ok


async def test_an_sshd_that_never_comes_up_fails_the_create_and_leaves_nothing(
    ns_registry: tuple[PluginRegistry, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node's real sshd starts, and is waited for a line it never prints. (A timeout of
    0.001 s was not "never": the timer is checked only once the loop comes back to it, and on a
    loaded machine sshd's "Server listening" was read by then, so the create succeeded.)"""
    reg, fields = ns_registry
    real = rootfs.spawn_until

    async def never_listening(argv: Sequence[str], until: str, timeout: float, env: dict[str, str] | None = None) -> system.Spawned:
        if until == "Server listening on":  # start_sshd's wait (the node's holder is started this way too)
            until = "a line sshd never prints"
        return await real(argv, until, timeout, env)

    monkeypatch.setattr(rootfs, "spawn_until", never_listening)
    out = await reg.execute(ns_task("create", {**fields, "sshd_timeout_s": "1"}))
    assert not out.ok
    assert "create: node n1: sshd of node n1.c1.muster on 10.213." in out.error and ":22 did not come up within" in out.error
    assert not out.permanent  # a slow sshd may come up in time on a retry
    assert not any(Path("/run/netns").glob(fields["prefix"] + "-*"))
    assert not await system.link_exists(fields["prefix"] + "-br")
    assert not list((tmp_path / "nodes").iterdir())


async def test_a_bad_prefix_or_range_is_named(ns_registry: tuple[PluginRegistry, dict[str, Any]]) -> None:
    reg, fields = ns_registry
    bad = await reg.execute(ns_task("create", {**fields, "prefix": "Too-Long"}))
    assert not bad.ok and bad.permanent  # the catalog's fields (refused by the apply too: docs/plugins.md, `pattern`)
    assert "field 'prefix' (Name prefix): 'Too-Long' is not of the form [a-z0-9]{1,6}" in bad.error, bad.error
    for network in ("10.213.0.0/33", "10.213.7.0/28"):  # no range, or smaller than the /24 a bridge takes: its form
        refused = await reg.execute(ns_task("create", {**fields, "network": network}))
        assert not refused.ok and refused.permanent
        assert f"field 'network' (Address range): '{network}' is not of the form " in refused.error, refused.error
    garbled = await reg.execute(ns_task("create", {**fields, "network": "10.213.0.5/16"}))  # what the form lets through
    assert not garbled.ok and garbled.permanent
    assert garbled.error.startswith("create: invalid address range '10.213.0.5/16' (field 'network'):"), garbled.error
    # Every /24 of the range is routed by the host: one may be free once its user is gone.
    host = await reg.execute(ns_task("create", {**fields, "network": "127.0.0.0/16"}))
    assert not host.ok and "no free /24 left in 127.0.0.0/16" in host.error and not host.permanent


async def test_without_root_it_refuses_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    reg = PluginRegistry.discover(work_dir=tmp_path / "work")
    try:
        out = await reg.execute(ns_task("create", {"prefix": "tnoroot"[:6]}))
    finally:
        await reg.aclose()
    assert not out.ok and "\n" not in out.error
    assert out.error.startswith("namespace nodes need root") and "use the localhost provider" in out.error


async def test_a_create_cut_short_is_cleared_by_the_next_attempt(
    ns_registry: tuple[PluginRegistry, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A create cut short (its provisioner killed by hand, or its task cancelled at its deadline)
    left a half-made node that no outcome names: each attempt took a random name, and the first
    one's namespace and veth stayed after the cluster's delete (walk of session 32: kill -9 of the
    provisioner during a create). The name is now the same for every attempt of a node's create,
    and the next attempt removes what the earlier one left; a rollback's delete without a
    providerid finds it by that name too."""
    reg, fields = ns_registry

    async def cut_short(*args: Any, **kwargs: Any) -> None:
        raise asyncio.CancelledError  # where a killed provisioner stops: namespace, veth and holder made

    def half_made() -> list[str]:
        return sorted(p.name for p in Path("/run/netns").glob(fields["prefix"] + "-*"))

    for first, then in (("create", "create"), ("create", "delete")):
        with monkeypatch.context() as patched:
            patched.setattr(rootfs, "start_sshd", cut_short)
            with pytest.raises(asyncio.CancelledError):
                await reg.execute(ns_task(first, fields, attempt=1))
        left = half_made()
        assert len(left) == 1 and rootfs.find_holder(left[0]) is not None, left
        if then == "create":
            node = await made_node(reg, ns_task("create", fields, attempt=2), "install")
            assert half_made() == left == [node.results["providerid"]]  # the same name, made again
            out = await reg.execute(service_task(node, "install", "hostname"))
            assert out.stdout.strip() == "n1.c1.muster", out.error
            gone = await reg.execute(next_task(node, out, "delete"))
        else:  # the job's rollback: a delete of a node whose create never answered (no providerid)
            gone = await reg.execute(ns_task("delete", fields, attempt=1))
        assert gone.ok, gone.error
        assert half_made() == [] and not await system.link_exists(left[0]), (then, gone.stdout)
    # A node of another cluster is never taken for one's own leftovers.
    other = await made(reg, fields, "n1")
    assert (await reg.execute(ns_task("delete", {**fields}, attempt=1).model_copy(update={"cluster_id": "c2"}))).ok
    assert half_made() == [other.results["providerid"]]
