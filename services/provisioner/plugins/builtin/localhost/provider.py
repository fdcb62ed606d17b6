"""The localhost provider: every node is an in-process SSH server on a loopback address of its own
(127.x.y.z from the `addresses` range: Linux routes all of 127/8 to `lo`), so services on two nodes
may use the same port; no root needed (the namespaces provider's fallback).

Results: `providerid`, `ssh_port`, `ssh-auth` `{user, identityfile}` (the client key's path
relative to the provisioner's key directory: the key itself never leaves this machine) and, at
confirm, `ssh_host_keys`. Nodes live as long as the provisioner process that created them.
"""

from __future__ import annotations

import asyncio
import getpass
import ipaddress
import random
import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

import asyncssh

from contracts.tasks import TaskOutcome
from services.provisioner.plugins.base import PluginContext, PluginEnv, ProviderPlugin, failed, succeeded
from services.provisioner.plugins.descriptor import PluginDescriptor
from services.provisioner.plugins.ssh import SshError, SshTarget, host_keys_result, login_probe, write_private_key
from services.provisioner.plugins.sshserver import LocalSshEndpoint, kill_all, left_behind

LOOPBACK = "127.0.0.1"
DEFAULT_ADDRESSES = "127.77.0.0/16"
_ID = re.compile(r"^local-[0-9a-f]{12}$")


class AddressesTaken(ValueError):
    """Every address tried is some node's: one may be free once nodes are deleted (not permanent,
    unlike a range that is not a loopback range)."""


@dataclass
class LocalNode:
    providerid: str
    endpoint: LocalSshEndpoint
    key_id: str
    key_path: Path
    client_key: asyncssh.SSHKey
    address: str


class LocalhostProvider(ProviderPlugin):
    def __init__(self, descriptor: PluginDescriptor, env: PluginEnv) -> None:
        super().__init__(descriptor, env)
        self.nodes: dict[str, LocalNode] = {}

    def _base_dir(self, ctx: PluginContext) -> Path:
        configured = ctx.fields.get("base_dir")
        return Path(configured).expanduser() if configured else self.env.state_dir / "nodes"

    @staticmethod
    def _ips(address: str) -> dict[str, str]:
        return {"access_v4": address, "bind_v4": address}

    def _address(self, ctx: PluginContext) -> str:
        """A loopback address no node of this process has (random: another process on this machine
        picking the same one from a /16 is unlikely, and the range is a field)."""
        raw = str(ctx.fields.get("addresses") or DEFAULT_ADDRESSES)
        try:
            network = ipaddress.IPv4Network(raw)
        except ValueError as err:
            raise ValueError(f"invalid addresses range {raw!r}: {err}") from None
        if not network.subnet_of(ipaddress.IPv4Network("127.0.0.0/8")):
            raise ValueError(f"addresses range {raw!r} is not a loopback range (127.0.0.0/8)")
        if network.num_addresses == 1:
            return str(network.network_address)
        used = {node.address for node in self.nodes.values()}
        hosts = network.num_addresses - 2
        for _ in range(64):
            address = str(network.network_address + 1 + random.randrange(hosts))
            if address not in used:
                return address
        raise AddressesTaken(f"no free address found in {raw!r} ({len(used)} nodes use it)")

    async def create(self, ctx: PluginContext) -> TaskOutcome:
        providerid = f"local-{uuid.uuid4().hex[:12]}"
        key_id = f"localhost/{providerid}"
        key_path = self.env.key_dir / key_id
        client_key = asyncssh.generate_private_key("ssh-ed25519")
        host_key = asyncssh.generate_private_key("ssh-ed25519")
        try:
            address = self._address(ctx)
        except ValueError as err:
            return failed(f"create: {err}", permanent=not isinstance(err, AddressesTaken))
        write_private_key(key_path, client_key)
        endpoint = LocalSshEndpoint(
            self._base_dir(ctx) / providerid,
            host_key,
            client_key.export_public_key().decode(),
            env=_mark(providerid),
            host=address,
        )
        # Known before it starts, so that aclose stops it even if this task is cancelled.
        self.nodes[providerid] = LocalNode(providerid, endpoint, key_id, key_path, client_key, address)
        try:
            port = await endpoint.start()
        except OSError as err:
            await self._remove(providerid)
            return failed(f"cannot start an ssh endpoint on {address}: {err.strerror or err}")
        user = str(ctx.fields.get("user") or getpass.getuser())
        return succeeded(
            {"providerid": providerid, "ssh_port": port, "ssh-auth": {"user": user, "identityfile": key_id},
             "ssh_host_key_fingerprint": host_key.get_fingerprint("sha256")},
            ipaddresses=self._ips(address),
            stdout=f"node {ctx.node.id}: ssh endpoint {address}:{port}, directory {endpoint.workdir}, "
                   f"host key {host_key.get_fingerprint('sha256')}",
        )

    async def confirm(self, ctx: PluginContext) -> TaskOutcome:
        providerid = ctx.providerid
        if not providerid:
            return failed("confirm: the node has no providerid (its create did not succeed)")
        node = self.nodes.get(providerid)
        if node is None:
            return failed(
                f"localhost node {providerid} is not running in this provisioner process "
                "(localhost nodes live and die with the process that created them)"
            )
        endpoint = node.endpoint
        target = SshTarget(
            host=node.address,
            port=endpoint.port,
            user=str(ctx.fields.get("user") or getpass.getuser()),
            client_key=node.client_key,
            host_keys=(endpoint.host_public_key,),
        )
        timeout = min(float(ctx.fields.get("connect_timeout_s") or 10), max(ctx.remaining(), 0.001))
        try:
            probe = await login_probe(target, "pwd", timeout)
        except SshError as err:
            return failed(f"confirm: {err}", permanent=err.permanent)
        return succeeded(
            {"ssh_host_keys": host_keys_result(endpoint.host_key)},
            ipaddresses=self._ips(node.address),
            stdout=f"node {ctx.node.id} is up: {node.address}:{endpoint.port} in {probe.stdout.strip()}",
        )

    async def delete(self, ctx: PluginContext) -> TaskOutcome:
        providerid = ctx.providerid
        if not providerid:
            return succeeded(stdout="nothing to delete (no providerid)")
        known = providerid in self.nodes
        await self._remove(providerid, self._base_dir(ctx))
        return succeeded(stdout=f"deleted {providerid}" + ("" if known else " (not running here; leftovers removed)"))

    async def _remove(self, providerid: str, base_dir: Path | None = None) -> None:
        node = self.nodes.pop(providerid, None)
        if node is not None:
            await node.endpoint.stop()
            await asyncio.to_thread(shutil.rmtree, node.endpoint.workdir, True)
            node.key_path.unlink(missing_ok=True)
        elif _ID.match(providerid):  # a leftover of an earlier process with the same work dir
            if base_dir is not None:
                kill_all(left_behind(_mark(providerid), base_dir / providerid))  # what its commands started, still running
                await asyncio.to_thread(shutil.rmtree, base_dir / providerid, True)
            (self.env.key_dir / "localhost" / providerid).unlink(missing_ok=True)

    async def aclose(self) -> None:
        for providerid in list(self.nodes):
            await self._remove(providerid)


def _mark(providerid: str) -> dict[str, str]:
    """In the environment of every command of the node, and of what they start: how its processes are found."""
    return {"MUSTER_PROVIDERID": providerid}
