"""Linux network objects for nodes and test harnesses: a bridge with an address range, network
namespaces with a veth on it, long-lived processes inside, and a sweep of what a crashed run left.
Needs root (`root_refusal`). `rootfs` adds a node's own file system, hostname and sshd.

Every object is named `<prefix>-<suffix>` (a prefix is 1-6 lower-case letters or digits), so a
sweep of one prefix never touches another's objects (other provisioners, other test runs).
Interface names have at most 15 characters (the kernel's limit): hence the short prefixes.
Bridges and address leases are changed under one host-wide file lock, so that processes sharing
a bridge never hand out one address twice and never pick overlapping ranges.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import ipaddress
import os
import re
import shutil
import signal
import subprocess
import weakref
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

IFNAMSIZ = 15
_PREFIX = re.compile(r"^[a-z0-9]{1,6}$")
_NAME = re.compile(r"^[a-z0-9]{1,6}-[A-Za-z0-9_.-]+$")
STATE_ROOT = Path("/run/muster-namespaces")
"""Address leases, one directory per bridge (gone at reboot, as the namespaces are)."""


class SystemCommandError(Exception):
    """A system command failed, or an object cannot be made; the message names which and why."""


def root_refusal() -> str | None:
    """None when this process may make namespaces; otherwise one line saying why not."""
    if os.geteuid() != 0:
        return "namespace nodes need root (network, mount and UTS namespaces, bridges, veths); run the provisioner as root or use the localhost provider"
    for tool in ("ip", "unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"namespace nodes need the {tool!r} command (Debian's iproute2 / util-linux)"
    return None


def check_prefix(prefix: str) -> str:
    if not _PREFIX.match(prefix):
        raise SystemCommandError(f"invalid name prefix {prefix!r}: 1-6 lower-case letters or digits")
    return prefix


def object_name(prefix: str, suffix: str, *, interface: bool = False) -> str:
    """`<prefix>-<suffix>`; an interface name is refused when longer than the kernel allows."""
    name = f"{check_prefix(prefix)}-{suffix}"
    if not _NAME.match(name) or (interface and len(name) > IFNAMSIZ):
        raise SystemCommandError(f"invalid {'interface' if interface else 'object'} name {name!r}"
                                 + (f" (at most {IFNAMSIZ} characters)" if interface else ""))
    return name


async def run(argv: Sequence[str], *, check: bool = True, timeout: float = 30.0) -> tuple[int, str, str]:
    """Run one short command: (status, stdout, stderr). A failure raises SystemCommandError."""
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise SystemCommandError(f"{' '.join(argv)}: no answer after {timeout:g} s") from None
    status = proc.returncode or 0
    if check and status != 0:
        raise SystemCommandError(f"{' '.join(argv)}: {err.decode(errors='replace').strip() or f'exit status {status}'}")
    return status, out.decode(errors="replace"), err.decode(errors="replace")


_process_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()


@contextlib.asynccontextmanager
async def host_lock(path: Path = STATE_ROOT / "lock") -> AsyncIterator[None]:
    """One holder at a time, host-wide, for bridges and address leases: an asyncio lock among
    this process's tasks, then a file lock among processes (taken in a thread, never blocking
    the event loop)."""
    loop = asyncio.get_running_loop()
    local = _process_locks.setdefault(loop, asyncio.Lock())
    async with local:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as fh:
            await asyncio.to_thread(fcntl.flock, fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)


# ----------------------------------------------------------------------- long-lived processes

_spawned: dict[int, subprocess.Popen[bytes]] = {}
"""Long-lived children (node holders, sshds, servers): reaped after they end, so none stays a zombie."""


async def spawn_until(argv: Sequence[str], timeout: float, until: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """Start a long-lived process (its own session, stdout and stderr to us until then) and read
    what it prints until a line contains `until`, EOF or the timeout: (process, output). The caller
    checks whether `until` was seen. The process outlives our reading and this process."""
    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=write_fd, stderr=write_fd,
                                start_new_session=True, env={"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), **(env or {})})
    finally:
        os.close(write_fd)
    _spawned[proc.pid] = proc
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb"))
    lines: list[str] = []

    async def follow() -> None:
        async for raw in reader:
            lines.append(raw.decode(errors="replace").rstrip())
            if until in lines[-1]:
                return

    try:
        await asyncio.wait_for(follow(), timeout)
    except TimeoutError:
        lines.append(f"(nothing more after {timeout:g} s)")
    finally:
        transport.close()  # an sshd's tee goes on writing its log file (tee -p)
    reap()
    return proc, "\n".join(lines)


def reap() -> None:
    """Collect the exit status of spawned processes that ended (no zombie left behind)."""
    for pid, proc in list(_spawned.items()):
        if proc.poll() is not None:
            del _spawned[pid]


# ----------------------------------------------------------------------------------- network


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
    await run(["ip", "link", "add", name, "type", "bridge"])
    try:
        await run(["ip", "addr", "add", str(bridge.gateway), "dev", name])
        await run(["ip", "link", "set", name, "up"])
    except SystemCommandError:
        await delete_link(name)
        raise
    return bridge


async def claim_bridge(name: str, pool: str | ipaddress.IPv4Network, prefixlen: int = 24) -> Bridge:
    """The bridge `name`: as it is when it exists, else made on the first free /prefixlen of pool."""
    async with host_lock():
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


def release_address(bridge_name: str, address: str) -> None:
    (STATE_ROOT / bridge_name / address.split("/")[0]).unlink(missing_ok=True)


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
    except SystemCommandError:
        await delete_netns(name, veth)
        raise
    return ns


def netns_pids(name: str) -> list[int]:
    """Live processes in the network namespace (zombies have left it)."""
    out = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True, check=False).stdout
    return [int(word) for word in out.split() if word.isdigit()]


async def kill_pids(pids: Sequence[int], timeout: float = 10.0) -> None:
    """SIGKILL each and wait for its exit (pidfd: an event, not a poll)."""
    loop = asyncio.get_running_loop()
    waits = []
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        gone: asyncio.Future[None] = loop.create_future()
        loop.add_reader(fd, _settle, gone)
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        waits.append((fd, gone))
    try:
        if waits:
            await asyncio.wait_for(asyncio.gather(*(g for _, g in waits)), timeout)
    finally:
        for fd, _ in waits:
            loop.remove_reader(fd)
            os.close(fd)


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def kill_netns(name: str, rounds: int = 5) -> None:
    """Kill every process in the namespace, again for those forked meanwhile (a bounded few rounds)."""
    for _ in range(rounds):
        pids = netns_pids(name)
        if not pids:
            return
        await kill_pids(pids)
        reap()
    if netns_pids(name):
        raise SystemCommandError(f"processes keep appearing in network namespace {name}: {netns_pids(name)}")


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
