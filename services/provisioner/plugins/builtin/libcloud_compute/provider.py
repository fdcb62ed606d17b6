"""The libcloud provider: machines on any cloud Apache Libcloud has a compute driver for (EC2, GCE,
OpenStack, Azure, ... and its offline `dummy`).

The driver's name and region are fields; credentials (`key`, `secret`) are sensitive fields that come
from the provisioner's secrets file. The node's hardware type gives the size (`flavor`), its image
type the image. Libcloud is synchronous: each call runs in a thread. A driver object is kept per
configuration, so a driver whose state lives in memory (`dummy`) sees its own nodes again.

Host keys: clouds publish them in the machine's console output (cloud-init prints a
`BEGIN SSH HOST KEY KEYS` block); confirm reads it where the driver can (`ex_get_console_output`),
and records them as `ssh_host_keys`. Without them no automator connects (there is no accept-any mode).
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import re
import threading
from collections.abc import Mapping
from typing import Any

from contracts.tasks import TaskOutcome
from services.provisioner.plugins.base import PluginContext, ProviderPlugin, failed, succeeded

from .errors import CloudError, CloudRefused, CloudUnreachable, CredentialsRefused, translate

_NAME = re.compile(r"[^a-z0-9-]")
_KEYS_BLOCK = re.compile(r"-----BEGIN SSH HOST KEY KEYS-----(.*?)-----END SSH HOST KEY KEYS-----", re.S)


def host_keys_from_console(text: str) -> dict[str, str]:
    """`{algorithm: "algorithm base64"}` from cloud-init's host key block in a console output."""
    match = _KEYS_BLOCK.search(text or "")
    keys: dict[str, str] = {}
    for line in (match.group(1).splitlines() if match else []):
        words = line.split()
        if len(words) >= 2 and words[0].startswith(("ssh-", "ecdsa-")):
            keys[words[0]] = f"{words[0]} {words[1]}"
    return keys


def machine_name(ctx: PluginContext) -> str:
    """Stable across attempts, so that a retry finds what an earlier attempt left half-made."""
    return _NAME.sub("-", f"muster-{ctx.task.cluster_id}-{ctx.node.id}".lower())[:63].strip("-")


def _json_field(ctx: PluginContext, key: str) -> dict[str, Any]:
    value = ctx.fields.get(key) or {}
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except ValueError as err:
            raise CloudRefused(f"field {key!r} is not JSON: {err}") from None
    if not isinstance(value, Mapping):
        raise CloudRefused(f"field {key!r} must be a JSON object")
    return dict(value)


CREDENTIALS = ("key", "secret")
"""The driver's positional credentials, in libcloud's order."""


def _parameters(cls: type) -> list[inspect.Parameter]:
    """The driver's constructor parameters ([] where Python cannot tell them)."""
    try:
        return list(inspect.signature(cls).parameters.values())
    except (TypeError, ValueError):
        return []


def _required_positionals(cls: type, args: Mapping[str, Any]) -> int:
    """How many positional arguments the driver cannot do without (its credentials)."""
    return sum(1 for p in _parameters(cls) if p.default is p.empty and p.name not in args
               and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


def _no_credentials(ctx: PluginContext, driver: str, missing: list[str]) -> str:
    provider = ctx.task.provider.name
    return (f"libcloud driver {driver!r} needs {' and '.join(repr(m) for m in missing)}, which provider {provider!r} "
            f"was not given: put them in the provisioners' secrets file, "
            f'{{"{provider}": {{"key": "...", "secret": "..."}}}} (docs/secrets.md)')


class LibcloudProvider(ProviderPlugin):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._drivers: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _driver(self, ctx: PluginContext) -> Any:
        from libcloud.compute.providers import get_driver  # imported on first use: a few hundred ms

        name = str(ctx.fields["driver"])
        args = _json_field(ctx, "driver_args")
        if ctx.fields.get("region"):
            args["region"] = ctx.fields["region"]
        given = [k for k in CREDENTIALS if ctx.fields.get(k) not in (None, "")]
        if given == ["secret"]:  # it would be passed as the key
            raise CloudRefused(_no_credentials(ctx, name, ["key"]))
        credentials = [str(ctx.fields[k]) for k in given]
        # The cache key holds a digest of the credentials, never the credentials themselves.
        cache_key = hashlib.sha256(json.dumps([name, args, credentials], sort_keys=True).encode()).hexdigest()
        with self._lock:
            driver = self._drivers.get(cache_key)
            if driver is None:
                try:
                    cls = _dummy() if name == "dummy" else get_driver(name)
                except AttributeError:
                    raise CloudRefused(f"unknown libcloud driver {name!r} (a name of libcloud.compute.types.Provider, e.g. ec2, gce, openstack, azure_arm, dummy)") from None
                try:
                    positional, named = _credential_arguments(cls, args, credentials)
                    driver = cls(*positional, **named)
                except TypeError as err:
                    missing = list(CREDENTIALS[len(credentials):_required_positionals(cls, args)])
                    if missing:
                        raise CloudRefused(_no_credentials(ctx, name, missing)) from None
                    raise CloudRefused(f"libcloud driver {name!r} does not take these fields: {err}") from None
                except Exception as err:  # noqa: BLE001 - a driver that logs in as it starts (gce) says why it cannot
                    raise translate(f"start libcloud driver {name!r}", None, err, ctx.task.provider.name) from None
                self._drivers[cache_key] = driver
        return driver

    async def _call(self, ctx: PluginContext, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await asyncio.wait_for(asyncio.to_thread(fn, *args, **kwargs), max(ctx.remaining(), 0.001))
        except TimeoutError:
            raise CloudUnreachable(f"{what}: no answer from the cloud within the task's time") from None
        except CloudError:
            raise
        except Exception as err:  # noqa: BLE001 - any driver error is the cloud's answer, reported
            raise translate(what, fn, err, ctx.task.provider.name) from None

    async def _find(self, ctx: PluginContext, driver: Any, *, node_id: str | None = None, name: str | None = None) -> list[Any]:
        nodes = await self._call(ctx, "list nodes", driver.list_nodes)
        return [n for n in nodes if (node_id and str(n.id) == node_id) or (name and n.name == name)]

    async def create(self, ctx: PluginContext) -> TaskOutcome:
        created, sent, name = None, False, machine_name(ctx)
        try:
            driver = self._driver(ctx)
            for leftover in await self._find(ctx, driver, name=name):  # a half-made node of an earlier attempt
                await self._call(ctx, f"destroy leftover {leftover.id}", driver.destroy_node, leftover)
            size = await self._size(ctx, driver)
            image = await self._image(ctx, driver)
            create_args, sent = _json_field(ctx, "create_args"), True
            created = await self._call(ctx, "create node", driver.create_node, name=name, size=size, image=image, **create_args)
        except CloudUnreachable as err:
            # The request may have reached the cloud and only its answer been lost: say so, and
            # the job's rollback deletes the node (without a providerid: by its name).
            return failed(f"create: {err}" + (f"; the machine may have been made: the next attempt, or the job's rollback, "
                                              f"destroys it by its name, {name}" if sent else ""), may_have_made=sent)
        except (CloudError, ValueError) as err:
            left = created is not None and not await self._destroy_quietly(ctx, created)
            return failed(f"create: {err}", may_have_made=left, permanent=_permanent(err))
        user = str(ctx.node.sshuser or ctx.fields.get("user") or "root")
        auth = {"user": user, **({"identityfile": str(ctx.fields["identityfile"])} if ctx.fields.get("identityfile") else {})}
        return succeeded(
            {"providerid": str(created.id), "ssh-auth": auth, "cloud_name": name},
            ipaddresses=_addresses(created),
            stdout=f"node {ctx.node.id}: {ctx.fields['driver']} machine {created.id} ({name}), size {size.id}, image {image.id}",
        )

    async def _size(self, ctx: PluginContext, driver: Any) -> Any:
        wanted = ctx.node.flavor or str(ctx.fields.get("size") or "")
        sizes = await self._call(ctx, "list sizes", driver.list_sizes)
        for size in sizes:
            if wanted in (size.id, size.name):
                return size
        raise CloudRefused(f"the cloud has no size {wanted!r} (hardware type {ctx.node.hardwaretype!r}; "
                           f"sizes: {shown_sizes(wanted, [str(s.id) for s in sizes])})")

    async def _image(self, ctx: PluginContext, driver: Any) -> Any:
        wanted = ctx.node.image or str(ctx.fields.get("image") or "")
        try:
            return await self._call(ctx, f"get image {wanted}", driver.get_image, wanted)
        except (CloudUnreachable, CredentialsRefused):
            raise  # the list would fail the same way (and on EC2 it is every public image)
        except CloudError:
            pass  # not every driver looks one image up; search the list
        images = await self._call(ctx, "list images", driver.list_images)
        for image in images:
            if wanted in (image.id, image.name):
                return image
        # A cloud with no image at all is an endpoint the driver does not read (moto's own server, whose
        # XML libcloud's ec2 driver finds nothing in): said so, not left to look like a mistyped id.
        nothing = ("; it lists no image at all: is the endpoint one the driver reads? (a local EC2: docs/plugins.md, "
                   "\"Trying EC2 offline\")") if not images else ""
        raise CloudRefused(f"the cloud has no image {wanted!r} (image type {ctx.node.imagetype!r}){nothing}")

    async def _destroy_quietly(self, ctx: PluginContext, node: Any) -> bool:
        try:
            await self._call(ctx, "destroy", self._driver(ctx).destroy_node, node)
        except CloudError:
            return False  # the next attempt, or the rollback, finds it by name and destroys it
        return True

    async def confirm(self, ctx: PluginContext) -> TaskOutcome:
        if not ctx.providerid:
            return failed(f"confirm: node {ctx.node.id} has no providerid (its create did not succeed)")
        try:
            driver = self._driver(ctx)
            found = await self._find(ctx, driver, node_id=ctx.providerid)
            if not found:
                return failed(f"confirm: machine {ctx.providerid} does not exist in the cloud")
            timeout = max(1, int(min(float(ctx.fields.get("wait_timeout_s") or 600), ctx.remaining())))
            # The cloud answers only when asked: libcloud's wait asks every few seconds, with our deadline.
            [(node, ips)] = await self._call(ctx, "wait until running", driver.wait_until_running, found,
                                             wait_period=float(ctx.fields.get("wait_period_s") or 3), timeout=timeout)
            keys = await self._host_keys(ctx, driver, node)
        except (CloudError, ValueError) as err:
            return failed(f"confirm: {err}", permanent=_permanent(err))
        result: dict[str, Any] = {"cloud_state": str(node.state)}
        if keys:
            result["ssh_host_keys"] = keys
        note = f"host keys {', '.join(keys)}" if keys else "the cloud published no host key: automators will refuse to connect"
        return succeeded(result, ipaddresses=_addresses(node),
                         stdout=f"node {ctx.node.id}: machine {node.id} is {node.state} at {', '.join(ips) or 'no address'}; {note}")

    async def _host_keys(self, ctx: PluginContext, driver: Any, node: Any) -> dict[str, str]:
        console = getattr(driver, "ex_get_console_output", None)
        if console is None:
            return {}
        output = await self._call(ctx, "console output", console, node)
        return host_keys_from_console(str(output.get("output", "") if isinstance(output, Mapping) else output))

    async def delete(self, ctx: PluginContext) -> TaskOutcome:
        # Without a providerid, create never said what it made: its last attempt may still have
        # made a machine (the endpoint went away before the answer came back). The rollback
        # deletes such a node; the machine is found by the name every attempt gives it.
        name = None if ctx.providerid else machine_name(ctx)
        try:
            driver = self._driver(ctx)
            found = await self._find(ctx, driver, node_id=ctx.providerid, name=name)
            found = [n for n in found if name is None or not _gone(n)]
            for node in found:
                await self._call(ctx, f"destroy {node.id}", driver.destroy_node, node)
        except (CloudError, ValueError) as err:
            return failed(f"delete: {err}", permanent=_permanent(err))
        if name is not None:
            made = ", ".join(str(n.id) for n in found)
            return succeeded(stdout=f"destroyed {made} ({name}), which a failed create had made" if found
                             else f"nothing to delete: no machine is called {name}")
        return succeeded(stdout=f"destroyed {ctx.providerid}" if found else f"{ctx.providerid} did not exist any more")


SIZES_SHOWN = 20


def shown_sizes(wanted: str, ids: list[str]) -> str:
    """The sizes an unknown one's error lists: those of its family first (`t2.` for `t2.mcro`),
    then the rest in order, at most SIZES_SHOWN, saying how many more (EC2 has hundreds: the first
    twenty in order, a1 to c5, read as if they were all, and t2.micro was not among them)."""
    family = wanted.split(".", 1)[0].lower() if "." in wanted else wanted[:2].lower()
    ordered = sorted(ids, key=lambda i: (not (family and i.lower().startswith(family)), i))
    more = len(ordered) - SIZES_SHOWN
    return ", ".join(ordered[:SIZES_SHOWN]) + (f", and {more} more" if more > 0 else "")


def _dummy() -> type:
    """libcloud's dummy, giving the names asked for and never an id twice (dummy.py)."""
    from .dummy import NamedDummyNodeDriver  # imports libcloud: on first use only

    return NamedDummyNodeDriver


def _permanent(err: Exception) -> bool:
    """No retry can mend it (`CloudRefused`: refused credentials, no such image, invalid
    parameters); the cloud's other errors and our own ValueErrors may pass."""
    return bool(getattr(err, "permanent", False))


def _gone(node: Any) -> bool:
    """A machine the cloud still lists for a while after it was destroyed (EC2: terminated). A
    stopped one is not gone: it keeps its disks (and their bill) until it is destroyed."""
    return str(getattr(node, "state", "")).lower() == "terminated"


def _credential_arguments(cls: type, args: Mapping[str, Any], credentials: list[str]) -> tuple[list[str], dict[str, Any]]:
    """The driver's arguments: the credentials go into its first positional parameters that
    `driver_args` does not name (azure_arm's come after tenant_id and subscription_id), by name,
    so the ones `driver_args` gives are not given twice."""
    free = [p.name for p in _parameters(cls) if p.kind is p.POSITIONAL_OR_KEYWORD and p.name not in args]
    if not credentials or len(free) < len(credentials):
        return list(credentials), dict(args)  # (*args, **kwargs): as libcloud's own examples call it
    return [], {**args, **dict(zip(free, credentials, strict=False))}


def _addresses(node: Any) -> dict[str, str]:
    public = [ip for ip in (node.public_ips or []) if ip]
    private = [ip for ip in (node.private_ips or []) if ip]
    ips: dict[str, str] = {}
    if public or private:
        ips["access_v4"] = (public or private)[0]
        ips["bind_v4"] = (private or public)[0]
    return ips
