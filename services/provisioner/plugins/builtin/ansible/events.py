"""ansible-runner's events, read as they come: one output line per task result (each also reported
at once as the attempt's progress), the first failure (its task and host), the playbook's
`set_stats` data, and ansible's own error text."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

MESSAGE_LIMIT = 300


def _message(res: Any) -> str:
    if not isinstance(res, dict):
        return ""
    texts = {key: str(res.get(key) or "").strip().replace("\n", " ") for key in ("msg", "stderr", "module_stderr", "reason")}
    text = next((t for t in texts.values() if t), "")
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

    def handle(self, event: dict[str, Any]) -> bool:
        kind = str(event.get("event", ""))
        data = event.get("event_data") or {}
        task, host = str(data.get("task", "")), str(data.get("host", ""))
        res = data.get("res") or {}
        with self._lock:
            if kind == "playbook_on_task_start":
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
            elif kind == "runner_on_unreachable":
                message = _message(res)
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
            elif kind in ("verbose", "error", "warning") and "ERROR!" in str(event.get("stdout", "")):
                text = str(event.get("stdout", "")).strip()
                self.errors.append(text)
                if not self.failure:
                    self.failure = "ansible: " + text.replace("\n", " ")[:MESSAGE_LIMIT]
        return True  # keep the event in ansible-runner's artifacts

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
