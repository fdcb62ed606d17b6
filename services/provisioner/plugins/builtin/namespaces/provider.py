"""The namespaces provider: every node is a Linux network namespace on a bridge muster makes, with
its own hostname, its own view of the file system (overlays) and its own sshd (Debian's), whose
host key is made per node and recorded as the node's result. Needs root.

Nodes outlive the provisioner process (the kernel holds them); any provisioner on this machine with
the same key directory can confirm or delete them. The providerid is the node's namespace name
(`<prefix>-<8 hex>`), from which delete finds everything else. The name is the same for every
attempt of a node's create (a digest of tenant, cluster and node), and the node's directory says
which attempt made it (`owner`): a create cut short (its provisioner killed, its task cancelled at
its deadline) leaves a half-made node no outcome names, which the next attempt removes before it
makes its own, where a random name each attempt left it for good.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
import secrets
from pathlib import Path

import asyncssh

from contracts.tasks import TaskOutcome
from services.provisioner.plugins.base import PluginContext, ProviderPlugin, failed, succeeded
from services.provisioner.plugins.ssh import SshError, login_probe, target_from_results, write_private_key

from . import rootfs, system

_ID = re.compile(r"^([a-z0-9]{1,6})-[0-9a-f]{8}$")
KEYS = "namespaces"
"""Client keys live in `<key_dir>/namespaces/<providerid>`."""
OWNER = "owner"
"""In the node's directory: `<tenant>/<cluster>/<node> <attempt>`, written before anything is made."""


class NamespacesProvider(ProviderPlugin):
    def _base_dir(self, ctx: PluginContext) -> Path:
        configured = ctx.fields.get("base_dir")
        return Path(configured).expanduser() if configured else self.env.state_dir / "nodes"

    async def create(self, ctx: PluginContext) -> TaskOutcome:
        refusal = system.root_refusal()
        if refusal:
            return failed(refusal)
        # The catalog's fields are refused before anything is made: the same fields fail the same
        # way (permanent). What fails later may pass: a range the host routes, a bridge with no
        # address left, an sshd slow to start.
        try:
            prefix = system.check_prefix(str(ctx.fields.get("prefix") or "mu"))
            bridge_name = system.object_name(prefix, "br", interface=True)
            network = _network(str(ctx.fields.get("network") or "10.213.0.0/16"))
        except system.SystemCommandError as err:
            return failed(f"create: {err}", permanent=True)
        owner, attempt = _owner(ctx), str(ctx.task.attempt)
        name = system.object_name(prefix, hashlib.sha256(owner.encode()).hexdigest()[:8], interface=True)
        directory, before = self._base_dir(ctx) / name, ""
        if _exists(name, directory):
            if _made_by(directory)[0] != owner:  # another node's name (32 bits of a digest), or not this base_dir's
                name = system.object_name(prefix, secrets.token_hex(4), interface=True)
                directory = self._base_dir(ctx) / name
            else:  # an earlier attempt of this create, cut short
                await self._remove(name, directory)
                before = f"removed what an earlier attempt of this create had left ({name}); "
        directory.mkdir(parents=True, exist_ok=True)
        (directory / OWNER).write_text(f"{owner} {attempt}\n")
        key_id = f"{KEYS}/{name}"
        try:
            async with system.host_lock():  # the bridge stays while the veth is put on it
                bridge = await system.claim_bridge(bridge_name, network)
                address = system.lease_address(bridge, name)
                netns = await system.create_netns(name, name, bridge, address)
            node = await rootfs.start_node(netns, _hostname(ctx), directory)
            client_key = asyncssh.generate_private_key("ssh-ed25519")
            write_private_key(self.env.key_dir / key_id, client_key)
            sshd = await rootfs.start_sshd(
                node, client_key.export_public_key().decode(), timeout=min(float(ctx.fields.get("sshd_timeout_s") or 15), ctx.remaining())
            )
        except (system.SystemCommandError, OSError) as err:
            if _made_by(directory) == (owner, attempt):  # (not a later attempt's, made while this one was taken for lost)
                await self._remove(name, directory)  # nothing half-made stays for the retry to trip on
            return failed(f"create: node {ctx.node.id}: {err}")
        algorithm = sshd.host_key.split()[0]
        return succeeded(
            {
                "providerid": name,
                "ssh_port": sshd.port,
                "ssh-auth": {"user": "root", "identityfile": key_id},
                "ssh_host_keys": {algorithm: sshd.host_key},
                "ssh_host_key_fingerprint": sshd.fingerprint,
                "bridge": f"{bridge.name} {bridge.network}",
            },
            ipaddresses={"access_v4": sshd.address, "bind_v4": sshd.address},
            hostname=node.hostname,
            stdout=(
                f"{before}node {ctx.node.id}: namespace {name}, {sshd.address} on bridge {bridge.name} ({bridge.network}), "
                f"hostname {node.hostname}, sshd host key {sshd.fingerprint}"
            ),
        )

    async def confirm(self, ctx: PluginContext) -> TaskOutcome:
        refusal = system.root_refusal()
        if refusal:
            return failed(refusal)
        name = ctx.providerid
        if not name or not _ID.match(name):
            return failed(f"confirm: node {ctx.node.id} has no namespace id (its create did not succeed)")
        holder, restarted = rootfs.find_holder(name), ""
        directory = self._base_dir(ctx) / name
        if holder is None and not (Path("/run/netns", name).exists() and _made_by(directory)[0] == _owner(ctx)):
            return failed(f"confirm: namespace node {name} does not exist on this machine (deleted, the machine restarted, "
                          "or made on another machine)")
        # The provider owns the node: a link taken down and an sshd that died (a repair's confirm,
        # docs/plugins.md) are brought back, the sshd with the node's own files, so its host key
        # stays the recorded one. (A link left down failed every repair: sshd ran, unreachable.)
        try:
            if holder is None:
                # Every process of the node ended, its holder's among them (killed by hand, the OOM
                # killer), its namespace, veth and directory still here: it comes back as a machine
                # from a restart, with its disk (the overlays' upper layers, /root, /run) as it was.
                # (It failed "does not exist on this machine", and each repair rolled back.)
                netns = system.NetNs(name, name, ipaddress.IPv4Interface(str(ctx.node.ipaddresses.get("access_v4") or "0.0.0.0")))
                holder = (await rootfs.start_node(netns, _hostname(ctx), directory)).holder
                restarted = f"its processes had all ended: set up its file system and hostname again (pid {holder}); "
            raised = await system.raise_links(name, name, system.object_name(name.split("-", 1)[0], "br", interface=True))
            revived = await rootfs.revive_sshd(name, holder, directory,
                                               timeout=min(float(ctx.fields.get("sshd_timeout_s") or 15), ctx.remaining()))
        except (system.SystemCommandError, OSError) as err:
            return failed(f"confirm: node {ctx.node.id}: its file system, its link or its sshd was down and did not come back: {err}")
        timeout = max(0.001, min(float(ctx.fields.get("connect_timeout_s") or 10), ctx.remaining()))
        try:
            target = target_from_results(ctx.results, ctx.node.ipaddresses, self.env.key_dir)
            probe = await login_probe(target, "hostname", timeout)
        except SshError as err:
            return failed(f"confirm: {err}", permanent=err.permanent)
        again = restarted + (f"its link was down: set up {', '.join(raised)}; " if raised else "")
        again += f"its sshd was not running: started it again (pid {revived}); " if revived is not None else ""
        return succeeded(
            {"ssh_host_keys": dict(ctx.results.get("ssh_host_keys") or {})},
            stdout=f"node {ctx.node.id} is up: {again}root@{target.host}:{target.port} answers as {probe.stdout.strip()}, "
                   "host key checked",
        )

    async def delete(self, ctx: PluginContext) -> TaskOutcome:
        name = ctx.providerid
        if not name:  # a create that never answered (a job's rollback): what it made is found by its name
            refusal = system.root_refusal()
            prefix = str(ctx.fields.get("prefix") or "mu")
            if refusal or not _ID.match(f"{prefix}-00000000"):
                return succeeded(stdout="nothing to delete (no providerid)")
            name = system.object_name(prefix, hashlib.sha256(_owner(ctx).encode()).hexdigest()[:8], interface=True)
            if _made_by(self._base_dir(ctx) / name)[0] != _owner(ctx):
                return succeeded(stdout="nothing to delete (no providerid, and no node its create left)")
        if not _ID.match(name):
            return succeeded(stdout=f"nothing to delete ({name} is not a namespace node)")
        refusal = system.root_refusal()
        if refusal:
            return failed(refusal)
        existed = Path("/run/netns", name).exists()
        await self._remove(name, self._base_dir(ctx) / name)
        return succeeded(stdout=f"deleted {name}: its processes, namespace, veth and overlays" if existed
                         else f"{name} did not exist any more (leftovers removed)")

    async def _remove(self, name: str, directory: Path) -> None:
        prefix = name.split("-", 1)[0]
        bridge = system.object_name(prefix, "br", interface=True)
        await rootfs.delete_node(name, name, directory)
        system.release_leases(bridge, name)
        (self.env.key_dir / KEYS / name).unlink(missing_ok=True)
        await system.delete_bridge_if_unused(bridge)


def _owner(ctx: PluginContext) -> str:
    return f"{ctx.task.tenant}/{ctx.task.cluster_id}/{ctx.node.id}"


def _exists(name: str, directory: Path) -> bool:
    return Path("/run/netns", name).exists() or Path("/sys/class/net", name).exists() or directory.exists()


def _made_by(directory: Path) -> tuple[str, str]:
    """(owner, attempt) of the node in `directory`, from its `owner` file; ("", "") if none."""
    try:
        owner, _, attempt = (directory / OWNER).read_text().strip().rpartition(" ")
    except OSError:
        return "", ""
    return owner, attempt


def _network(raw: str) -> ipaddress.IPv4Network:
    """The `network` field: a range holding at least one /24 (the bridge takes one)."""
    try:
        network = ipaddress.IPv4Network(raw)
    except ValueError as err:
        raise system.SystemCommandError(f"invalid address range {raw!r} (field 'network'): {err}") from None
    if network.prefixlen > 24:
        raise system.SystemCommandError(f"address range {raw!r} (field 'network') is smaller than the /24 a bridge takes")
    return network


def _hostname(ctx: PluginContext) -> str:
    """The node's hostname as the cluster knows it, made safe for `hostname` (at most 64 characters)."""
    raw = ctx.node.hostname or ctx.node.id
    clean = re.sub(r"[^A-Za-z0-9.-]", "-", raw).strip(".-")[:64]
    return clean or "node"
