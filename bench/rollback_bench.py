"""What planning a rollback costs (`services/planner/domain/rollback.py:rollback_plan`, pure): the
CPU time to build the rollback plan of big plans, failed at their end, early, or half-way
through a rolling change (docs/benchmarks.md, "Rollback planning"; decision 51).

    .venv/bin/python bench/rollback_bench.py [--nodes 2000] [--against OLD_ROLLBACK_PY]

Plans of `bench/planner_bench.py`'s cluster (3 masters, workers with 8 services): a create
(every task undone by its node's delete), a restart (each start and stop undone), the same
restart 10% of the nodes a batch. `--against` times another version of `rollback.py` (a copy of
the file, e.g. `git show main:services/planner/domain/rollback.py > /tmp/old.py`) on the same
plans in the same run, and checks both plans have the same tasks.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for the project's packages when run as a script

from bench.planner_bench import catalog, cluster
from services.planner.domain import rollback
from services.planner.domain.model import Plan
from services.planner.domain.plan import build_plan
from services.planner.domain.rolling import batched


def _cases(nodes: int) -> dict[str, tuple[Plan, set[str], set[tuple[str, str]]]]:
    services, layout = catalog(), cluster(nodes)
    had = {(n.id, s) for n in layout for s in n.services}
    create = build_plan(services, layout, "create")
    restart = build_plan(services, layout, "restart")
    rolling = batched(restart, "10%").plan
    return {
        "create, all done": (create, set(create.index), set()),
        "create, 1% done": (create, {t.id for t in create.tasks[: len(create.tasks) // 100]}, set()),
        "restart, all done": (restart, set(restart.index), had),
        "restart 10% a batch, half done": (rolling, {t.id for t in rolling.tasks[: len(rolling.tasks) // 2]}, had),
    }


def _load(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("services.planner.domain._rollback_against", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


def _time(plan_rollback: Callable[..., Plan], plan: Plan, done: set[str], had: set[tuple[str, str]]) -> tuple[float, Plan]:
    services = catalog()
    start = time.process_time()
    back = plan_rollback(plan, done, services, had=had, meant_stopped=set())
    return time.process_time() - start, back


def main(nodes: int, against: str | None) -> None:
    other = _load(against) if against else None
    for name, (plan, done, had) in _cases(nodes).items():
        cpu, back = _time(rollback.rollback_plan, plan, done, had)
        line = f"{name}: {len(plan.tasks)} tasks, {len(back.tasks)} undone, {len(back.links)} links, {cpu:.2f} s CPU"
        if other is not None:
            then, old = _time(other.rollback_plan, plan, done, had)
            assert {t.id for t in old.tasks} == {t.id for t in back.tasks}
            line += f"; against: {then:.2f} s CPU, {len(old.links)} links"
        print(line, flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--against", help="another rollback.py to time on the same plans")
    args = parser.parse_args()
    main(args.nodes, args.against)
