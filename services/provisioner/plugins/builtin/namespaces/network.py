"""Bridges with an address range, leases of addresses on them, network namespaces with a veth on
a bridge, and the sweep of a prefix. `system` is the one module to import (it re-exports these)."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import secrets
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .base import IFNAMSIZ, STATE_ROOT, SystemCommandError, check_prefix, host_lock, kill_netns, reap, run


@dataclass(frozen=True)
class Bridge:
    name: str
    network: ipaddress.IPv4Network

    @property
    def gateway(self) -> ipaddress.IPv4Interface:
        """The host's own address on the bridge: the first of the range."""
        return ipaddress.IPv4Interface(f"{next(self.network.hosts())}/{self.network.prefixlen}")

    def address(self, index: int) -> ipaddress.IPv4Interface:
        """The index-th node address (1 = the first after the gateway)."""
        hosts = self.network.num_addresses - 2
        if not 1 <= index < hosts:
            raise SystemCommandError(f"{self.network} has room for {hosts - 1} node addresses, not {index}")
        return ipaddress.IPv4Interface(f"{self.network.network_address + 1 + index}/{self.network.prefixlen}")


async def host_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network the host has a route or an address in (all routing tables)."""
    _, out, _ = await run(["ip", "-4", "-o", "route", "show", "table", "all"], check=False)
    found = []
    for line in out.splitlines():
        word = line.split()[0] if line.split() else ""
        if word in ("local", "broadcast") and len(line.split()) > 1:
            word = line.split()[1]
        with contextlib.suppress(ValueError):
            if word != "default":
                found.append(ipaddress.IPv4Network(word, strict=False))
    return found


async def free_network(pool: str | ipaddress.IPv4Network, prefixlen: int = 24) -> ipaddress.IPv4Network:
    """The first `/prefixlen` of `pool` that overlaps nothing the host routes (call under host_lock)."""
    pool = ipaddress.IPv4Network(pool)
    used = await host_networks()
    for candidate in pool.subnets(new_prefix=prefixlen):
        if not any(candidate.overlaps(net) for net in used):
            return candidate
    raise SystemCommandError(f"no free /{prefixlen} left in {pool}")


async def create_bridge(name: str, network: str | ipaddress.IPv4Network) -> Bridge:
    """Make the bridge with the range's first address on it (call under host_lock); an existing
    bridge of that name is kept, with the range it already has."""
    if len(name) > IFNAMSIZ:
        raise SystemCommandError(f"bridge name {name!r} is longer than {IFNAMSIZ} characters")
    existing = await bridge_network(name)
    if existing is not None:
        return Bridge(name, existing)
    bridge = Bridge(name, ipaddress.IPv4Network(network))
    for net in await host_networks():
        if net.overlaps(bridge.network):
            raise SystemCommandError(f"{bridge.network} overlaps the host's {net}: choose another range")
    # A MAC of its own: else the bridge takes its lowest port's, changing as nodes come and go, and a
    # node's neighbour entry for the gateway keeps the MAC of a port since deleted (frames lost).
    await run(["ip", "link", "add", name, "address", _local_mac(), "type", "bridge"])
    try:
        await run(["ip", "addr", "add", str(bridge.gateway), "dev", name])
        await run(["ip", "link", "set", name, "up"])
    except SystemCommandError:
        await delete_link(name)
        raise
    return bridge


def _local_mac() -> str:
    """A random unicast, locally administered MAC."""
    first, *rest = secrets.token_bytes(6)
    return ":".join(f"{b:02x}" for b in ((first & 0xFC) | 0x02, *rest))


async def claim_bridge(name: str, pool: str | ipaddress.IPv4Network, prefixlen: int = 24) -> Bridge:
    """The bridge `name`: as it is when it exists, else made on the first free /prefixlen of pool.
    Call under host_lock, and attach what needs the bridge before releasing it (see
    delete_bridge_if_unused)."""
    existing = await bridge_network(name)
    if existing is not None:
        return Bridge(name, existing)
    return await create_bridge(name, await free_network(pool, prefixlen))


async def bridge_network(name: str) -> ipaddress.IPv4Network | None:
    """The range of an existing bridge (from its address), None when there is no such bridge."""
    status, out, _ = await run(["ip", "-4", "-o", "addr", "show", "dev", name], check=False)
    words = out.split()
    if status != 0 or "inet" not in words:
        return None
    return ipaddress.IPv4Interface(words[words.index("inet") + 1]).network


def lease_address(bridge: Bridge, owner: str) -> ipaddress.IPv4Interface:
    """A node address of the bridge no one else holds: a lease is a file made with O_EXCL, so
    processes sharing the bridge never get the same one. Its text names the owner."""
    leases = STATE_ROOT / bridge.name
    leases.mkdir(parents=True, exist_ok=True)
    for index in range(1, bridge.network.num_addresses - 2):
        address = bridge.address(index)
        try:
            fd = os.open(leases / str(address.ip), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        with os.fdopen(fd, "w") as fh:
            fh.write(owner)
        return address
    raise SystemCommandError(f"no free address left on bridge {bridge.name} ({bridge.network})")


def release_leases(bridge_name: str, owner: str) -> None:
    """Give back the addresses `owner` holds on the bridge (none is fine)."""
    for lease in (STATE_ROOT / bridge_name).glob("*"):
        with contextlib.suppress(OSError):
            if lease.read_text() == owner:
                lease.unlink()


async def link_exists(name: str) -> bool:
    status, _, _ = await run(["ip", "link", "show", "dev", name], check=False)
    return status == 0


async def bridge_ports(name: str) -> list[str]:
    _, out, _ = await run(["ip", "-o", "link", "show", "master", name], check=False)
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line]


async def delete_bridge_if_unused(name: str) -> bool:
    """Delete the bridge and its leases when no interface is attached to it (under host_lock, so
    that a node being made on it meanwhile is not cut off). True when it is gone."""
    async with host_lock():
        if await bridge_ports(name):
            return False
        await delete_link(name)
        shutil.rmtree(STATE_ROOT / name, ignore_errors=True)
        return True


async def delete_link(name: str) -> None:
    """Delete an interface (a bridge, one end of a veth); one that does not exist is fine."""
    if await link_exists(name):
        await run(["ip", "link", "del", "dev", name], check=False)


async def set_link(name: str, up: bool, netns: str | None = None) -> None:
    """Take an interface down or up (on the host, or inside `netns`)."""
    await run(["ip", *(["-n", netns] if netns else []), "link", "set", name, "up" if up else "down"])


async def link_is_up(name: str, netns: str | None = None) -> bool | None:
    """Whether an interface is set up (its `UP` flag: what `ip link set ... down` clears), None
    when there is no such interface."""
    status, out, _ = await run(["ip", *(["-n", netns] if netns else []), "-o", "link", "show", "dev", name], check=False)
    if status != 0 or "<" not in out:
        return None
    return "UP" in out.split("<", 1)[1].split(">", 1)[0].split(",")


async def raise_links(name: str, veth: str, bridge: str) -> list[str]:
    """Set up again what carries a node's traffic and was taken down (by hand, by a fault
    harness): the bridge, the host end of its veth, and `lo` and `eth0` inside namespace `name`.
    The names of those it set up, in that order (none: nothing was down)."""
    raised = []
    for dev, netns in ((bridge, None), (veth, None), ("lo", name), ("eth0", name)):
        if await link_is_up(dev, netns) is False:
            await set_link(dev, True, netns)
            raised.append(f"{dev} (in {name})" if netns else dev)
    return raised


@dataclass(frozen=True)
class NetNs:
    name: str
    veth: str
    """The host end of the veth, a port of the bridge; the other end is `eth0` inside."""
    address: ipaddress.IPv4Interface

    @property
    def ip(self) -> str:
        return str(self.address.ip)

    def exec_argv(self) -> list[str]:
        """Prefix of a command that runs inside this namespace (network only)."""
        return ["ip", "netns", "exec", self.name]


async def create_netns(name: str, veth: str, bridge: Bridge, address: ipaddress.IPv4Interface) -> NetNs:
    """A network namespace with `eth0` at `address` on the bridge (default route via the bridge)."""
    if len(veth) > IFNAMSIZ:
        raise SystemCommandError(f"veth name {veth!r} is longer than {IFNAMSIZ} characters")
    ns = NetNs(name, veth, address)
    try:
        await run(["ip", "netns", "add", name])
        await run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", name])
        await run(["ip", "link", "set", veth, "master", bridge.name])
        await run(["ip", "link", "set", veth, "up"])
        await run(["ip", "-n", name, "addr", "add", str(address), "dev", "eth0"])
        for dev in ("lo", "eth0"):
            await run(["ip", "-n", name, "link", "set", dev, "up"])
        await run(["ip", "-n", name, "route", "add", "default", "via", str(bridge.gateway.ip)])
        # The host's entry for a node deleted at this address lives on (reachable for 15-45 s): until
        # it goes, what the host sends here goes to the old node's MAC and is lost (an ssh times out).
        await run(["ip", "neigh", "flush", "to", str(address.ip), "dev", bridge.name])
    except SystemCommandError:
        await delete_netns(name, veth)
        raise
    return ns


async def delete_netns(name: str, veth: str | None = None) -> None:
    """Kill everything inside, delete the namespace and the veth; what does not exist is fine."""
    if Path("/run/netns", name).exists():
        await kill_netns(name)
        await run(["ip", "netns", "del", name], check=False)
    if veth:
        await delete_link(veth)


# ------------------------------------------------------------------------------------ sweep


async def sweep(prefix: str, directories: Sequence[Path] = ()) -> list[str]:
    """Remove what carries this prefix: namespaces (and their processes), interfaces, address
    leases, and node directories under `directories`. Another prefix's objects are never touched."""
    start = f"{check_prefix(prefix)}-"
    removed = []
    _, out, _ = await run(["ip", "netns", "list"], check=False)
    for name in (line.split()[0] for line in out.splitlines() if line.strip()):
        if name.startswith(start):
            await delete_netns(name)
            removed.append(f"netns {name}")
    _, out, _ = await run(["ip", "-o", "link", "show"], check=False)
    links = [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if line.count(":") >= 2]
    for name in links:
        if name.startswith(start):
            await delete_link(name)
            removed.append(f"link {name}")
    for base in (STATE_ROOT, *directories):
        for child in sorted(base.glob(f"{start}*")) if base.is_dir() else []:
            await asyncio.to_thread(shutil.rmtree, child, True)
            removed.append(f"directory {child}")
    reap()
    return removed
