"""ansible-runner's events, read as they come: one output line per task result (each also reported
at once as the attempt's progress), the first failure (its task and host), the playbook's
`set_stats` data, ansible's own error text, and whether no retry can mend the failure.

`permanent`: ansible refused the playbook before it started (its YAML, a role or module it
cannot find: the same files fail the same way), the node's host key is not the recorded one, or
the playbook says so of the task that failed: the task's command exited 78 (PERMANENT_EXIT, as a
shell automator's script does), or the playbook set `set_stats: {data: {muster_permanent: ...}}`
before it failed. A host that does not answer, any other task that fails, or an error ansible
does not place in the playbook's files may pass."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

from services.provisioner.plugins.base import PERMANENT_EXIT

MESSAGE_LIMIT = 300
_ERROR = re.compile(r"^\s*(\[ERROR\]:|ERROR!)\s*")
"""ansible-core 2.19 writes `[ERROR]: ...`; earlier versions `ERROR! ...`."""
_ORIGIN = re.compile(r"^\s*Origin:\s*(\S+)")
"""The file (and line) an error is about, on the line after it (2.19)."""
_REFUSED_LOGIN = re.compile(r"IDENTIFICATION HAS CHANGED|Host key verification failed")
"""ssh's words for a host key that is not the recorded one. (A client key refused is not
permanent: a machine still booting refuses it until its key is written, ssh.py.)"""


def _message(res: Any) -> str:
    if not isinstance(res, dict):
        return ""
    texts = {key: str(res.get(key) or "").strip().replace("\n", " ") for key in ("msg", "stderr", "module_stderr", "reason")}
    text = next((t for t in texts.values() if t), "")
    if not text and res.get("attempts"):  # an `until` that ran out: ansible gives no message of its own
        last = str(res.get("stdout") or "").strip().splitlines()[-3:]
        text = (f"its until condition still did not hold after {res['attempts']} attempts"
                + (f"; its last output: {' '.join(line.strip() for line in last)}" if last else ""))
    if texts["msg"] and texts["stderr"] and res.get("rc") not in (None, 0):
        text = f"{texts['msg']}: {texts['stderr']}"  # a command's msg is only "non-zero return code": its stderr says why
    return text[:MESSAGE_LIMIT]


class AnsibleLog:
    def __init__(self, progress: Callable[[str], None] | None = None) -> None:
        self.progress = progress
        """Told each line as it comes (`PluginContext.progress`: it never blocks)."""
        self._lock = threading.Lock()  # ansible-runner calls the handler from its own thread
        self.lines: list[str] = []
        self.errors: list[str] = []
        self.failure = ""
        self.running = ""
        self.last_message = ""
        self.stats: dict[str, Any] = {}
        self.started = False
        """The playbook started (it was read and its roles and modules found)."""
        self.origin = ""
        """The playbook or role file (path:line:col) ansible's first error is about."""
        self.refused_login = False
        self.failed_task = False
        """The failure is a task's (not an unreachable host, not ansible's own error)."""
        self.exit_permanent = False
        """That task's command exited PERMANENT_EXIT."""
        self.unreachable = False
        """A host did not answer: the playbook asked nothing of it."""

    def handle(self, event: dict[str, Any]) -> bool:
        kind = str(event.get("event", ""))
        data = event.get("event_data") or {}
        task, host = str(data.get("task", "")), str(data.get("host", ""))
        res = data.get("res") or {}
        with self._lock:
            if kind == "playbook_on_start":
                self.started = True
            elif kind == "playbook_on_task_start":
                self.running = task
            elif kind == "runner_on_ok":
                state = "changed" if isinstance(res, dict) and res.get("changed") else "ok"
                self._line(f"{state}: [{host}] {task}", _message(res) if task == "debug" or "msg" in res else "")
            elif kind == "runner_on_skipped":
                self._add(f"skipping: [{host}] {task}")
            elif kind == "runner_on_failed":
                message = _message(res)
                ignored = bool(data.get("ignore_errors"))
                self._line(f"failed: [{host}] {task}" + (" (ignored)" if ignored else ""), message)
                if not ignored and not self.failure:
                    self.failure = f"ansible task '{task}' failed on {host}: {message or 'no message'}"
                    self.failed_task = True
                    self.exit_permanent = isinstance(res, dict) and res.get("rc") == PERMANENT_EXIT
            elif kind == "runner_on_unreachable":
                message = _message(res)
                self.unreachable = True
                self.refused_login = self.refused_login or bool(_REFUSED_LOGIN.search(message))
                if "IDENTIFICATION HAS CHANGED" in message or "Host key verification failed" in message:
                    message = "host key verification failed: the node's key is not the one recorded for it"
                self._line(f"unreachable: [{host}] {task}", message)
                if not self.failure:
                    self.failure = f"ansible could not reach {host} in task '{task}': {message or 'no message'}"
            elif kind == "playbook_on_stats":
                artifact = data.get("artifact_data") or {}
                self.stats = dict(artifact) if isinstance(artifact, dict) else {}
                self._add("recap: " + ", ".join(f"{k}={sum((data.get(k) or {}).values())}"
                                                        for k in ("ok", "changed", "failures", "skipped", "dark")))
            elif kind in ("verbose", "error", "warning"):
                self._error_text(str(event.get("stdout", "")))
        return True  # keep the event in ansible-runner's artifacts

    def _error_text(self, text: str) -> None:
        if _ERROR.search(text):
            self.errors.append(text.strip())
            if not self.failure:
                self.failure = "ansible: " + _ERROR.sub("", text.strip(), count=1).replace("\n", " ")[:MESSAGE_LIMIT]
        elif (origin := _ORIGIN.search(text)) and self.errors and not self.origin:
            self.errors.append(text.strip())
            self.origin = origin.group(1)
            if self.failure.startswith("ansible: "):
                self.failure += f" (in {self.origin})"

    @property
    def said_permanent(self) -> str:
        """Why the playbook says its failed task cannot pass on a retry ('' if it does not)."""
        if not self.failed_task:
            return ""
        if self.exit_permanent:
            return f"exit status {PERMANENT_EXIT}: permanent, not retried"
        marker = self.stats.get("muster_permanent")
        if marker is None or marker is False or str(marker).strip().lower() in ("", "false", "no", "0", "off"):
            return ""
        reason = "" if marker is True or str(marker).strip().lower() in ("true", "yes", "1", "on") else str(marker).strip()
        return "permanent, not retried" + (f": {reason[:MESSAGE_LIMIT]}" if reason else "")

    @property
    def permanent(self) -> bool:
        """Ansible refused the playbook's own files before it started, or the node the login, or
        the playbook said so (`said_permanent`)."""
        return self.refused_login or (not self.started and bool(self.origin)) or bool(self.said_permanent)

    def _line(self, head: str, message: str) -> None:
        self._add(f"{head}: {message}" if message else head)
        if message:
            self.last_message = message

    def _add(self, line: str) -> None:
        self.lines.append(line)
        if self.progress is not None:
            self.progress(line)

    def text(self) -> str:
        with self._lock:
            return "\n".join(self.lines) + ("\n" if self.lines else "")

    def stderr(self) -> str:
        with self._lock:
            return "\n".join(self.errors)
