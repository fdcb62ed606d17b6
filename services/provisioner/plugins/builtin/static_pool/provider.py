"""The static-pool provider: a node's machine is the host its pool granted it (docs/pools.md).

The pool service decides which host serves which node and records the grant in the log; the
planner copies the grant into the node's results (`pool_host`: pool, host id, address, port,
login user and the host keys registered with the host), so every task of the node carries it.
This plugin keeps nothing of its own, no file and no list of hosts: create takes the granted
host, confirm logs in checking the registered host key, delete runs the release command (over
a connection checked the same way). The pool hears how confirm and delete went from the planner.
"""

from __future__ import annotations

from typing import Any

from contracts.tasks import TaskOutcome
from services.provisioner.plugins.base import PluginContext, ProviderPlugin, failed, succeeded
from services.provisioner.plugins.ssh import (
    SshCommandTimeout,
    SshError,
    SshTarget,
    connect,
    load_private_key,
    parse_host_keys,
    resolve_key_path,
    run,
)

GRANT = "pool_host"
"""The key of a node's results that holds its pool grant."""


class GrantError(ValueError):
    pass


def grant_of(ctx: PluginContext) -> dict[str, Any]:
    pool = str(ctx.fields.get("pool") or "")
    grant = ctx.results.get(GRANT)
    if not isinstance(grant, dict):
        raise GrantError(f"node {ctx.node.id} has no host from pool {pool!r} yet: the planner asks the pool for "
                         "hosts and passes the grant with every task")
    if grant.get("pool") != pool:
        raise GrantError(f"node {ctx.node.id} holds a host of pool {grant.get('pool')!r}, but provider "
                         f"{ctx.task.provider.name!r} lends from pool {pool!r}")
    missing = [k for k in ("host_id", "address", "port", "user", "host_keys") if not grant.get(k)]
    if missing:
        raise GrantError(f"the grant of node {ctx.node.id} lacks {', '.join(missing)}")
    return grant


class StaticPoolProvider(ProviderPlugin):
    def _target(self, ctx: PluginContext, grant: dict[str, Any]) -> SshTarget:
        key = load_private_key(resolve_key_path(str(ctx.fields["identityfile"]), self.env.key_dir))
        return SshTarget(str(grant["address"]), int(grant["port"]), str(grant["user"]), key, tuple(grant["host_keys"]))

    @staticmethod
    def _timeout(ctx: PluginContext) -> float:
        return max(0.001, min(float(ctx.fields.get("connect_timeout_s") or 10), ctx.remaining()))

    async def create(self, ctx: PluginContext) -> TaskOutcome:
        try:
            grant = grant_of(ctx)
        except GrantError as err:
            return failed(f"create: {err}")
        return succeeded(
            {
                "providerid": grant["host_id"],
                "ssh_port": int(grant["port"]),
                "ssh-auth": {"user": grant["user"], "identityfile": ctx.fields["identityfile"]},
            },
            ipaddresses={"access_v4": grant["address"], "bind_v4": grant["address"]},
            stdout=f"node {ctx.node.id}: host {grant['host_id']} ({grant['user']}@{grant['address']}:{grant['port']}) "
                   f"granted by pool {grant['pool']!r}",
        )

    async def confirm(self, ctx: PluginContext) -> TaskOutcome:
        try:
            grant = grant_of(ctx)
            keys = parse_host_keys(tuple(grant["host_keys"]))
        except GrantError as err:
            return failed(f"confirm: {err}")
        except SshError as err:
            return failed(f"confirm: {err}", permanent=err.permanent)
        timeout = self._timeout(ctx)
        try:
            target = self._target(ctx, grant)
            async with await connect(target, timeout) as conn:
                probe = await run(conn, "id -un && hostname", timeout=timeout)
        except SshError as err:
            return failed(f"confirm: {err}", permanent=err.permanent)
        except SshCommandTimeout:
            return failed(f"confirm: probe command timed out on {grant['address']}:{grant['port']}")
        if probe.exit_status != 0:
            return failed(f"confirm: probe command exited with status {probe.exit_status}", stderr=probe.stderr)
        host_keys = {key.get_algorithm(): " ".join(line.split()[:2]) for key, line in zip(keys, grant["host_keys"], strict=True)}
        return succeeded(
            {"ssh_host_keys": host_keys},
            ipaddresses={"access_v4": grant["address"], "bind_v4": grant["address"]},
            stdout=f"{target.address} is up: " + " ".join(probe.stdout.split()),
        )

    async def delete(self, ctx: PluginContext) -> TaskOutcome:
        grant = ctx.results.get(GRANT)
        if not isinstance(grant, dict) or not ctx.providerid:
            return succeeded(stdout="nothing to delete (the node holds no pool host)")
        release = ctx.fields.get("release_command")
        if not release:
            return succeeded(stdout=f"host {grant.get('host_id')} goes back to pool {grant.get('pool')!r}")
        if "ssh_host_keys" not in ctx.results:
            # Never confirmed (a host that did not answer, or answered with another key): we ran
            # nothing there, so there is nothing to wipe, and no checked connection to wipe with.
            return succeeded(stdout=f"host {grant.get('host_id')} was never confirmed: nothing to release")
        try:
            grant = grant_of(ctx)
            target = self._target(ctx, grant)
            async with await connect(target, self._timeout(ctx)) as conn:
                result = await run(conn, str(release), timeout=max(ctx.remaining(), 0.001))
        except GrantError as err:
            return failed(f"delete: release command: {err}")
        except SshError as err:
            return failed(f"delete: release command: {err}", permanent=err.permanent)
        except SshCommandTimeout as err:
            return failed("delete: release command timed out", stdout=err.stdout, stderr=err.stderr)
        if result.exit_status != 0:
            return failed(f"delete: release command exited with status {result.exit_status} on host {grant['host_id']}",
                          stdout=result.stdout, stderr=result.stderr)
        return succeeded(stdout=(result.stdout + "\n" if result.stdout else "") +
                         f"host {grant['host_id']} released to pool {grant['pool']!r}", stderr=result.stderr)
