"""The interface between the provisioner and its plugins.

A provider plugin creates, confirms and deletes machines; an automator plugin runs a service
action (or bootstrap) on a node. Both get a `PluginContext` and return a `TaskOutcome`;
a failure of the action is `ok=False` with an `error`, not an exception. Anything a plugin
raises is turned into a failed outcome by the registry, with secrets masked.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contracts.catalog import Action
from contracts.tasks import NodeInfo, TaskMessage, TaskOutcome

from .descriptor import PluginDescriptor


@dataclass(frozen=True)
class PluginEnv:
    """Where a plugin may keep things on the provisioner's machine."""

    state_dir: Path
    """This plugin's own directory (created): `<work_dir>/plugins/<type>/<name>`."""
    key_dir: Path
    """The provisioner's key directory (mode 0700), shared by plugins: SSH client keys live here,
    and results name a key by its path relative to this directory (never the key itself)."""


@dataclass(frozen=True)
class PluginContext:
    """Everything one task gives one plugin."""

    task: TaskMessage
    fields: Mapping[str, Any]
    """Field values, parsed and defaulted by the descriptor. A provider gets the task's provider
    fields merged with its secrets; an automator gets the service action's fields (none for
    bootstrap). Never copy sensitive ones into an outcome."""
    deadline: float
    """`loop.time()` by which the task must be done (the registry also enforces it)."""
    progress: Callable[[str], None] = field(default=lambda line: None)
    """Report one line of output while the task runs (an Ansible task's result...): it reaches
    the log as `TaskProgressed` and the console at once. Callable from any thread, returns at
    once, never fails; secrets are masked, lines bounded in number, rate and length (the
    outcome's `stdout` remains the whole output). docs/plugins.md, "Progress"."""

    @property
    def action(self) -> Action:
        return self.task.action

    @property
    def node(self) -> NodeInfo:
        return self.task.node

    @property
    def results(self) -> Mapping[str, Any]:
        """This node's accumulated results from earlier tasks (providerid, ssh-auth, ...)."""
        return self.task.results

    @property
    def providerid(self) -> str | None:
        value = self.task.results.get("providerid")
        return str(value) if value is not None else None

    def remaining(self) -> float:
        """Seconds left before the deadline (never negative)."""
        return max(0.0, self.deadline - asyncio.get_running_loop().time())


class Plugin(ABC):  # noqa: B024 - the abstract methods are ProviderPlugin's and AutomatorPlugin's
    """Common base: one instance per plugin per provisioner process, shared by all tasks."""

    def __init__(self, descriptor: PluginDescriptor, env: PluginEnv) -> None:
        self.descriptor = descriptor
        self.env = env

    async def aclose(self) -> None:  # noqa: B027 - optional: most plugins start nothing
        """Stop whatever this plugin started. Called once when the provisioner stops."""


class ProviderPlugin(Plugin):
    """Creates, confirms and deletes machines (Coopr's `Coopr::Plugin::Provider`).

    Conventions for `TaskOutcome.result` (merged into the node's results, written to the log):
    `providerid` (create), `ssh-auth` `{user, identityfile}` where identityfile is a key path
    relative to `PluginEnv.key_dir` or absolute, `ssh_port`, and `ssh_host_keys`
    `{algorithm: "algorithm base64"}` (confirm). Addresses go in `TaskOutcome.ipaddresses`
    (`access_v4`, `bind_v4`). Delete must succeed for an id it does not know (a retry may land
    on another process after the first attempt deleted the machine).
    """

    @abstractmethod
    async def create(self, ctx: PluginContext) -> TaskOutcome: ...

    @abstractmethod
    async def confirm(self, ctx: PluginContext) -> TaskOutcome: ...

    @abstractmethod
    async def delete(self, ctx: PluginContext) -> TaskOutcome: ...


class AutomatorPlugin(Plugin):
    """Runs service actions and bootstrap on a node (Coopr's `Coopr::Plugin::Automator`).

    Reads what it needs about the machine from `ctx.results` (ssh-auth, ssh_port,
    ssh_host_keys) and `ctx.node.ipaddresses`.
    """

    @abstractmethod
    async def run(self, action: Action, ctx: PluginContext) -> TaskOutcome: ...


PERMANENT_EXIT = 78
"""The exit status by which a script (the shell automator's) or a command of a playbook (the
ansible automator's) says no retry can mend its failure (sysexits' EX_CONFIG: a configuration it
refuses fails the same way every time). Not 1 or 2, which any failing command returns, nor
126/127 (a command not installed yet may be on a later attempt)."""


def failed(error: str, *, stdout: str = "", stderr: str = "", may_have_made: bool = False, permanent: bool = False,
           **result: Any) -> TaskOutcome:
    """`may_have_made`: a create that failed after asking the cloud for the machine, whose answer
    was lost: the job's rollback deletes the node. `permanent`: no retry can succeed (refused
    credentials, an unknown image): the planner does not try again (docs/plugins.md)."""
    return TaskOutcome(ok=False, error=error, stdout=stdout, stderr=stderr, result=result, may_have_made=may_have_made,
                       permanent=permanent)


def succeeded(
    result: Mapping[str, Any] | None = None,
    *,
    ipaddresses: Mapping[str, str] | None = None,
    hostname: str = "",
    stdout: str = "",
    stderr: str = "",
) -> TaskOutcome:
    return TaskOutcome(
        ok=True,
        result=dict(result or {}),
        ipaddresses=dict(ipaddresses or {}),
        hostname=hostname,
        stdout=stdout,
        stderr=stderr,
    )
