"""The shell automator: one SSH connection per task, one command, host key verified.

The command runs in the login directory (or the `workdir` field's) with MUSTER_* variables exported and the task context
(cluster config, this node, every node) in the JSON file named by MUSTER_TASK_FILE; the compact
cluster config is also in MUSTER_CONFIG when it is small. The file is removed afterwards.
A non-zero exit fails the task with the exit status in `error`; for `status` the exit status
is the answer, as an LSB init script's (0 running, 1-2 failed, 3 stopped, else unknown).
A script that knows no retry can mend its failure exits with PERMANENT_EXIT (78, sysexits'
EX_CONFIG; exported as MUSTER_EXIT_PERMANENT): the failure is permanent, the planner does not
retry it. Any other failure may pass, and is retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import asyncssh

from contracts.catalog import Action
from contracts.tasks import TaskOutcome
from muster.readmodel.observed import LSB_STATE
from services.provisioner.plugins.base import PERMANENT_EXIT, AutomatorPlugin, PluginContext, failed, succeeded
from services.provisioner.plugins.ssh import SshCommandTimeout, SshError, connect, run, target_from_results

CONFIG_ENV_LIMIT = 32 * 1024
"""Bytes of compact cluster-config JSON still passed in MUSTER_CONFIG (the file always has it)."""
CLEANUP_TIMEOUT_S = 5.0
CLEANUP_MARGIN_S = 2.0
CONNECT_TIMEOUT_S = 10.0
"""Connecting and logging in, at most (field `connect_timeout_s`): Ansible's default too."""
SAID_LINES, SAID_LIMIT = 2, 200
"""A failed script's error ends with its last stderr lines (at most this many, and characters)."""
BOOTSTRAP_PROBE = 'echo "bootstrap: $(id -un)@$(hostname) in $PWD"'
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def task_environment(ctx: PluginContext, extra: Mapping[str, Any] | None = None) -> dict[str, str]:
    task = ctx.task
    env = {
        "MUSTER_TENANT": task.tenant,
        "MUSTER_CLUSTER_ID": task.cluster_id,
        "MUSTER_JOB_ID": task.job_id,
        "MUSTER_TASK_ID": task.task_id,
        "MUSTER_ATTEMPT": str(task.attempt),
        "MUSTER_ACTION": task.action.value,
        "MUSTER_NODE_ID": task.node.id,
        "MUSTER_HOSTNAME": task.node.hostname,
        "MUSTER_NODENUM": str(task.node.nodenum),
        "MUSTER_IP": task.node.ipaddresses.get("access_v4", ""),
        "MUSTER_SERVICES": " ".join(task.node.services),
        "MUSTER_SERVICE": task.service.name if task.service else "",
        "MUSTER_EXIT_PERMANENT": str(PERMANENT_EXIT),
    }
    config = json.dumps(task.config, separators=(",", ":"), sort_keys=True)
    if len(config.encode()) <= CONFIG_ENV_LIMIT:
        env["MUSTER_CONFIG"] = config
    for name, value in (extra or {}).items():
        env[str(name)] = value if isinstance(value, str) else json.dumps(value)
    return env


def task_document(ctx: PluginContext) -> str:
    task = ctx.task
    return json.dumps(
        {
            "tenant": task.tenant,
            "cluster_id": task.cluster_id,
            "action": task.action.value,
            "service": task.service.name if task.service else None,
            "node": task.node.model_dump(mode="json"),
            "nodes": {k: v.model_dump(mode="json") for k, v in task.nodes.items()},
            "config": task.config,
        },
        indent=1,
    )


@dataclass(frozen=True)
class RemoteCommand:
    program: str
    """The POSIX sh program run for the action."""
    cleanup: str
    """Run on the same connection after a timeout: kills the program's process group."""


def build_command(
    ctx: PluginContext, script: str, args: str, env: Mapping[str, str], workdir: str = ""
) -> RemoteCommand:
    """Write the task file from stdin, record the shell's pid, export, run, clean up, exit.

    The login shell leads its own process group (sshd and the localhost endpoints both start
    sessions), so after a timeout `kill -KILL -<pid>` stops the script and everything it started
    that did not detach. (sshd refuses SSH "signal" requests for root logins, so we cannot rely
    on them.)
    """
    safe_id = re.sub(r"[^A-Za-z0-9._-]", "_", f"{ctx.task.task_id}-{ctx.task.attempt}")
    base = f".muster/task-{safe_id}"
    exports = " ".join(f"{name}={shlex.quote(value)}" for name, value in env.items())
    body = f"{script} {args}".rstrip()
    lines = []
    if workdir:
        lines.append(f"mkdir -p {shlex.quote(workdir)} && cd {shlex.quote(workdir)} || exit 125")
    program = "\n".join(
        lines
        + [
            f"( umask 077 && mkdir -p .muster && cat > {base}.json && echo $$ > {base}.pid ) || exit 125",
            f'export {exports} MUSTER_TASK_FILE="$PWD/{base}.json"',
            "(",
            body,
            ")",
            "muster_rc=$?",
            f"rm -f {base}.json {base}.pid",
            "exit $muster_rc",
        ]
    )
    cd = f"cd {shlex.quote(workdir)} && " if workdir else ""
    cleanup = f'{cd}pid=$(cat {base}.pid 2>/dev/null) && kill -KILL -- "-$pid" 2>/dev/null; rm -f {base}.json {base}.pid'
    return RemoteCommand(program, cleanup)


class ShellAutomator(AutomatorPlugin):
    async def run(self, action: Action, ctx: PluginContext) -> TaskOutcome:
        what = f"{ctx.task.service.name} {action.value}" if ctx.task.service else action.value
        extra_env = ctx.fields.get("env") or {}
        if not isinstance(extra_env, Mapping) or not all(_ENV_NAME.match(str(k)) for k in extra_env):
            return failed(f"{what}: field 'env' must be a JSON object of environment variable names to values", permanent=True)
        # Time out a little before the task's deadline, so that there is time to kill the script.
        remaining = ctx.remaining()
        limit = remaining - min(CLEANUP_MARGIN_S, 0.1 * remaining)
        if ctx.fields.get("timeout_s"):
            limit = min(limit, float(ctx.fields["timeout_s"]))
        try:
            target = target_from_results(ctx.results, ctx.node.ipaddresses, self.env.key_dir, ctx.node.sshuser)
        except SshError as err:
            return failed(f"{what}: {err}", permanent=err.permanent)
        if action is Action.BOOTSTRAP and not ctx.fields.get("script"):
            workdir = str(ctx.fields.get("workdir") or "")
            cd = f"mkdir -p {shlex.quote(workdir)} && cd {shlex.quote(workdir)} && " if workdir else ""
            command = RemoteCommand(cd + BOOTSTRAP_PROBE, "")
            document = None
        else:
            env = task_environment(ctx, extra_env)
            command = build_command(
                ctx,
                str(ctx.fields.get("script") or ""),
                str(ctx.fields.get("args") or ""),
                env,
                str(ctx.fields.get("workdir") or ""),
            )
            document = task_document(ctx)
        deadline = asyncio.get_running_loop().time() + limit
        # A node that drops what is sent to it (its link down) answers nothing: the connect took the
        # task's whole time (71 s of a check) where a bounded one fails the attempt and lets it retry.
        connect_limit = min(limit, float(ctx.fields.get("connect_timeout_s") or CONNECT_TIMEOUT_S))
        try:
            async with await connect(target, connect_limit) as conn:
                left = max(deadline - asyncio.get_running_loop().time(), 0.001)
                try:
                    result = await run(conn, command.program, input=document, timeout=left)
                except SshCommandTimeout as err:
                    if command.cleanup:
                        with contextlib.suppress(SshCommandTimeout, asyncssh.Error, OSError):
                            await run(conn, command.cleanup, timeout=CLEANUP_TIMEOUT_S)
                    return failed(
                        f"{what}: timed out after {limit:.3g} s on {target.address}", stdout=err.stdout, stderr=err.stderr
                    )
        except SshError as err:
            return failed(f"{what}: {err}", permanent=err.permanent)
        if action is Action.STATUS:  # the exit status is the answer (LSB init scripts' status)
            state = LSB_STATE.get(result.exit_status if result.exit_status is not None else -1, "unknown")
            last = (result.stdout or "").strip().splitlines()
            return succeeded({"state": state, "detail": last[-1][:200] if last else f"exit status {result.exit_status}"},
                             stdout=result.stdout, stderr=result.stderr)
        if result.exit_status != 0:
            if result.signal:
                reason = f"killed by signal {result.signal}"
            elif result.exit_status is None:
                reason = "ended without an exit status (connection lost?)"
            elif result.exit_status == PERMANENT_EXIT:
                reason = f"exited with status {PERMANENT_EXIT} (permanent: not retried)"
            else:
                reason = f"exited with status {result.exit_status}"
            return failed(f"{what}: script {reason}{said(result.stderr)}", stdout=result.stdout, stderr=result.stderr,
                          permanent=result.exit_status == PERMANENT_EXIT and not result.signal)
        return succeeded(stdout=result.stdout, stderr=result.stderr)


def said(stderr: str | None) -> str:
    """The end of what a failed script wrote to stderr, for its error (the job's error names why, not only the exit status)."""
    last = [line.strip() for line in (stderr or "").splitlines() if line.strip()][-SAID_LINES:]
    text = " / ".join(last)
    return f": {text[:SAID_LIMIT - 1]}…" if len(text) > SAID_LIMIT else f": {text}" if text else ""
