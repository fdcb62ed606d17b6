"""What the console draws of a job (pure): its task graph and each task's attempts.

Nothing is folded here: the plans come from the read model's `JobView.graph()` and each task's
state, attempt and place from the status document (the same fold the API and `muster status`
use). This module puts them together for the page, and lists a task's attempts as the log
recorded them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contracts.records import Recorded

MAX_OUTPUT = 20_000
"""Characters of a task's stdout/stderr shown on the page (the rest is in `muster events`)."""


@dataclass
class Graph:
    tasks: list[dict[str, Any]] = field(default_factory=list)
    links: list[list[list[str]]] = field(default_factory=list)
    """Group links `[sources, targets]`: every source runs before every target."""
    stages: dict[str, list[list[str]]] = field(default_factory=dict)
    """Stages per phase (`forward`, `rollback`), as the plan events give them."""

    def to_json(self) -> dict[str, Any]:
        return {"tasks": self.tasks, "links": self.links, "stages": self.stages}


def plan_graph(plans: Mapping[str, Any], status: Mapping[str, Any] | None) -> Graph:
    """The task graph of a job's plans (`JobView.graph()`: the forward plan, the rollback being
    or last run, cleanup tasks), each task with its state, attempt and place from `status`."""
    graph = Graph()
    now = {t["id"]: t for t in (status or {}).get("tasks", ())}
    seen: set[str] = set()

    def add(t: Mapping[str, Any], phase: str, stage: int | None) -> None:
        if t["id"] in seen:
            return
        seen.add(t["id"])
        n = now.get(t["id"], {})
        graph.tasks.append({
            "id": t["id"], "node": t["node"], "action": t["action"], "service": t.get("service"), "phase": phase,
            "stage": stage, "state": n.get("state", "planned"), "attempt": n.get("attempt", 0),
            "provisioner": n.get("provisioner"), "worker": n.get("worker"),
        })

    for phase in ("forward", "rollback"):
        plan = plans.get(phase)
        if not plan or not plan.get("tasks"):
            continue
        stage_of = _stage_index(plan["stages"])
        graph.stages[phase] = [list(st) for st in plan["stages"]]
        graph.links += [[list(a), list(b)] for a, b in plan["links"]]
        for t in plan["tasks"]:
            add(t, phase, stage_of.get(t["id"]))
    for t in plans.get("cleanups") or ():
        add(t, "cleanup", None)
    return graph


def _stage_index(stages: Sequence[Sequence[str]]) -> dict[str, int]:
    return {task: i for i, stage in enumerate(stages, 1) for task in stage}


# -- attempts --------------------------------------------------------------------------------------


def _clip(text: str) -> str:
    return text if len(text) <= MAX_OUTPUT else text[:MAX_OUTPUT] + f"\n… ({len(text) - MAX_OUTPUT} more characters)"


def attempts(history: Iterable[Recorded], task_id: str) -> list[dict[str, Any]]:
    """Every attempt of one task, oldest first: when it was queued (and why: a retry, a
    cleanup), who claimed it, the lines its plugin reported while it ran, how it ended (output,
    error, results) and whether the planner took the outcome into the job."""
    out: dict[int, dict[str, Any]] = {}

    def attempt(n: int) -> dict[str, Any]:
        return out.setdefault(n, {"attempt": n, "queued_at": None, "claims": [], "outcome": None, "taken": None,
                                  "provisioner_class": None, "cleanup_for": None, "lines": []})

    for r in history:
        e = r.event
        if getattr(e, "task_id", None) != task_id:
            continue
        at = r.time.isoformat()
        match e.type:
            case "TaskQueued":
                a = attempt(e.attempt)
                a.update(queued_at=at, provisioner_class=e.provisioner_class, seq=r.seq)
            case "CleanupQueued":
                attempt(e.attempt).update(queued_at=at, cleanup_for=e.for_task, seq=r.seq)
            case "TaskClaimed":
                attempt(e.attempt)["claims"].append({"at": at, "provisioner": e.provisioner, "worker": e.worker,
                                                     "delivery": e.delivery, "seq": r.seq})
            case "TaskSucceeded" | "TaskFailed":
                attempt(e.attempt)["outcome"] = {
                    "state": "succeeded" if e.type == "TaskSucceeded" else "failed", "at": at, "seq": r.seq,
                    "provisioner": e.provisioner, "worker": e.worker, "error": getattr(e, "error", None),
                    "stdout": _clip(e.stdout), "stderr": _clip(e.stderr),
                    "hostname": getattr(e, "hostname", ""), "ipaddresses": dict(getattr(e, "ipaddresses", {}) or {}),
                    "result": dict(getattr(e, "result", {}) or {}),
                }
            case "TaskProgressed":
                attempt(e.attempt)["lines"].append({"n": e.n, "line": e.line, "skipped": e.skipped, "at": at, "seq": r.seq})
            case "TaskCompleted":
                attempt(e.attempt)["taken"] = {"state": "succeeded", "at": at, "error": None}
            case "TaskAttemptFailed":
                attempt(e.attempt)["taken"] = {"state": e.state, "at": at, "error": e.error}
    return [out[n] for n in sorted(out)]


def task_of(graph: Graph, task_id: str) -> dict[str, Any] | None:
    return next((t for t in graph.tasks if t["id"] == task_id), None)
