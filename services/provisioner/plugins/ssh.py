"""SSH client side shared by plugins: keys, known host keys, connecting, running a command.

Host keys are always verified against keys we were given (recorded at confirm time or
configured); there is no "accept any" mode. Nothing here reads ~/.ssh or an SSH agent.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh

from muster import tracing

DEFAULT_CONNECT_TIMEOUT_S = 15.0


class SshError(Exception):
    """Why an SSH step failed, in words fit for a task's `error`. `permanent`: no retry can
    mend it (the node's recorded results lack what a login needs, the server's host key is not
    the recorded one); a plugin's outcome carries it. A connection that is refused, times out
    or drops may pass, and so may a login refused (a machine still booting has not been given
    its key yet) and a client key this provisioner lacks (another provisioner may hold it)."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


@dataclass(frozen=True)
class SshTarget:
    host: str
    port: int
    user: str
    client_key: asyncssh.SSHKey = field(repr=False)
    host_keys: tuple[str, ...]
    """Trusted host public keys, `algorithm base64` each."""

    @property
    def address(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"


@dataclass(frozen=True)
class CommandResult:
    exit_status: int | None
    stdout: str
    stderr: str
    signal: str | None = None


def write_private_key(path: Path, key: asyncssh.SSHKey) -> None:
    """Write an OpenSSH private key readable by this user only."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(key.export_private_key())


def resolve_key_path(identityfile: str, key_dir: Path) -> Path:
    """An absolute path as is; a relative one inside the provisioner's key directory."""
    path = Path(identityfile)
    if path.is_absolute():
        return path
    resolved = (key_dir / path).resolve()
    if not resolved.is_relative_to(key_dir.resolve()):
        raise SshError(f"ssh-auth identityfile {identityfile!r} points outside the key directory", permanent=True)
    return resolved


KEY_MADE_FOR_THE_NODE = ("a key its provider made for the node is kept by the provisioner that made it (its work dir's keys/); "
                         "a localhost node's goes with that process: after a restart the node is gone, and `muster cluster "
                         "delete` removes what is left")
"""Said of a relative `identityfile` that is missing: the check of a `local` cluster after `muster up`
restarted said only `does not exist on this provisioner`."""


def load_private_key(path: Path, *, made_for_the_node: bool = False) -> asyncssh.SSHKey:
    try:
        return asyncssh.read_private_key(path)
    except FileNotFoundError:
        why = f" ({KEY_MADE_FOR_THE_NODE})" if made_for_the_node else ""
        raise SshError(f"ssh client key {path} does not exist on this provisioner{why}") from None
    except (OSError, asyncssh.KeyImportError) as err:
        raise SshError(f"cannot read ssh client key {path}: {err}") from None


def host_key_lines(value: Any) -> tuple[str, ...]:
    """`ssh_host_keys` is `{algorithm: "algorithm base64"}` (a list or one string also do)."""
    if isinstance(value, Mapping):
        items = [str(v) for v in value.values()]
    elif isinstance(value, (list, tuple)):
        items = [str(v) for v in value]
    elif isinstance(value, str):
        items = [value]
    else:
        items = []
    return tuple(line.strip() for line in items if line and line.strip())


def parse_host_keys(lines: tuple[str, ...]) -> list[asyncssh.SSHKey]:
    keys = []
    for line in lines:
        try:
            keys.append(asyncssh.import_public_key(line))
        except asyncssh.KeyImportError as err:
            raise SshError(f"invalid host key {line[:40]!r}...: {err}", permanent=True) from None
    return keys


def host_keys_result(key: asyncssh.SSHKey) -> dict[str, str]:
    """The `ssh_host_keys` result for one key: `{algorithm: "algorithm base64"}`."""
    line = key.export_public_key().decode().strip()
    algorithm = line.split(" ", 1)[0]
    return {algorithm: " ".join(line.split(" ")[:2])}


def target_from_results(
    results: Mapping[str, Any], ipaddresses: Mapping[str, str], key_dir: Path, default_user: str = ""
) -> SshTarget:
    """Where and how to reach a node, from what its provider returned (see docs/plugins.md)."""
    host = ipaddresses.get("access_v4") or ipaddresses.get("bind_v4")
    if not host:
        raise SshError("the node has no access_v4 address (the provider's create/confirm sets it)", permanent=True)
    auth = results.get("ssh-auth")
    if not isinstance(auth, Mapping) or not auth.get("identityfile"):
        raise SshError("the node's results have no ssh-auth.identityfile (which client key to log in with)", permanent=True)
    user = str(auth.get("user") or default_user or "root")
    try:
        port = int(results.get("ssh_port", 22))
    except (TypeError, ValueError):
        raise SshError(f"invalid ssh_port {results.get('ssh_port')!r} in the node's results", permanent=True) from None
    host_keys = host_key_lines(results.get("ssh_host_keys"))
    if not host_keys:
        raise SshError(
            f"no ssh_host_keys for {host}:{port} in the node's results: the host key is unknown, so "
            "the connection is refused (it is recorded by the provider's confirm)", permanent=True,
        )
    identityfile = str(auth["identityfile"])
    key = load_private_key(resolve_key_path(identityfile, key_dir), made_for_the_node=not Path(identityfile).is_absolute())
    return SshTarget(host=host, port=port, user=user, client_key=key, host_keys=host_keys)


async def connect(target: SshTarget, timeout: float = DEFAULT_CONNECT_TIMEOUT_S) -> asyncssh.SSHClientConnection:
    """Connect and log in, verifying the host key; failures become SshError."""
    trusted = parse_host_keys(target.host_keys)
    try:
        return await asyncssh.connect(
            target.host,
            target.port,
            username=target.user,
            client_keys=[target.client_key],
            known_hosts=(trusted, [], []),
            agent_path=None,
            config=None,
            password_auth=False,
            kbdint_auth=False,
            gss_auth=False,
            gss_kex=False,
            connect_timeout=max(timeout, 0.001),
            login_timeout=max(timeout, 0.001),
        )
    except asyncssh.HostKeyNotVerifiable as err:
        raise SshError(
            f"host key verification failed for {target.host}:{target.port}: the server's key is not "
            f"the one recorded for this node ({err.reason})", permanent=True,
        ) from None
    except asyncssh.PermissionDenied:
        # Not permanent: a cloud machine's sshd answers before cloud-init has written its
        # authorized key, and refuses the key for that moment (what Terraform and Ansible wait
        # through); a wrong key costs a few attempts, a boot race would cost the job.
        raise SshError(f"ssh login refused for {target.address} (client key not accepted)") from None
    except asyncssh.Error as err:
        raise SshError(f"ssh to {target.address} failed: {err.reason}") from None
    except TimeoutError:
        raise SshError(f"ssh to {target.address} timed out after {timeout:g} s") from None
    except OSError as err:
        # asyncio's words ("Connect call failed ('10.0.0.3', 22)") name neither why nor what to
        # look at: the errno does (refused: nothing listens; no route: the node's network is down).
        why = f"{os.strerror(err.errno).lower()} ({errno.errorcode.get(err.errno, err.errno)})" if err.errno else str(err.strerror or err)
        raise SshError(f"cannot connect to {target.address}: {why}") from None


async def run(
    conn: asyncssh.SSHClientConnection, command: str, *, input: str | None = None, timeout: float | None = None
) -> CommandResult:
    """Run one command. On timeout the channel is closed and SshCommandTimeout (with the output
    so far) is raised; the remote command may still run (the caller may kill it)."""
    if tracing.enabled():
        # Its own span; the command itself stays out of it (it may carry a secret).
        peer = conn.get_extra_info("peername") or ("", 0)
        with tracer.nested("ssh command", **{"ssh.host": str(peer[0]), "ssh.port": int(peer[1])}) as span:
            result = await _run(conn, command, input, timeout)
            tracing.set_attributes(span, **{"ssh.exit_status": result.exit_status if result.exit_status is not None else -1})
            return result
    return await _run(conn, command, input, timeout)


async def _run(conn: asyncssh.SSHClientConnection, command: str, input: str | None, timeout: float | None) -> CommandResult:
    process = await conn.create_process(command, encoding="utf-8", errors="replace")
    try:
        if input is not None:
            process.stdin.write(input)
        process.stdin.write_eof()
        completed = await process.wait(timeout=timeout)
    except asyncssh.TimeoutError as err:
        process.close()
        raise SshCommandTimeout(_text(err.stdout), _text(err.stderr)) from None
    return CommandResult(
        exit_status=completed.exit_status,
        stdout=_text(completed.stdout),
        stderr=_text(completed.stderr),
        signal=completed.exit_signal[0] if completed.exit_signal else None,
    )


async def login_probe(target: SshTarget, command: str, timeout: float) -> CommandResult:
    """Log in (the host key checked) and run `command`, as a provider's confirm does; SshError
    when it cannot, or when the command fails."""
    async with await connect(target, timeout) as conn:
        probe = await run(conn, command, timeout=timeout)
    if probe.exit_status != 0:
        raise SshError(f"probe command exited with {probe.exit_status}" + (f": {probe.stderr.strip()[:200]}" if probe.stderr.strip() else ""))
    return probe


tracer = tracing.Tracer("muster.provisioner")


class SshCommandTimeout(Exception):
    def __init__(self, stdout: str, stderr: str) -> None:
        super().__init__("command timed out")
        self.stdout = stdout
        self.stderr = stderr


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)
