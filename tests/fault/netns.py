"""A private network for one fault run: a bridge in the host namespace and one network
namespace per process, each on its own address of a /24 of 10.214.0.0/16.

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
Every name begins with `mpn<n as 2 hex digits>` (Linux interface names are at most 15
characters: `mpn0a-v03` and `mpn0a-br`), so a sweep never touches anyone else's objects.

This is the fault suite's own small interface to namespaces; the namespaces provider's system
helpers may take its place (one module to swap).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path

NETWORK = "10.214"
LOCK_DIR = Path("/run/muster-partitions")
PREFIX = "mpn"
FIRST_NODE = 10
"""Nodes get .10, .11, ...; proxies (nemesis.py) .200 and up; the bridge .1."""


class NetError(RuntimeError):
    pass


def available() -> str | None:
    """Why namespaces cannot be made here (None: they can): root and the tools are needed."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "nsenter", "nft"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (deploy/system-packages.txt: nftables; iproute2, util-linux)"
    return None


async def run(*argv: str, stdin: str | None = None, check: bool = True) -> str:
    """Run a command (ip, nft, nsenter...); its stdout. NetError with its stderr on failure."""
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate(stdin.encode() if stdin is not None else None)
    if check and proc.returncode != 0:
        raise NetError(f"{' '.join(argv[:6])}: {err.decode(errors='replace').strip() or f'exit {proc.returncode}'}")
    return out.decode(errors="replace")


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
                await sweep(net.prefix)  # a dead run's leftovers on this /24
                # A MAC of its own: a bridge otherwise takes the lowest of its ports', so adding a
                # node would change it under the neighbour caches of the others, and what they
                # send the harness (or a proxy) would be lost until those entries expire.
                await run("ip", "link", "add", net.bridge, "address", f"02:00:0a:d6:{subnet:02x}:01", "type", "bridge")
                await run("ip", "addr", "add", f"{net.host_ip}/24", "dev", net.bridge)
                await run("ip", "link", "set", net.bridge, "up")
            except BaseException:
                await net.close()
                raise
            return net
        raise NetError(f"no free /24 in {NETWORK}.0.0/16 (every lock in {LOCK_DIR} is held)")

    async def add(self, name: str) -> Node:
        """A namespace for `name` on the bridge, with the next free address."""
        if name in self.nodes:
            raise NetError(f"{name} is already on the network")
        k = len(self.nodes)
        node = Node(name, f"{self.prefix}-{name}", self.address(FIRST_NODE + k), f"{self.prefix}-v{k:02d}")
        await run("ip", "netns", "add", node.netns)
        self.nodes[name] = node
        await run("ip", "link", "add", node.veth, "type", "veth", "peer", "name", "eth0", "netns", node.netns)
        await run("ip", "link", "set", node.veth, "master", self.bridge, "up")
        await run("ip", "-n", node.netns, "-b", "-", stdin=(
            f"addr add {node.ip}/24 dev eth0\nlink set eth0 up\nlink set lo up\n"))
        return node

    def launcher(self, name: str) -> list[str]:
        """argv prefix that runs a program inside `name`'s namespace (it execs: same PID)."""
        return ["nsenter", f"--net=/run/netns/{self.nodes[name].netns}", "--"]

    async def inside(self, name: str, *argv: str, stdin: str | None = None) -> str:
        return await run(*self.launcher(name), *argv, stdin=stdin)

    async def close(self) -> None:
        with contextlib.suppress(NetError):
            await sweep(self.prefix)
        self.nodes.clear()
        if self.lock_fd >= 0:
            os.close(self.lock_fd)
            self.lock_fd = -1


async def pids(netns: str) -> list[int]:
    out = await run("ip", "netns", "pids", netns, check=False)
    return [int(p) for p in out.split() if p.isdigit()]


async def sweep(prefix: str) -> None:
    """Remove every namespace and link whose name begins with `prefix` (and kill what runs in
    those namespaces). Only ever called with a prefix this process holds the lock of."""
    assert prefix.startswith(PREFIX) and len(prefix) > len(PREFIX)
    for netns in (await run("ip", "netns", "list", check=False)).split("\n"):
        name = netns.split(" ")[0]
        if not name.startswith(prefix + "-"):
            continue
        for pid in await pids(name):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        await run("ip", "netns", "del", name, check=False)  # takes its end of each veth with it
    for line in (await run("ip", "-o", "link", "show", check=False)).split("\n"):
        parts = line.split(": ")
        if len(parts) > 1 and parts[1].split("@")[0].startswith(prefix + "-"):
            await run("ip", "link", "del", parts[1].split("@")[0], check=False)
