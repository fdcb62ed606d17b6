"""A test's own bridge and namespaces (needs root): a fresh name prefix and /24 of 10.213.0.0/16,
everything of the prefix swept on exit. Importable as `namespaces_support` (conftest.py)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from contracts.tasks import TaskMessage
from services.provisioner.plugins import PluginRegistry
from services.provisioner.plugins.builtin.namespaces import rootfs, system
from services.provisioner.plugins.testing import made_node, make_task

TEST_POOL = "10.213.0.0/16"


@dataclass
class NsNet:
    prefix: str
    directory: Path
    _bridge: system.Bridge | None = field(default=None, repr=False)

    @classmethod
    def fresh(cls, directory: Path) -> NsNet:
        return cls("t" + secrets.token_hex(3)[:5], directory)

    @property
    def bridge(self) -> system.Bridge:
        assert self._bridge is not None, "use NsNet in `async with`"
        return self._bridge

    async def __aenter__(self) -> NsNet:
        self.directory.mkdir(parents=True, exist_ok=True)
        async with system.host_lock():
            self._bridge = await system.claim_bridge(system.object_name(self.prefix, "br", interface=True), TEST_POOL)
        return self

    async def __aexit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        await system.sweep(self.prefix, [self.directory])

    async def netns(self, name: str) -> system.NetNs:
        ns_name = system.object_name(self.prefix, name, interface=True)
        address = system.lease_address(self.bridge, ns_name)
        return await system.create_netns(ns_name, ns_name, self.bridge, address)

    async def node(self, name: str) -> rootfs.NodeRoot:
        ns = await self.netns(name)
        return await rootfs.start_node(ns, name, self.directory / ns.name)

    @staticmethod
    def mounts_naming(path: Path) -> list[str]:
        """Mount table lines of any process that mention `path` (a node's overlay left behind)."""
        found = []
        for table in Path("/proc").glob("[0-9]*/mountinfo"):
            try:
                found += [line for line in table.read_text().splitlines() if str(path) in line]
            except OSError:
                continue
        return found


def ns_task(action: str, fields: dict[str, Any], node: str = "n1", **kw: Any) -> TaskMessage:
    return make_task(action, providertype="namespaces", provider_name="ns", provider_fields=fields, node_id=node,
                     hostname=f"{node}.c1.muster", automators=["shell"], **kw)


async def made(reg: PluginRegistry, fields: dict[str, Any], node: str = "n1") -> TaskMessage:
    return await made_node(reg, ns_task("create", fields, node), "install")
