"""A private network for one fault run: a bridge in the host namespace and one network
namespace per process, each on its own address of a /24 of 10.214.0.0/16, made with the
namespaces provider's system helpers (`services/provisioner/plugins/builtin/namespaces/system.py`:
bridge, veth, netns, pids, sweep by prefix).

    net = await Network.open()                  # takes a free /24, sweeps what a dead run left there
    node = await net.add("nats-1")              # namespace + veth + address (10.214.<n>.<10+k>)
    argv = [*net.launcher("nats-1"), "nats-server", ...]   # runs inside its namespace
    await net.close()                           # kills what still runs inside, removes it all

The harness (in the host namespace) reaches every node through the bridge's own address,
`10.214.<n>.1`; nothing of the host's own interfaces, routes or nft ruleset is touched (the
nemesis's rules live in each node's own namespace, `nemesis.py`).

**One run, one /24, one prefix.** A run takes the /24 whose lock file it can flock
(`LOCK_DIR/<n>.lock`); the kernel drops the lock when the process dies, however it dies, so a
/24 whose lock is free but whose objects exist belongs to a dead run, and is swept (its
namespaces' processes killed, the namespaces, veths and bridge deleted) before it is used again.
Every name begins with `mpn<n as 2 hex digits>-` (`mpn0a-v03`, `mpn0a-br`: interface names have
at most 15 characters), so a sweep never touches anyone else's objects.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from services.provisioner.plugins.builtin.namespaces import system
from services.provisioner.plugins.builtin.namespaces.system import SystemCommandError as NetError

__all__ = ["NetError", "Network", "Node", "available", "run"]

NETWORK = "10.214"
LOCK_DIR = Path("/run/muster-partitions")
PREFIX = "mpn"
FIRST_NODE = 10
"""Nodes get .10, .11, ...; proxies (nemesis.py) .200 and up; the bridge .1."""


def available() -> str | None:
    """Why namespaces cannot be made here (None: they can): root and the tools are needed."""
    refusal = system.root_refusal()
    if refusal is None and shutil.which("nft") is None:
        refusal = "`nft` is not installed (deploy/system-packages.txt: nftables)"
    return refusal


async def run(*argv: str) -> str:
    """Run a command (ip, nft, nsenter...); its stdout. NetError with its stderr on failure."""
    return (await system.run(argv))[1]


@dataclass
class Node:
    name: str
    netns: str
    ip: str
    veth: str
    """The host end of its link (on the bridge): `ip link set <veth> down` cuts it off."""


@dataclass
class Network:
    subnet: int
    lock_fd: int
    bridge_: system.Bridge | None = None
    nodes: dict[str, Node] = field(default_factory=dict)

    @property
    def prefix(self) -> str:
        return f"{PREFIX}{self.subnet:02x}"

    @property
    def bridge(self) -> str:
        return f"{self.prefix}-br"

    @property
    def host_ip(self) -> str:
        """The harness's own address on the bridge."""
        return self.address(1)

    def address(self, last: int) -> str:
        return f"{NETWORK}.{self.subnet}.{last}"

    # -- life --------------------------------------------------------------------------------------

    @classmethod
    async def open(cls) -> Network:
        why = available()
        if why:
            raise NetError(why)
        LOCK_DIR.mkdir(parents=True, exist_ok=True)
        for subnet in random.sample(range(1, 255), 254):
            fd = os.open(LOCK_DIR / f"{subnet}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            net = cls(subnet, fd)
            try:
                await system.sweep(net.prefix)  # a dead run's leftovers on this /24
                async with system.host_lock():
                    net.bridge_ = await system.create_bridge(net.bridge, f"{NETWORK}.{subnet}.0/24")
                # A MAC of its own: a bridge otherwise takes the lowest of its ports', so adding a
                # node would change it under the neighbour caches of the others, and what they
                # send the harness (or a proxy) would be lost until those entries expire.
                await run("ip", "link", "set", net.bridge, "address", f"02:00:0a:d6:{subnet:02x}:01")
            except NetError:
                await net.close()  # the range is someone else's (or the bridge would not come up)
                continue
            except BaseException:
                await net.close()
                raise
            return net
        raise NetError(f"no free /24 in {NETWORK}.0.0/16 (every lock in {LOCK_DIR} is held, or the ranges are used)")

    async def add(self, name: str) -> Node:
        """A namespace for `name` on the bridge, with the next free address."""
        if name in self.nodes:
            raise NetError(f"{name} is already on the network")
        assert self.bridge_ is not None
        k = len(self.nodes)
        ns = await system.create_netns(f"{self.prefix}-{name}", f"{self.prefix}-v{k:02d}", self.bridge_,
                                       self.bridge_.address(FIRST_NODE - 1 + k))
        node = Node(name, ns.name, ns.ip, ns.veth)
        self.nodes[name] = node
        return node

    def launcher(self, name: str) -> list[str]:
        """argv prefix that runs a program inside `name`'s namespace (it execs: same PID)."""
        return ["nsenter", f"--net=/run/netns/{self.nodes[name].netns}", "--"]

    async def inside(self, name: str, *argv: str) -> str:
        return await run(*self.launcher(name), *argv)

    async def link(self, name: str, up: bool) -> None:
        """`name`'s link on the bridge (the host end of its veth) up or down."""
        await system.set_link(self.nodes[name].veth, up)

    async def close(self) -> None:
        with contextlib.suppress(NetError):
            await system.sweep(self.prefix)
        self.nodes.clear()
        if self.lock_fd >= 0:
            os.close(self.lock_fd)
            self.lock_fd = -1
