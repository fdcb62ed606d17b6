"""Planner benchmark (pure code, no bus).

1. Plan a create of 10,000 nodes x 5 services each (DAG build + stages); target < 2 s.
2. Makespan of a 50-node create with long-tailed task durations, simulated with the same
   Dispatcher the planner uses: eager vs staged (Coopr) vs the DAG's critical path.
   Targets: eager >= 40% sooner than staged, and within 1.2x the critical path.

    .venv/bin/python bench/planner_bench.py [--seeds 20] [--write-docs]

`--write-docs` replaces the "## Planner" section of docs/benchmarks.md with the figures.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import re
import statistics
import time
from pathlib import Path
from typing import Any

from contracts.catalog import Service
from contracts.layout import NodeSpec
from muster.catalog.files import load_catalog
from services.planner.domain.makespan import busiest_node, by_remaining_time, critical_path, simulate
from services.planner.domain.plan import Plan, build_plan
from services.planner.domain.scheduling import Dispatcher

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "benchmarks.md"
DEMO_CATALOG = ROOT / "muster" / "demo" / "catalog"
RUNTIME = ["install", "configure", "start", "stop"]
SERVICES: dict[str, tuple[list[str], list[str], list[str]]] = {  # name: (actions, install deps, runtime deps)
    "base": (["install", "configure"], [], []),
    "node-exporter": (RUNTIME, ["base"], []),
    "zookeeper": (RUNTIME, ["base"], []),
    "hdfs-namenode": (["install", "configure", "initialize", "start", "stop"], ["base"], ["zookeeper"]),
    "yarn-resourcemanager": (RUNTIME, ["base"], ["hdfs-namenode"]),
    "hbase-master": (["install", "configure", "initialize", "start", "stop"], ["base"], ["hdfs-namenode", "zookeeper"]),
    "hdfs-datanode": (RUNTIME, ["base"], ["hdfs-namenode"]),
    "yarn-nodemanager": (RUNTIME, ["base"], ["yarn-resourcemanager"]),
    "hbase-regionserver": (RUNTIME, ["base"], ["hbase-master", "hdfs-datanode"]),
}
MASTERS = [
    ["base", "node-exporter", "zookeeper", "hdfs-namenode", "yarn-resourcemanager"],
    ["base", "node-exporter", "zookeeper", "hbase-master", "yarn-nodemanager"],
    ["base", "node-exporter", "zookeeper", "hdfs-datanode", "yarn-nodemanager"],
]
WORKER = ["base", "node-exporter", "hdfs-datanode", "yarn-nodemanager", "hbase-regionserver"]
# Median seconds per action on a cloud; each task's duration is median x lognormal(0, SIGMA).
MEDIAN = {"create": 60, "confirm": 10, "bootstrap": 30, "install": 40, "configure": 10, "initialize": 20, "start": 10}
SIGMA = 1.0


def catalog() -> dict[str, Service]:
    return {
        name: Service.model_validate({
            "name": name,
            "dependencies": {"install": {"requires": install}, "runtime": {"requires": runtime}},
            "provisioner": {"actions": {a: {"type": "shell", "fields": {"script": f"{a} {name}"}} for a in actions}},
        })
        for name, (actions, install, runtime) in SERVICES.items()
    }


def cluster(size: int) -> list[NodeSpec]:
    layouts = [*MASTERS, *[WORKER] * (size - len(MASTERS))]
    return [NodeSpec(id=f"n{i:05d}", hardwaretype="large", imagetype="ubuntu22", services=s) for i, s in enumerate(layouts)]


def bench_big_plan(size: int = 10_000, repeat: int = 3) -> dict[str, Any]:
    services, nodes = catalog(), cluster(size)
    wall, cpu, plan = [], [], None
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        plan = build_plan(services, nodes, "create")
        wall.append(time.perf_counter() - w)
        cpu.append(time.process_time() - c)
    assert plan is not None
    start = time.perf_counter()
    dispatcher, dispatched = Dispatcher(plan), 0
    running = dispatcher.start()
    while running:
        dispatched += 1
        running.extend(dispatcher.finished(running.pop()))
    return {
        "nodes": size, "tasks": len(plan.tasks), "links": len(plan.links),
        "pairs": sum(len(s) * len(t) for s, t in plan.links), "stages": len(plan.stages),
        "wall": min(wall), "cpu": min(cpu), "wall_median": statistics.median(wall),
        "dispatch": time.perf_counter() - start, "dispatched": dispatched,
    }


def durations(plan: Plan, rnd: random.Random) -> dict[str, float]:
    return {t.id: MEDIAN[t.action.value] * rnd.lognormvariate(0.0, SIGMA) for t in plan.tasks}


def demo_cluster(size: int) -> tuple[dict[str, Service], list[NodeSpec]]:
    """The demo's `hadoop-small` on the simulated provider: zookeeper on one node, namenode and
    resourcemanager on another, datanode + nodemanager on the rest, base everywhere."""
    services = load_catalog(DEMO_CATALOG).services
    layouts = [["base", "zookeeper-server"], ["base", "hdfs-namenode", "yarn-resourcemanager"]]
    layouts += [["base", "hdfs-datanode", "yarn-nodemanager"]] * (size - 2)
    return services, [NodeSpec(id=f"n{i:02d}", hardwaretype="medium", imagetype="ubuntu22", services=s) for i, s in enumerate(layouts)]


def bench_makespan(label: str, services: dict[str, Service], nodes: list[NodeSpec], seeds: int) -> dict[str, Any]:
    plan = build_plan(services, nodes, "create")
    rows = []
    for seed in range(seeds):
        d = durations(plan, random.Random(seed))
        rows.append({"eager": simulate(plan, d, "eager"), "staged": simulate(plan, d, "staged"),
                     "cp": critical_path(plan, d)[0], "node": busiest_node(plan, d),
                     "oracle": simulate(plan, d, "eager", by_remaining_time(plan, d))})
    saving = [1 - r["eager"] / r["staged"] for r in rows]
    over_cp = [r["eager"] / r["cp"] for r in rows]
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    return {
        "label": label, "nodes": len(nodes), "tasks": len(plan.tasks), "stages": len(plan.stages), **med,
        "saving": statistics.median(saving), "saving_worst": min(saving),
        "over_cp": statistics.median(over_cp), "over_cp_worst": max(over_cp),
        "oracle_over_cp": statistics.median(r["oracle"] / r["cp"] for r in rows),
    }


def _verdict(ok: bool) -> str:
    return "meets" if ok else "MISSES"


def report(big: dict[str, Any], runs: list[dict[str, Any]], seeds: int) -> str:
    lines = [
        "## Planner",
        "",
        f"`bench/planner_bench.py`, {platform.python_implementation()} {platform.python_version()} on "
        f"{platform.machine()} {platform.system()}, {os.cpu_count()} CPUs; pure code, no bus. The machine was shared "
        "with other jobs while measuring, so wall time is shown next to the process's CPU time.",
        "",
        f"**Create of {big['nodes']:,} nodes x 5 services each** (3 master nodes; workers with base, node-exporter, "
        "datanode, nodemanager, regionserver; every install waits for base on every node, runtime deps between the "
        "Hadoop roles, so the fan-ins are all-to-all):",
        "",
        "| figure | value |",
        "|---|---|",
        f"| tasks | {big['tasks']:,} |",
        f"| links (a fan-in is one link) | {big['links']:,} |",
        f"| dependency pairs those links stand for | {big['pairs']:,} |",
        f"| stages (staged mode) | {big['stages']:,} |",
        f"| `build_plan` (DAG + stages), best of 3 | {big['wall']:.2f} s wall, {big['cpu']:.2f} s CPU "
        f"({_verdict(big['cpu'] < 2)} the 2 s target) |",
        f"| eager `Dispatcher` driven through the whole plan ({big['dispatched']:,} dispatches) | {big['dispatch']:.2f} s |",
        "",
        f"**Makespan of 50-node creates**: each task takes median x lognormal(0, {SIGMA}) (p99 = 10x the median), "
        f"medians {', '.join(f'{k} {v}' for k, v in MEDIAN.items())} s; unlimited workers, one task per node at a "
        f"time; the same `Dispatcher` as the planner; {seeds} seeds, medians (worst seed in brackets):",
        "",
        "| cluster | tasks / stages | staged (Coopr) | eager | critical path | busiest node | eager sooner than staged | eager / critical path | oracle eager / critical path |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        lines.append(
            f"| {r['label']} | {r['tasks']} / {r['stages']} | {r['staged']:.0f} s | {r['eager']:.0f} s | {r['cp']:.0f} s "
            f"| {r['node']:.0f} s | {r['saving']:.0%} ({r['saving_worst']:.0%}) | {r['over_cp']:.2f} ({r['over_cp_worst']:.2f}) "
            f"| {r['oracle_over_cp']:.2f} |"
        )
    head = runs[0]
    lines += [
        "",
        f"Targets, on the {head['label']} medians: eager >= 40% sooner than staged: {_verdict(head['saving'] >= 0.4)}; "
        f"eager within 1.2x the critical path: {_verdict(head['over_cp'] <= 1.2)}. Worst seeds: "
        f"{head['saving_worst']:.0%} sooner, {head['over_cp_worst']:.2f}x.",
        "",
        "The critical path ignores the one-task-per-node rule: a node with several services runs their installs one "
        "after another, so the heavier layout stays further from it. The *oracle* column is the same eager dispatcher "
        "ranking tasks by their true remaining time, known in advance: it is hardly closer, so the gap comes from the "
        "per-node rule (and from the install-base-everywhere barrier), not from the dispatch order.",
        "",
    ]
    return "\n".join(lines)


def write_docs(section: str, path: Path = DOCS) -> None:
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    pattern = re.compile(r"^## Planner\n.*?(?=^## |\Z)", re.S | re.M)
    section = section.rstrip("\n") + "\n\n"
    if pattern.search(text):
        text = pattern.sub(lambda _: section, text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text.rstrip("\n") + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--write-docs", action="store_true", help="update the Planner section of docs/benchmarks.md")
    args = parser.parse_args()
    runs = [
        bench_makespan("demo hadoop-small (2 masters, 48 workers x 3 services)", *demo_cluster(50), args.seeds),
        bench_makespan("5 services per node (the 10,000-node layout)", catalog(), cluster(50), args.seeds),
    ]
    section = report(bench_big_plan(), runs, args.seeds)
    print(section)
    if args.write_docs:
        write_docs(section)


if __name__ == "__main__":
    main()
