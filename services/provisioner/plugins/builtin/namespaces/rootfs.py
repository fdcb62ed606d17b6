"""A node's own hostname and file system, and its sshd, inside a network namespace (root only).

`/etc`, `/var`, `/opt`, `/usr`, `/home`, `/srv` and `/tmp` are overlays over the host's
(what the node writes or installs there lands in the node's directory; what the host has there,
a project checked out under /tmp included, the node sees), `/run` is the node's own directory, and
so is `/root`, a fresh machine's home made from /etc/skel: the host's shell start files ran in every
command a node's sshd ran (this host's `pyenv init`, which waits up to 60 s for a lock a host shell
took, and an overlay may go on seeing that lock after the host removed it), and its dotfiles
(tokens among them) are not the node's to read. A holder process (`sleep infinity`, marked in its environment) keeps the mount and UTS
namespaces alive; commands enter them with nsenter. Deleting the network namespace kills every
process in it: the mount namespace, and with it the overlays, goes with the last of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import asyncssh

from .system import NetNs, SystemCommandError, delete_netns, netns_pids, reap, spawn_until

OVERLAYS = ("etc", "var", "opt", "usr", "home", "srv", "tmp")
SKEL = Path("/etc/skel")
HOLDER_ENV = "MUSTER_NODE_HOLDER"
SSHD_CONFIG = "/run/muster/sshd_config"
"""Inside the node (its own /run): what marks its sshd among its processes."""

_HOLDER_SCRIPT = """set -e
dir="$1"; name="$2"; shift 2
# Bound before the overlays: a node directory under /tmp would be seen through the /tmp overlay,
# and what the node writes in /run or /root would land in that overlay's upper layer.
mount --bind "$dir/run" /run
mount --bind "$dir/root" /root
for d in "$@"; do
  mount -t overlay muster-node -o "lowerdir=/$d,upperdir=$dir/upper/$d,workdir=$dir/work/$d" "/$d"
done
hostname "$name"
echo ready
exec sleep infinity </dev/null >/dev/null 2>&1
"""


@dataclass(frozen=True)
class NodeRoot:
    """A node's own hostname and file system inside its network namespace."""

    netns: NetNs
    hostname: str
    directory: Path
    """On the host: `upper/` and `work/` of each overlay, and the node's `run/`."""
    holder: int

    def exec_argv(self) -> list[str]:
        """Prefix of a command that runs inside the node (network, mounts, hostname)."""
        return ["nsenter", "-t", str(self.holder), "-n", "-m", "-u", "--"]

    def inside(self, path: str) -> Path:
        """Where a file the node has under /run or /root (its own) or wrote under /tmp is on the host."""
        rel = Path(path).relative_to("/")
        if rel.parts[0] in ("run", "root"):
            return self.directory / rel
        if rel.parts[0] == "tmp":
            return self.directory / "upper" / rel
        raise SystemCommandError(f"{path} is not under the node's own /run, /root or /tmp")


async def start_node(netns: NetNs, hostname: str, directory: Path, *, overlays: Sequence[str] = OVERLAYS, timeout: float = 15.0) -> NodeRoot:
    """Give the namespace's processes their own hostname and file system (see the module doc)."""
    if re.search(r"[\s,:\\]", str(directory)):
        raise SystemCommandError(f"node directory {directory} may not contain spaces, ',', ':' or '\\' (overlay options)")
    for d in overlays:
        for layer in ("upper", "work"):
            (directory / layer / d).mkdir(parents=True, exist_ok=True)
    (directory / "run").mkdir(mode=0o755, exist_ok=True)
    _make_home(directory / "root")
    if "tmp" in overlays:
        (directory / "upper" / "tmp").chmod(0o1777)
    argv = [*netns.exec_argv(), "unshare", "--mount", "--uts", "--propagation", "private",
            "sh", "-c", _HOLDER_SCRIPT, "muster-node", str(directory), hostname, *overlays]
    holder = await spawn_until(argv, "ready", timeout, env={HOLDER_ENV: netns.name})
    if not holder.seen:
        with contextlib.suppress(ProcessLookupError):
            holder.process.kill()
        why = holder.output.strip() or ("no output" if holder.ended else f"not ready within {timeout:g} s")
        raise SystemCommandError(f"cannot set up node {hostname} in {netns.name}: {why}")
    return NodeRoot(netns, hostname, directory, holder.process.pid)


def _make_home(home: Path) -> None:
    if home.exists():  # as the other directories: kept when there
        return
    if SKEL.is_dir():
        shutil.copytree(SKEL, home, symlinks=True)
    else:
        home.mkdir()
    home.chmod(0o700)


def find_holder(netns: str) -> int | None:
    """The holder of a node made by an earlier process (found by its environment)."""
    marker = f"{HOLDER_ENV}={netns}".encode()
    for pid in netns_pids(netns):
        with contextlib.suppress(OSError):
            if marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                return pid
    return None


@dataclass(frozen=True)
class Sshd:
    pid: int
    address: str
    port: int
    host_key: str
    """The public host key, `algorithm base64`."""
    fingerprint: str
    """`SHA256:...`, as ssh-keygen -l prints it."""


def _sshd_config(address: str, port: int) -> str:
    return "\n".join([
        f"ListenAddress {address}", f"Port {port}", "HostKey /run/muster/ssh_host_ed25519_key",
        "PidFile none", "AuthorizedKeysFile /run/muster/authorized_keys", "PubkeyAuthentication yes",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no",
        "PermitRootLogin prohibit-password", "StrictModes no", "Subsystem sftp internal-sftp",
        "LogLevel INFO", "",
    ])


async def start_sshd(node: NodeRoot, authorized_key: str, *, port: int = 22, timeout: float = 15.0) -> Sshd:
    """Debian's sshd inside the node, on its address, with a host key made for it here."""
    address = node.netns.ip
    etc = node.inside("/run/muster")
    etc.mkdir(mode=0o700, exist_ok=True)
    key = asyncssh.generate_private_key("ssh-ed25519")
    key_file = etc / "ssh_host_ed25519_key"
    key_file.write_bytes(key.export_private_key())
    key_file.chmod(0o600)
    (etc / "authorized_keys").write_text(authorized_key.strip() + "\n")
    (etc / "sshd_config").write_text(_sshd_config(address, port))
    pid = await _run_sshd(node.exec_argv(), node.directory, f"{node.hostname} on {address}:{port}", timeout)
    public = key.export_public_key().decode().split()
    return Sshd(pid, address, port, f"{public[0]} {public[1]}", key.get_fingerprint("sha256"))


async def _run_sshd(exec_argv: list[str], directory: Path, where: str, timeout: float) -> int:
    (directory / "run" / "sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation directory
    sshd = shutil.which("sshd", path="/usr/sbin:/usr/bin") or "/usr/sbin/sshd"
    argv = [*exec_argv, "sh", "-c", f"{sshd} -D -e -f {SSHD_CONFIG} 2>&1 | tee -p -a /run/muster/sshd.log"]
    started = await spawn_until(argv, "Server listening on", timeout)
    if not started.seen:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(started.process.pid, signal.SIGKILL)
        why = "exited" if started.ended else f"did not come up within {timeout:g} s"
        last = (started.output.strip().splitlines() or ["no output"])[-1]
        raise SystemCommandError(f"sshd of node {where} {why}: {last}")
    return started.process.pid


def find_sshd(netns: str) -> int | None:
    """The node's sshd listener, if it runs (a process in the namespace started with its config)."""
    for pid in netns_pids(netns):
        with contextlib.suppress(OSError):
            # (the listener may have retitled itself "sshd: /usr/sbin/sshd -D ... [listener] ...";
            # the shell around it starts "sh", a login's process has no config in its title)
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"sshd" in cmdline.split(b"\0")[0] and SSHD_CONFIG.encode() in cmdline:
                return pid
    return None


async def revive_sshd(netns: str, holder: int, directory: Path, *, timeout: float = 15.0) -> int | None:
    """Start the node's sshd again if it died, with the files its create wrote (the same host
    key, client key and address): the pid of the new one, or None when it was running."""
    if find_sshd(netns) is not None:
        return None
    if not (directory / "run" / "muster" / "sshd_config").exists():
        raise SystemCommandError(f"node {netns} has no sshd config under {directory}/run/muster: it cannot be started again")
    return await _run_sshd(["nsenter", "-t", str(holder), "-n", "-m", "-u", "--"], directory, netns, timeout)


async def delete_node(netns: str, veth: str | None, directory: Path | None) -> None:
    """Kill every process of the node, delete its namespace and veth, then its directory."""
    await delete_netns(netns, veth)
    reap()
    if directory is not None and directory.exists():
        await asyncio.to_thread(shutil.rmtree, directory, True)


