"""What each attempt of a job's tasks said (`muster logs`): a pure fold of the job's events.

An attempt's outcome (`TaskSucceeded`, `TaskFailed`) carries its whole stdout and stderr; while
it runs, its plugin's lines (`TaskProgressed`, rate-bounded, docs/plugins.md "Progress") are
what there is. So an ended attempt shows its outcome's output, a running one its lines so far.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from contracts.events import TaskClaimed, TaskFailed, TaskProgressed, TaskSucceeded
from contracts.records import Recorded


@dataclass
class AttemptOutput:
    task_id: str
    attempt: int
    state: str = "running"
    """running, succeeded or failed."""
    runs_on: str = ""
    """provisioner/worker."""
    error: str = ""
    stdout: str = ""
    stderr: str = ""
    lines: list[str] = field(default_factory=list)
    """The plugin's lines while it ran (and `… N lines left out` where the rate bound skipped)."""

    def to_json(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "attempt": self.attempt, "state": self.state, "runs_on": self.runs_on,
                "error": self.error, "stdout": self.stdout, "stderr": self.stderr, "lines": self.lines}


def attempt_outputs(events: Iterable[Recorded], task_id: str | None = None) -> list[AttemptOutput]:
    """Every attempt of the job's tasks (or of `task_id`) that a provisioner took, in the order
    they were claimed."""
    found: dict[tuple[str, int], AttemptOutput] = {}

    def of(task: str, attempt: int) -> AttemptOutput:
        return found.setdefault((task, attempt), AttemptOutput(task, attempt))

    for r in events:
        e = r.event
        if not isinstance(e, (TaskClaimed, TaskProgressed, TaskSucceeded, TaskFailed)) or (task_id and e.task_id != task_id):
            continue
        out = of(e.task_id, e.attempt)
        if isinstance(e, TaskProgressed):
            if e.skipped:
                out.lines.append(f"… {e.skipped} line{'s' if e.skipped != 1 else ''} left out")
            out.lines.append(e.line)
            continue
        out.runs_on = e.worker if e.worker.startswith(f"{e.provisioner}/") else f"{e.provisioner}/{e.worker}"
        if isinstance(e, (TaskSucceeded, TaskFailed)):
            out.state = "succeeded" if isinstance(e, TaskSucceeded) else "failed"
            out.stdout, out.stderr = e.stdout, e.stderr
            out.error = e.error if isinstance(e, TaskFailed) else ""
    return list(found.values())


def render(outputs: list[AttemptOutput]) -> list[str]:
    """The attempts as text: a heading line each, then its output indented (an ended attempt's
    stdout and stderr; a running one's lines so far)."""
    said: list[str] = []
    for o in outputs:
        where = f" on {o.runs_on}" if o.runs_on else ""
        said.append(f"{o.task_id} attempt {o.attempt}: {o.state}{where}" + (f": {o.error}" if o.error else ""))
        parts = [("stdout", o.stdout), ("stderr", o.stderr)] if o.state != "running" else [("so far", "\n".join(o.lines))]
        shown = [(name, text) for name, text in parts if text.strip()]
        if not shown:
            said.append("  (no output)")
        for name, text in shown:
            said.append(f"  {name}:")
            said.extend(f"    {line}" for line in text.rstrip("\n").split("\n"))
    return said
