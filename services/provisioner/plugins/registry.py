"""Discover plugins, dispatch tasks to them as Coopr's worker does, and keep secrets in.

Dispatch (coopr-facts §5.3): create/confirm/delete go to the provider plugin named by
`task.provider.providertype`; install/configure/initialize/start/stop/remove to the automator
named by `task.service.action.type`; bootstrap to every automator in `task.node.automators`,
in order, with their results merged (later keys win, outputs concatenated).

Longer than most modules (~410 lines) on purpose: discovery, entry-point import, secrets and
dispatch all work on the one table of loaded plugins; apart, each would reach into the others'.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import os
import shutil
import sys
import tempfile
import time
import types
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from contracts.catalog import Action
from contracts.secrets import references, resolved
from contracts.tasks import TaskMessage, TaskOutcome, trim_output
from muster import tracing

from ..domain.secrets import ProvisionerSecrets, SecretsFileError
from ..progress import Progress
from ..progress import current as current_progress
from .base import AutomatorPlugin, Plugin, PluginContext, PluginEnv, ProviderPlugin, failed
from .descriptor import (
    DESCRIPTOR_FILE,
    PROVIDER_ACTIONS,
    PluginDescriptor,
    PluginError,
    PluginType,
    load_descriptor,
)
from .masking import Masker

log = structlog.get_logger("muster.provisioner.plugins")
tracer = tracing.Tracer("muster.provisioner")


def _plugin_of(task: TaskMessage) -> str:
    if task.action in PROVIDER_ACTIONS:
        return task.provider.providertype
    if task.action is Action.BOOTSTRAP:
        return "bootstrap"
    return task.service.action.type if task.service is not None else "none"

def _masked(progress: Progress | None, masker: Masker) -> Progress:
    """The worker's progress reporter for this attempt (none: lines go nowhere), secrets masked."""
    if progress is None:
        return _quiet
    return (lambda line: progress(masker.text(str(line)))) if masker else progress


def _quiet(line: str) -> None:
    pass


BUILTIN_DIR = Path(__file__).parent / "builtin"
_BUILTIN_PACKAGE = f"{__package__}.builtin"
_BASES: dict[PluginType, type[Plugin]] = {
    PluginType.PROVIDER: ProviderPlugin,
    PluginType.AUTOMATOR: AutomatorPlugin,
}


@dataclass(frozen=True)
class LoadedPlugin:
    descriptor: PluginDescriptor
    path: Path
    """The descriptor file."""
    instance: Plugin


def plugin_folders(folder: Path) -> list[Path]:
    """A folder is a plugin (it has a descriptor) or holds plugins in its subfolders."""
    if not folder.is_dir():
        raise PluginError(f"{folder}: plugin folder does not exist or is not a directory")
    if (folder / DESCRIPTOR_FILE).is_file():
        return [folder]
    return sorted(p for p in folder.iterdir() if p.is_dir() and (p / DESCRIPTOR_FILE).is_file())


def _import_entry_point(folder: Path, descriptor: PluginDescriptor, path: Path) -> type[Plugin]:
    if folder.parent == BUILTIN_DIR and folder.name.isidentifier():
        package = f"{_BUILTIN_PACKAGE}.{folder.name}"
    else:
        # A plugin from elsewhere is imported as a package of its own, so that its modules can
        # import each other relatively; one package per folder, so that two folders declaring
        # the same name (in two registries) never share modules.
        digest = hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:10]
        package = f"_muster_plugin_{descriptor.type.value}_{descriptor.name.replace('-', '_')}_{digest}"
        if package not in sys.modules:
            module = types.ModuleType(package)
            module.__path__ = [str(folder)]
            sys.modules[package] = module
    try:
        module = importlib.import_module(f"{package}.{descriptor.module}")
    except Exception as err:  # noqa: BLE001 - any import failure is a bad plugin
        raise PluginError(
            f"{path}: field 'entry_point': cannot import module {descriptor.module!r}: "
            f"{type(err).__name__}: {err}"
        ) from None
    cls = getattr(module, descriptor.classname, None)
    base = _BASES[descriptor.type]
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise PluginError(
            f"{path}: field 'entry_point': {descriptor.entry_point!r} is not a subclass of "
            f"{base.__name__}"
        )
    return cls


Elsewhere = Callable[[TaskMessage], Awaitable[bool]]
"""Whether a live provisioner besides this one, that has not tried the task, serves its tenant
and class (`presence.untried_elsewhere`)."""


class SecretLacking(ValueError):
    """A `secret://NAME` the task's tenant lacks in this provisioner's secrets file."""


class PluginRegistry:
    """The plugins of one provisioner process. Use `discover`; close with `aclose`."""

    def __init__(
        self,
        plugins: Sequence[LoadedPlugin],
        secrets: ProvisionerSecrets,
        work_dir: Path,
        owns_work_dir: bool,
    ) -> None:
        self._plugins: dict[tuple[PluginType, str], LoadedPlugin] = {
            (p.descriptor.type, p.descriptor.name): p for p in plugins
        }
        self._secrets = secrets
        self.work_dir = work_dir
        self._owns_work_dir = owns_work_dir
        self._closed = False
        self.elsewhere: Elsewhere | None = None
        """Set by the provisioner's composition root. None: no other provisioner is known, so a
        secret this one lacks is lacked wherever the task could go."""

    # ------------------------------------------------------------------ discovery

    @classmethod
    def discover(
        cls,
        extra_dirs: Sequence[Path] = (),
        secrets: Mapping[str, Any] | ProvisionerSecrets | None = None,
        *,
        work_dir: Path | None = None,
    ) -> PluginRegistry:
        """Load the built-in plugins and those in `extra_dirs`.

        `secrets` is the provisioner's secrets file, `{provider_name: {field: value}}` with named
        secrets under `@secrets` and each tenant's own entries under `@tenants` (domain/secrets.py).
        `work_dir` holds plugin state and the key directory; without it a temporary directory
        is used and removed by `aclose`. Raises PluginError naming the file and the field.
        """
        if not isinstance(secrets, ProvisionerSecrets):
            try:
                secrets = ProvisionerSecrets.of(secrets or {})
            except SecretsFileError as err:
                raise PluginError(str(err)) from None
        owns = work_dir is None
        # Absolute: plugins hand these paths to programs run elsewhere (ansible-playbook runs in its
        # own directory, and `muster up` gives a relative --work-dir).
        root = Path(tempfile.mkdtemp(prefix="muster-provisioner-")) if work_dir is None else Path(work_dir).absolute()
        try:
            root.mkdir(parents=True, exist_ok=True)
            key_dir = root / "keys"
            key_dir.mkdir(mode=0o700, exist_ok=True)
            os.chmod(key_dir, 0o700)
            loaded: dict[tuple[PluginType, str], LoadedPlugin] = {}
            folders = plugin_folders(BUILTIN_DIR) + [f for d in extra_dirs for f in plugin_folders(Path(d))]
            for folder in folders:
                path = folder / DESCRIPTOR_FILE
                descriptor = load_descriptor(path)
                key = (descriptor.type, descriptor.name)
                if key in loaded:
                    raise PluginError(
                        f"{path}: field 'name': {descriptor.type.value} plugin {descriptor.name!r} "
                        f"is already defined by {loaded[key].path}"
                    )
                plugin_cls = _import_entry_point(folder, descriptor, path)
                state_dir = root / "plugins" / descriptor.type.value / descriptor.name
                state_dir.mkdir(parents=True, exist_ok=True)
                try:
                    instance = plugin_cls(descriptor, PluginEnv(state_dir=state_dir, key_dir=key_dir))
                except Exception as err:  # noqa: BLE001
                    raise PluginError(
                        f"{path}: field 'entry_point': {descriptor.entry_point!r} failed to start: "
                        f"{type(err).__name__}: {err}"
                    ) from None
                loaded[key] = LoadedPlugin(descriptor, path, instance)
        except BaseException:
            if owns:
                shutil.rmtree(root, ignore_errors=True)
            raise
        log.info("plugins loaded", plugins=[f"{t.value}:{n}" for t, n in loaded], work_dir=str(root))
        return cls(list(loaded.values()), secrets, root, owns)

    # ------------------------------------------------------------------ queries

    @property
    def secrets(self) -> ProvisionerSecrets:
        return self._secrets

    def describe(self) -> list[dict[str, Any]]:
        """Name, type, version, actions and fields (never values) of every plugin."""
        return [p.descriptor.describe() for _, p in sorted(self._plugins.items())]

    def get(self, kind: PluginType, name: str) -> Plugin | None:
        loaded = self._plugins.get((kind, name))
        return loaded.instance if loaded else None

    def provider(self, name: str) -> ProviderPlugin | None:
        plugin = self.get(PluginType.PROVIDER, name)
        return plugin if isinstance(plugin, ProviderPlugin) else None

    def automator(self, name: str) -> AutomatorPlugin | None:
        plugin = self.get(PluginType.AUTOMATOR, name)
        return plugin if isinstance(plugin, AutomatorPlugin) else None

    def _names(self, kind: PluginType) -> list[str]:
        return sorted(name for t, name in self._plugins if t is kind)

    # ------------------------------------------------------------------ execution

    def masker(self, task: TaskMessage, revealed: Iterable[Any] = ()) -> Masker:
        """The secret values to hide from anything this task returns (`revealed`: the named
        secrets its references were resolved to)."""
        loaded = self._plugins.get((PluginType.PROVIDER, task.provider.providertype))
        declared = loaded.descriptor.fields if loaded else {}
        secret_fields = self._secrets.provider(task.tenant, task.provider.name)
        values: list[Any] = [v for k, v in secret_fields.items() if k not in declared or declared[k].sensitive]
        values += [v for k, v in task.provider.fields.items() if k in declared and declared[k].sensitive]
        return Masker([*values, *revealed])

    def resolve(self, task: TaskMessage) -> tuple[TaskMessage, list[Any]]:
        """The task with every `secret://<name>` in its cluster config, provider fields and
        service action fields replaced by the named secret from this provisioner's secrets file
        (the task's tenant's own `@secrets`, else the shared ones), and the values revealed. Only
        here, on the worker, just before the plugin runs, does a secret meet the task. ValueError
        names a secret the task's tenant lacks."""
        named = self._secrets.named(task.tenant)
        parts: dict[str, Any] = {"config": task.config, "provider": task.provider.fields,
                                 "service": task.service.action.fields if task.service else {}}
        wanted = set().union(*(references(v) for v in parts.values()))
        if not wanted:
            return task, []
        if why := self._secrets.lacks(task.tenant, wanted):
            raise SecretLacking(why)
        update: dict[str, Any] = {"config": resolved(task.config, named),
                                  "provider": task.provider.model_copy(update={"fields": resolved(task.provider.fields, named)})}
        if task.service is not None:
            action = task.service.action.model_copy(update={"fields": resolved(task.service.action.fields, named)})
            update["service"] = task.service.model_copy(update={"action": action})
        return task.model_copy(update=update), [named[n] for n in sorted(wanted)]

    async def execute(self, task: TaskMessage) -> TaskOutcome:
        """Run one task. Never raises for a plugin or action failure; enforces `task.timeout_s`."""
        if self._closed:
            raise RuntimeError("the plugin registry is closed")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + task.timeout_s
        started = time.perf_counter()
        timeout = asyncio.timeout_at(deadline)
        early: TaskOutcome | None = None
        try:
            task, revealed = self.resolve(task)
        except SecretLacking as err:
            revealed = []
            early = failed(str(err), permanent=not await self._may_be_elsewhere(task))
        except ValueError as err:
            revealed = []
            early = failed(str(err))
        masker = self.masker(task, revealed)
        progress = _masked(current_progress.get(), masker)
        # The plugin's span (a traced task's) ends with the masked outcome: a secret the plugin
        # put in its error, or in an exception's message, is not exported with it.
        traced = early is None and tracing.enabled()
        with tracer.nested(f"plugin {_plugin_of(task)}", plugin=_plugin_of(task), action=task.action.value) if traced \
                else nullcontext() as span:
            try:
                async with timeout:
                    outcome = early if early is not None else await self._dispatch(task, deadline, progress)
            except TimeoutError:
                if not timeout.expired():
                    outcome = failed("plugin error: TimeoutError (a timeout inside the plugin)")
                else:
                    # A create cut off mid-way may have made its machine.
                    outcome = failed(f"{task.action.value} timed out after {task.timeout_s:g} s",
                                     may_have_made=task.action is Action.CREATE)
            except Exception as err:  # noqa: BLE001 - a plugin bug fails the task, not the worker
                outcome = failed(f"plugin error: {type(err).__name__}: {err}")
            if not isinstance(outcome, TaskOutcome):
                outcome = failed(f"plugin error: returned {type(outcome).__name__}, not a TaskOutcome")
            outcome = masker.outcome(outcome)
            if not outcome.ok:
                tracing.set_error(span, outcome.error or "failed")
        trimmed = {
            "stdout": trim_output(outcome.stdout),
            "stderr": trim_output(outcome.stderr),
            "error": trim_output(outcome.error or ("" if outcome.ok else "failed without an error message")),
        }
        if any(getattr(outcome, k) is not v for k, v in trimmed.items()):  # (a copy only when one changed)
            outcome = outcome.model_copy(update=trimmed)
        log.info(
            "task executed",
            task_id=task.task_id,
            action=task.action.value,
            ok=outcome.ok,
            error=outcome.error or None,
            seconds=round(time.perf_counter() - started, 4),
        )
        return outcome

    async def _may_be_elsewhere(self, task: TaskMessage) -> bool:
        """A secret this provisioner lacks is permanent (no retry mends it: the file is read at
        start) unless a retry may reach a provisioner that has not tried the task, whose file
        may have it (decision 0039)."""
        if self.elsewhere is None:
            return False
        try:
            return await self.elsewhere(task)
        except Exception as err:  # noqa: BLE001 - unknown: retried, which costs attempts, not the job
            log.warning("provisioner presence not read; the task is retried", task_id=task.task_id, error=str(err) or type(err).__name__)
            return True

    async def _dispatch(self, task: TaskMessage, deadline: float, progress: Progress) -> TaskOutcome:
        action = task.action
        if action in PROVIDER_ACTIONS:
            return await self._run_provider(task, deadline, progress)
        if action is Action.BOOTSTRAP:
            return await self._run_bootstrap(task, deadline, progress)
        if task.service is None:
            return failed(f"{action.value} task {task.task_id} has no service")
        name = task.service.action.type
        loaded = self._plugins.get((PluginType.AUTOMATOR, name))
        if loaded is None:
            return failed(
                f"no automator plugin {name!r} on this provisioner "
                f"(automators: {', '.join(self._names(PluginType.AUTOMATOR)) or 'none'})"
            )
        if action not in loaded.descriptor.actions:
            return failed(f"automator {name!r} does not handle {action.value!r}")
        try:
            fields = loaded.descriptor.resolve(task.service.action.fields)
        except ValueError as err:
            # The catalog's fields, checked the same way on every provisioner: a retry fails the same.
            return failed(f"service {task.service.name!r} action {action.value!r}: {err}", permanent=True)
        assert isinstance(loaded.instance, AutomatorPlugin)
        return await loaded.instance.run(action, PluginContext(task, fields, deadline, progress))

    async def _run_provider(self, task: TaskMessage, deadline: float, progress: Progress) -> TaskOutcome:
        name = task.provider.providertype
        loaded = self._plugins.get((PluginType.PROVIDER, name))
        if loaded is None:
            return failed(
                f"no provider plugin {name!r} on this provisioner "
                f"(providers: {', '.join(self._names(PluginType.PROVIDER)) or 'none'})"
            )
        if task.action not in loaded.descriptor.actions:
            return failed(f"provider {name!r} does not handle {task.action.value!r}")
        values = {**task.provider.fields, **self._secrets.provider(task.tenant, task.provider.name)}
        try:
            fields = loaded.descriptor.resolve(values)
        except ValueError as err:
            return failed(f"provider {task.provider.name!r} ({name}): {err}", permanent=True)  # (as an action's fields)
        plugin = loaded.instance
        assert isinstance(plugin, ProviderPlugin)
        ctx = PluginContext(task, fields, deadline, progress)
        if task.action is Action.CREATE:
            return await plugin.create(ctx)
        if task.action is Action.CONFIRM:
            return await plugin.confirm(ctx)
        return await plugin.delete(ctx)

    async def _run_bootstrap(self, task: TaskMessage, deadline: float, progress: Progress) -> TaskOutcome:
        merged: dict[str, Any] = {"result": {}, "ipaddresses": {}, "hostname": ""}
        stdout: list[str] = []
        stderr: list[str] = []
        for name in task.node.automators:
            loaded = self._plugins.get((PluginType.AUTOMATOR, name))
            if loaded is None:
                return failed(
                    f"no automator plugin {name!r} on this provisioner "
                    f"(automators: {', '.join(self._names(PluginType.AUTOMATOR)) or 'none'})",
                    stdout="\n".join(stdout),
                    stderr="\n".join(stderr),
                )
            if Action.BOOTSTRAP not in loaded.descriptor.actions:
                continue  # this automator needs no bootstrap
            fields = loaded.descriptor.resolve({}, check_required=False)
            assert isinstance(loaded.instance, AutomatorPlugin)
            outcome = await loaded.instance.run(Action.BOOTSTRAP, PluginContext(task, fields, deadline, progress))
            if outcome.stdout:
                stdout.append(outcome.stdout)
            if outcome.stderr:
                stderr.append(outcome.stderr)
            if not outcome.ok:
                return outcome.model_copy(
                    update={
                        "error": f"bootstrap by {name!r}: {outcome.error}",
                        "stdout": "\n".join(stdout),
                        "stderr": "\n".join(stderr),
                    }
                )
            merged["result"].update(outcome.result)
            merged["ipaddresses"].update(outcome.ipaddresses)
            merged["hostname"] = outcome.hostname or merged["hostname"]
        return TaskOutcome(ok=True, stdout="\n".join(stdout), stderr="\n".join(stderr), **merged)

    # ------------------------------------------------------------------ shutdown

    async def aclose(self) -> None:
        """Close every plugin (stops localhost SSH servers...); remove a temporary work dir."""
        if self._closed:
            return
        self._closed = True
        for key, loaded in sorted(self._plugins.items(), reverse=True):
            try:
                await loaded.instance.aclose()
            except Exception as err:  # noqa: BLE001 - close the others anyway
                log.warning("plugin close failed", plugin=f"{key[0].value}:{key[1]}", error=str(err))
        if self._owns_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)
