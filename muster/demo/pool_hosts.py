"""SSH hosts on this machine for a pool (`muster demo --pool`, tests): each an in-process SSH
server (asyncssh) on its own 127.0.0.1 port with its own host key, running commands in its own
directory.

All of them accept one client key, written to a file the provisioner logs in with, as a pool's hosts
accept the pool provider's key.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh

from contracts.pools import HostSpec
from services.provisioner.plugins.sshserver import LocalSshEndpoint


@dataclass
class LocalPoolHosts:
    root: Path
    endpoints: dict[str, LocalSshEndpoint] = field(default_factory=dict)
    properties: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        self.key_path = self.root / "client_key"
        if self.key_path.exists():
            self.client_key = asyncssh.read_private_key(str(self.key_path))
        else:
            self.client_key = asyncssh.generate_private_key("ssh-ed25519")
            self.key_path.write_bytes(self.client_key.export_private_key())
            os.chmod(self.key_path, 0o600)

    async def start(self, host_id: str, **properties: Any) -> HostSpec:
        """One more host, listening; returns it as the pool registers it."""
        endpoint = LocalSshEndpoint(self.root / host_id, asyncssh.generate_private_key("ssh-ed25519"),
                                    self.client_key.export_public_key().decode())
        await endpoint.start()
        self.endpoints[host_id] = endpoint
        self.properties[host_id] = properties or {"cpu": 2, "memory": "4G"}
        return self.spec(host_id)

    def spec(self, host_id: str, **overrides: Any) -> HostSpec:
        e = self.endpoints[host_id]
        return HostSpec.model_validate({
            "id": host_id, "address": e.host, "port": e.port, "user": _login_user(), "host_keys": [e.host_public_key],
            "properties": self.properties[host_id], **overrides,
        })

    def specs(self) -> list[HostSpec]:
        return [self.spec(h) for h in self.endpoints]

    def workdir(self, host_id: str) -> Path:
        return self.endpoints[host_id].workdir

    async def stop(self) -> None:
        for endpoint in self.endpoints.values():
            await endpoint.stop()
        self.endpoints.clear()


def _login_user() -> str:
    """The in-process servers accept any user name and run as this process; a pool host spec
    wants a valid login name."""
    import getpass

    try:
        name = getpass.getuser()
    except (KeyError, OSError):
        name = "root"
    return name if name.replace("-", "_").replace("_", "a").isalnum() and name[:1].isalpha() else "root"


@dataclass
class NamespacePoolHosts(LocalPoolHosts):
    """The same pool hosts as real machines of this one (root only): each a Linux namespace node
    with its own address, hostname, overlays and Debian's sshd (the namespaces provider's system
    helpers), logged in to as root. `muster demo --pool --real` uses them (as root)."""

    prefix: str = field(default_factory=lambda: "mp" + os.urandom(2).hex())
    """Its own per run: two demos at once never touch each other's hosts."""
    nodes: dict[str, Any] = field(default_factory=dict)

    async def start(self, host_id: str, **properties: Any) -> HostSpec:
        from services.provisioner.plugins.builtin.namespaces import rootfs, system

        name = system.object_name(self.prefix, f"{len(self.nodes):02d}", interface=True)
        async with system.host_lock():
            bridge = await system.claim_bridge(system.object_name(self.prefix, "br", interface=True), "10.213.0.0/16")
            netns = await system.create_netns(name, name, bridge, system.lease_address(bridge, name))
        node = await rootfs.start_node(netns, host_id, self.root / name)
        sshd = await rootfs.start_sshd(node, self.client_key.export_public_key().decode())
        self.nodes[host_id] = (node, sshd)
        self.properties[host_id] = properties or {"cpu": 2, "memory": "4G"}
        return self.spec(host_id)

    def spec(self, host_id: str, **overrides: Any) -> HostSpec:
        _, sshd = self.nodes[host_id]
        return HostSpec.model_validate({"id": host_id, "address": sshd.address, "port": sshd.port, "user": "root",
                                        "host_keys": [sshd.host_key], "properties": self.properties[host_id], **overrides})

    def specs(self) -> list[HostSpec]:
        return [self.spec(h) for h in self.nodes]

    def workdir(self, host_id: str) -> Path:
        node, _ = self.nodes[host_id]
        return Path(node.directory) / "upper" / "root"  # root's home, as the node wrote it

    async def stop(self) -> None:
        from services.provisioner.plugins.builtin.namespaces import system

        self.nodes.clear()
        await system.sweep(self.prefix, [self.root])
