"""The ansible automator: a service action runs a playbook (or a role) against the node over SSH.

ansible-runner drives ansible-playbook (ansible-core, pinned) in a thread; the inventory is the one
node, reached as its provider recorded it: address, port, user, client key, and the recorded host
key in a known_hosts file of the task's own (StrictHostKeyChecking=yes: there is no accept-any mode).
Each Ansible task's result is a line of the attempt's output, reported as it comes (the attempt's
progress: the console shows it live); a failure names the failing task and
host. `status` answers from the playbook's `set_stats: {data: {muster_status: running|stopped|failed}}`,
else from whether the playbook succeeded. A playbook says its failure is permanent with a command
that exits `{{ muster.exit_permanent }}` or `set_stats: {data: {muster_permanent: why}}` (events.py).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from contracts.catalog import Action
from contracts.tasks import TaskOutcome
from muster import tracing
from muster.macros import MacroError, Scope, expand
from services.provisioner.plugins.base import PERMANENT_EXIT, AutomatorPlugin, PluginContext, failed, succeeded
from services.provisioner.plugins.ssh import SshError, resolve_key_path, target_from_results

from .events import AnsibleLog

tracer = tracing.Tracer("muster.provisioner")
PATH_ENV = "MUSTER_PLAYBOOK_PATH"
"""Directories (`:`-separated) where the provisioner looks for relative playbook and role names."""


def search_dirs(ctx: PluginContext) -> list[Path]:
    """Absolute: ansible-playbook runs in a directory of its own, where a relative roles path
    would name nothing."""
    dirs = [Path(str(ctx.fields["playbook_dir"])).expanduser()] if ctx.fields.get("playbook_dir") else []
    dirs += [Path(p).expanduser() for p in os.environ.get(PATH_ENV, "").split(":") if p]
    return [d.absolute() for d in dirs] + [Path.cwd()]


class PlaybookNotFound(FileNotFoundError):
    """The catalog names a playbook no search directory holds: permanent (the same directories
    are searched on a retry; every provisioner of a tenant is deployed with the same playbooks)."""


def find_playbook(ctx: PluginContext, name: str) -> Path:
    path = Path(name).expanduser()
    candidates = [path] if path.is_absolute() else [d / path for d in search_dirs(ctx)]
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    # What to do, with where it looked: a $MUSTER_PLAYBOOK_PATH exported after `muster up` started
    # (or not at all) left only the provisioner's working directory, and the message said no more.
    dirs = os.environ.get(PATH_ENV)
    hint = ("" if dirs.strip(":") else f"; ${PATH_ENV} is empty") if dirs is not None else f"; ${PATH_ENV} is not set"
    raise PlaybookNotFound(f"playbook {name!r} not found (looked in: {', '.join(str(c.parent) for c in candidates)}{hint}): "
                           f"put it in one of them, or name its directory in the action's playbook_dir or in the "
                           f"provisioner's ${PATH_ENV} (its environment when it starts: `{PATH_ENV}=DIR muster up`)")


def ansible_playbook() -> str:
    beside = Path(sys.executable).parent / "ansible-playbook"  # the one pinned in this environment
    found = str(beside) if beside.is_file() else shutil.which("ansible-playbook")
    if not found:
        raise FileNotFoundError("ansible-playbook not found: install ansible-core in the provisioner's environment")
    return found


def muster_vars(ctx: PluginContext) -> dict[str, Any]:
    """What every playbook gets as `muster`: this node, every node, the cluster's config."""
    task = ctx.task
    return {
        "cluster_id": task.cluster_id, "tenant": task.tenant, "action": task.action.value,
        "service": task.service.name if task.service else None,
        "node": {"id": task.node.id, "hostname": task.node.hostname, "ip": task.node.ipaddresses.get("access_v4", ""),
                 "services": task.node.services},
        "nodes": {n.id: {"hostname": n.hostname, "ip": n.ipaddresses.get("access_v4", ""), "services": n.services}
                  for n in task.nodes.values()},
        "config": task.config,
        # A command of the playbook that exits with it says no retry can mend its failure.
        "exit_permanent": PERMANENT_EXIT,
    }


class AnsibleAutomator(AutomatorPlugin):
    async def run(self, action: Action, ctx: PluginContext) -> TaskOutcome:
        what = f"{ctx.task.service.name} {action.value}" if ctx.task.service else action.value
        playbook_name, role = str(ctx.fields.get("playbook") or ""), str(ctx.fields.get("role") or "")
        if bool(playbook_name) == bool(role):
            return failed(f"{what}: the ansible automator needs a 'playbook' or a 'role' (one of them)", permanent=True)
        user_vars = ctx.fields.get("vars") or {}
        if not isinstance(user_vars, Mapping):
            return failed(f"{what}: field 'vars' must be a JSON object", permanent=True)
        try:  # the cluster config's macros, in the variables too (%ip.service.x%, ...)
            task = ctx.task
            user_vars = expand(dict(user_vars), Scope(task.node, {**task.nodes, task.node.id: task.node}, task.cluster_owner))
        except MacroError as err:  # not permanent: a node's address may be unknown yet
            return failed(f"{what}: field 'vars': {err}")
        try:
            target = target_from_results(ctx.results, ctx.node.ipaddresses, self.env.key_dir, ctx.node.sshuser)
            key_path = resolve_key_path(str((ctx.results.get("ssh-auth") or {}).get("identityfile")), self.env.key_dir)
            binary = ansible_playbook()
            playbook = find_playbook(ctx, playbook_name) if playbook_name else None
        except SshError as err:
            return failed(f"{what}: {err}", permanent=err.permanent)
        except FileNotFoundError as err:  # no ansible-playbook here is this provisioner's lack: not permanent
            return failed(f"{what}: {err}", permanent=isinstance(err, PlaybookNotFound))
        self.env.state_dir.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="run-", dir=self.env.state_dir))
        sockets = Path(tempfile.mkdtemp(prefix="mu-ssh-"))  # a socket path has at most 107 bytes
        try:
            known_hosts = work / "known_hosts"
            host = target.host if target.port == 22 else f"[{target.host}]:{target.port}"
            known_hosts.write_text("".join(f"{host} {key}\n" for key in target.host_keys))
            inventory = {"all": {"hosts": {ctx.node.id: {
                "ansible_host": target.host, "ansible_port": target.port, "ansible_user": target.user,
                "ansible_ssh_private_key_file": str(key_path),
                "ansible_python_interpreter": str(ctx.fields.get("python") or "/usr/bin/python3"),
                "ansible_ssh_common_args": f"-o UserKnownHostsFile={known_hosts} -o GlobalKnownHostsFile=/dev/null "
                                           "-o StrictHostKeyChecking=yes -o IdentitiesOnly=yes -o IdentityAgent=none",
            }}}}
            log = AnsibleLog(ctx.progress)
            cancelled = threading.Event()
            limit = max(1, int(min(float(ctx.fields.get("timeout_s") or ctx.remaining()), ctx.remaining())))
            kwargs: dict[str, Any] = dict(
                private_data_dir=str(work), inventory=inventory, quiet=True, timeout=limit,
                extravars={**dict(user_vars), "muster": muster_vars(ctx)},
                event_handler=log.handle, cancel_callback=cancelled.is_set,
                envvars={"PATH": f"{Path(binary).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}", "ANSIBLE_NOCOLOR": "1", "ANSIBLE_RETRY_FILES_ENABLED": "0", "ANSIBLE_PIPELINING": "1",
                         "ANSIBLE_HOST_KEY_CHECKING": "1", "ANSIBLE_LOCALHOST_WARNING": "0",
                         "ANSIBLE_LOCAL_TEMP": str(work / "tmp"), "ANSIBLE_SSH_CONTROL_PATH_DIR": str(sockets),
                         # one connection for the run's tasks, gone soon after it
                         "ANSIBLE_SSH_ARGS": "-C -o ControlMaster=auto -o ControlPersist=2s"},
                cmdline="--check --diff" if ctx.fields.get("check_mode") else None,
            )
            if playbook is not None:
                kwargs.update(playbook=str(playbook), project_dir=str(playbook.parent))
            else:
                # One ':'-separated string: ansible-runner appends its own directory to it with `+=`.
                dirs = search_dirs(ctx)
                kwargs.update(role=role, role_skip_facts=not ctx.fields.get("gather_facts"),
                              roles_path=":".join([str(d / "roles") for d in dirs] + [str(d) for d in dirs]))
            try:
                # Its own span, naming the playbook or role and the host (never a variable's value).
                with tracer.nested("ansible run", **{"ansible.playbook": playbook_name or None, "ansible.role": role or None,
                                                    "ssh.host": target.host}) as span:
                    status, rc, raw = await asyncio.to_thread(_run, kwargs)
                    tracing.set_attributes(span, **{"ansible.status": status, "ansible.rc": rc})
                    if status != "successful":
                        tracing.set_error(span, f"ansible-playbook {status} (rc {rc})")
            except asyncio.CancelledError:
                cancelled.set()  # ansible-runner stops the playbook at its next check
                raise
        finally:
            await asyncio.to_thread(shutil.rmtree, work, True)
            await asyncio.to_thread(shutil.rmtree, sockets, True)
        return outcome(what, action, status, rc, log, raw)


def _run(kwargs: dict[str, Any]) -> tuple[str, int | None, str]:
    """(status, exit status, ansible's own output): read before the task's directory goes."""
    import ansible_runner  # imported on first use: it is heavy and only this plugin needs it

    runner = ansible_runner.run(**kwargs)
    try:
        with runner.stdout as out:  # (a new file each time it is asked for)
            text = out.read()
    except (OSError, AttributeError):
        text = ""
    return str(runner.status), runner.rc, text


def outcome(what: str, action: Action, status: str, rc: int | None, log: AnsibleLog, raw: str = "") -> TaskOutcome:
    stdout = log.text()
    # A node ansible could not reach says nothing of its service: the status task fails (the state
    # is unknown, as the shell automator's), where "failed" had a repair reinstall it over a dead ssh.
    if action is Action.STATUS and status in ("successful", "failed") and not log.unreachable:
        state = log.stats.get("muster_status") or ("running" if status == "successful" else "failed")
        return succeeded({"state": str(state), "detail": log.last_message or f"playbook {status}"}, stdout=stdout)
    if status == "successful":
        return succeeded(stdout=stdout)
    if status == "timeout":
        return failed(f"{what}: ansible timed out" + (f" in task '{log.running}'" if log.running else ""), stdout=stdout)
    last = [line for line in raw.strip().splitlines() if line.strip() and "error" in line.lower()][-2:]
    reason = log.failure or f"ansible-playbook {status} (exit status {rc})" + (": " + " / ".join(last) if last else "")
    permanent = status == "failed" and log.permanent
    if permanent and (said := log.said_permanent):
        reason += f" ({said})"
    return failed(f"{what}: {reason}", stdout=stdout or raw, stderr=log.stderr(), permanent=permanent)
