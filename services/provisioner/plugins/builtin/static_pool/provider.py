"""The static-pool provider: lend existing SSH hosts to nodes, one node of one cluster at a time.

Assignments are kept in a JSON file per pool (the catalog provider's name) under the plugin's
directory, read and written under an exclusive file lock: provisioner processes sharing a work
directory share the pool, and a restarted provisioner still knows who holds which host.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import re
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from contracts.tasks import TaskOutcome
from services.provisioner.plugins.base import PluginContext, PluginEnv, ProviderPlugin, failed, succeeded
from services.provisioner.plugins.descriptor import PluginDescriptor
from services.provisioner.plugins.ssh import (
    SshCommandTimeout,
    SshError,
    SshTarget,
    connect,
    host_key_lines,
    load_private_key,
    parse_host_keys,
    resolve_key_path,
    run,
)


class PoolHost(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = Field(min_length=1)
    port: int = Field(default=22, ge=1, le=65535)
    user: str = Field(default="root", min_length=1)
    identityfile: str = Field(min_length=1, description="absolute, or relative to the provisioner's key dir")
    host_key: list[str] = Field(min_length=1, description="known host public key(s), 'algorithm base64'")
    name: str = ""

    @field_validator("host_key", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return list(host_key_lines(value)) if isinstance(value, (str, dict, list, tuple)) else value

    @property
    def id(self) -> str:
        return self.name or f"{self.host}:{self.port}"


def parse_hosts(raw: Any) -> list[PoolHost]:
    if not isinstance(raw, list) or not raw:
        raise ValueError("field 'hosts' must be a non-empty JSON list of hosts")
    hosts = []
    for i, item in enumerate(raw):
        try:
            host = PoolHost.model_validate(item)
            parse_host_keys(tuple(host.host_key))
        except ValidationError as err:
            first = err.errors(include_url=False)[0]
            where = ".".join(str(p) for p in first["loc"])
            raise ValueError(f"field 'hosts[{i}]{'.' + where if where else ''}': {first['msg']}") from None
        except SshError as err:
            raise ValueError(f"field 'hosts[{i}].host_key': {err}") from None
        hosts.append(host)
    ids = [h.id for h in hosts]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ValueError(f"field 'hosts': listed twice: {dupes}")
    return hosts


class StaticPoolProvider(ProviderPlugin):
    def __init__(self, descriptor: PluginDescriptor, env: PluginEnv) -> None:
        super().__init__(descriptor, env)
        self._locks: dict[str, asyncio.Lock] = {}

    # ------------------------------------------------------------------ state

    def _state_file(self, pool: str) -> Path:
        return self.env.state_dir / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', pool)}.json"

    @contextmanager
    def _locked_state(self, pool: str) -> Iterator[dict[str, Any]]:
        """The pool's assignments `{host id: {cluster_id, node_id}}`, saved on normal exit."""
        path = self._state_file(pool)
        with open(path.with_suffix(".lock"), "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                state = json.loads(path.read_text()) if path.exists() else {}
                assignments: dict[str, Any] = state.get("assignments", {})
                yield assignments
                tmp = path.with_suffix(".tmp")
                tmp.write_text(json.dumps({"assignments": assignments}, indent=1, sort_keys=True))
                os.replace(tmp, path)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    async def _with_state(self, pool: str, change: Any) -> Any:
        lock = self._locks.setdefault(pool, asyncio.Lock())
        async with lock:

            def apply() -> Any:
                with self._locked_state(pool) as assignments:
                    return change(assignments)

            return await asyncio.to_thread(apply)

    def assignments(self, pool: str) -> dict[str, Any]:
        """A snapshot of who holds which host (for tests and operators)."""
        path = self._state_file(pool)
        return dict(json.loads(path.read_text()).get("assignments", {})) if path.exists() else {}

    # ------------------------------------------------------------------ helpers

    def _target(self, host: PoolHost) -> SshTarget:
        key = load_private_key(resolve_key_path(host.identityfile, self.env.key_dir))
        return SshTarget(host.host, host.port, host.user, key, tuple(host.host_key))

    def _timeout(self, ctx: PluginContext) -> float:
        return max(0.001, min(float(ctx.fields.get("connect_timeout_s") or 10), ctx.remaining()))

    @staticmethod
    def _find(hosts: list[PoolHost], providerid: str) -> PoolHost | None:
        return next((h for h in hosts if h.id == providerid), None)

    # ------------------------------------------------------------------ actions

    @staticmethod
    async def _guard(action: Callable[[PluginContext], Awaitable[TaskOutcome]], ctx: PluginContext) -> TaskOutcome:
        try:
            return await action(ctx)
        except ValueError as err:  # a bad pool description
            return failed(f"static pool {ctx.task.provider.name!r}: {err}")

    async def create(self, ctx: PluginContext) -> TaskOutcome:
        return await self._guard(self._create, ctx)

    async def _create(self, ctx: PluginContext) -> TaskOutcome:
        hosts = parse_hosts(ctx.fields.get("hosts"))
        pool = ctx.task.provider.name
        owner = {"cluster_id": ctx.task.cluster_id, "node_id": ctx.node.id}

        def assign(assignments: dict[str, Any]) -> tuple[PoolHost | None, bool]:
            for host in hosts:  # a retry of this node's create gets the same host back
                if assignments.get(host.id) == owner:
                    return host, True
            for host in hosts:
                if host.id not in assignments:
                    assignments[host.id] = owner
                    return host, False
            return None, False

        host, again = await self._with_state(pool, assign)
        if host is None:
            holders = sorted({a["cluster_id"] for a in self.assignments(pool).values()})
            return failed(
                f"static pool {pool!r} is exhausted: all {len(hosts)} hosts are assigned "
                f"(to clusters {', '.join(holders)}); delete a cluster or add hosts"
            )
        return succeeded(
            {
                "providerid": host.id,
                "ssh_port": host.port,
                "ssh-auth": {"user": host.user, "identityfile": host.identityfile},
            },
            ipaddresses={"access_v4": host.host, "bind_v4": host.host},
            stdout=f"node {ctx.node.id}: {'still holds' if again else 'assigned'} {host.user}@{host.host}:{host.port} from pool {pool!r}",
        )

    async def confirm(self, ctx: PluginContext) -> TaskOutcome:
        return await self._guard(self._confirm, ctx)

    async def _confirm(self, ctx: PluginContext) -> TaskOutcome:
        providerid = ctx.providerid
        if not providerid:
            return failed("confirm: the node has no providerid (its create did not succeed)")
        hosts = parse_hosts(ctx.fields.get("hosts"))
        host = self._find(hosts, providerid)
        if host is None:
            return failed(f"confirm: host {providerid!r} is not in pool {ctx.task.provider.name!r}")
        timeout = self._timeout(ctx)
        try:
            target = self._target(host)
            async with await connect(target, timeout) as conn:
                probe = await run(conn, "id -un && hostname", timeout=timeout)
        except SshError as err:
            return failed(f"confirm: {err}")
        except SshCommandTimeout:
            return failed(f"confirm: probe command timed out on {target.address}")
        if probe.exit_status != 0:
            return failed(f"confirm: probe command exited with status {probe.exit_status}", stderr=probe.stderr)
        keys = parse_host_keys(tuple(host.host_key))
        host_keys = {}
        for key, line in zip(keys, host.host_key, strict=True):
            host_keys[key.get_algorithm()] = " ".join(line.split()[:2])
        return succeeded(
            {"ssh_host_keys": host_keys},
            ipaddresses={"access_v4": host.host, "bind_v4": host.host},
            stdout=f"{target.address} is up: " + " ".join(probe.stdout.split()),
        )

    async def delete(self, ctx: PluginContext) -> TaskOutcome:
        return await self._guard(self._delete, ctx)

    async def _delete(self, ctx: PluginContext) -> TaskOutcome:
        providerid = ctx.providerid
        if not providerid:
            return succeeded(stdout="nothing to delete (no providerid)")
        pool = ctx.task.provider.name
        owner = {"cluster_id": ctx.task.cluster_id, "node_id": ctx.node.id}
        if self.assignments(pool).get(providerid) != owner:
            return succeeded(stdout=f"{providerid} is not held by node {ctx.node.id} (already returned)")
        release = ctx.fields.get("release_command")
        stdout = stderr = ""
        if release:
            host = self._find(parse_hosts(ctx.fields.get("hosts")), providerid)
            if host is not None:
                try:
                    target = self._target(host)
                    async with await connect(target, self._timeout(ctx)) as conn:
                        result = await run(conn, str(release), timeout=max(ctx.remaining(), 0.001))
                except SshError as err:
                    return failed(f"delete: release command: {err}")
                except SshCommandTimeout as err:
                    return failed("delete: release command timed out", stdout=err.stdout, stderr=err.stderr)
                stdout, stderr = result.stdout, result.stderr
                if result.exit_status != 0:
                    return failed(
                        f"delete: release command exited with status {result.exit_status}; "
                        f"{providerid} stays assigned",
                        stdout=stdout,
                        stderr=stderr,
                    )

        def unassign(assignments: dict[str, Any]) -> bool:
            if assignments.get(providerid) == owner:
                del assignments[providerid]
                return True
            return False

        await self._with_state(pool, unassign)
        return succeeded(stdout=(stdout + "\n" if stdout else "") + f"returned {providerid} to pool {pool!r}", stderr=stderr)
