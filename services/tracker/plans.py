"""What a preview shows of a dry run's plan (pure): tasks by stage and action, and how long the
eager and the staged dispatcher would take, each task lasting a nominal time for its action
(docs/tracker.md, "Writes").

The estimate runs the planner's own dispatcher over the plan
(`services/planner/domain/makespan.py`), with unlimited workers, one task per node at a time."""

from __future__ import annotations

from collections import Counter
from typing import Any

from contracts.catalog import Action
from services.planner.domain.errors import PlanError
from services.planner.domain.makespan import critical_path, simulate
from services.planner.domain.model import Plan, PlannedTask

NOMINAL_S = {"create": 60.0, "confirm": 10.0, "bootstrap": 30.0, "install": 40.0, "configure": 10.0, "initialize": 20.0,
             "start": 10.0, "stop": 10.0, "remove": 20.0, "delete": 20.0, "status": 5.0}
"""Seconds per action on a cloud, typical rather than measured here (the medians bench/planner_bench.py
draws from): an estimate to compare the two dispatchers, not a promise."""
MAX_ESTIMATED_TASKS = 20_000
"""Bigger plans get their counts without the estimate (it simulates every task)."""


def summary(plan: dict[str, Any]) -> dict[str, Any]:
    """Counts of the plan's tasks (in all, per action, per stage) and the estimate."""
    tasks = {t["id"]: t for t in plan.get("tasks") or () if isinstance(t, dict) and "id" in t}
    stages = [list(s) for s in plan.get("stages") or ()]
    out: dict[str, Any] = {
        "tasks": len(tasks),
        "nodes": len({t.get("node") for t in tasks.values()}),
        "actions": dict(Counter(t.get("action") for t in tasks.values())),
        "stages": [{"stage": i, "tasks": len(s), "actions": dict(Counter(tasks[t].get("action") for t in s if t in tasks)),
                    "work": dict(Counter(_work(tasks[t]) for t in s if t in tasks))}
                   for i, s in enumerate(stages, start=1)],
        "estimate": estimate(tasks, plan.get("edges") or ()) if len(tasks) <= MAX_ESTIMATED_TASKS else None,
    }
    rolling = plan.get("rolling")
    if isinstance(rolling, dict):
        out["rolling"] = {"batches": len(rolling.get("batches") or ()), "tolerance": rolling.get("tolerance", 0)}
    return out


def _work(task: dict[str, Any]) -> str:
    """`install hdfs-namenode`, or `create` for a task of no service (the words `--dry-run` prints)."""
    return " ".join(filter(None, (str(task.get("action") or ""), task.get("service"))))


def estimate(tasks: dict[str, dict[str, Any]], edges: Any) -> dict[str, Any] | None:
    try:
        plan = Plan.assemble([PlannedTask(t["id"], t["node"], Action(t["action"]), t.get("service")) for t in tasks.values()],
                             [((a,), (b,)) for a, b in edges])
    except (PlanError, KeyError, ValueError, TypeError):
        return None
    durations = {t.id: NOMINAL_S.get(t.action.value, 10.0) for t in plan.tasks}
    eager, staged = simulate(plan, durations, "eager"), simulate(plan, durations, "staged")
    return {"eager_s": eager, "staged_s": staged, "critical_path_s": critical_path(plan, durations)[0],
            "saving": 1 - eager / staged if staged else 0.0, "nominal_s": NOMINAL_S}
