"""How many round trips through the planner a create's plan asks for, with and without
segments: the scale bench's create (`scale_bench.catalog`, the solver's layout) played with
every task taking one unit of time. A *dispatch round* is a moment at which the planner queues
something; a *segment* is a task and the tasks of its node that become ready only through it
and each other, sent as one task message (docs/benchmarks.md, "Scale: segments"). Pure: no
server, no processes; it counts what the plan's shape allows, not what a run costs.

    .venv/bin/python bench/plan_waves.py [--nodes 2,100,1000]
"""

from __future__ import annotations

import argparse
import heapq
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for `bench.*` when run as a script

from bench.scale_bench import catalog
from contracts.layout import NodeSpec
from services.planner.domain.model import Plan
from services.planner.domain.plan import build_plan
from services.planner.domain.scheduling import ready_eager
from services.solver.domain.request import SolveRequest
from services.solver.domain.solve import solve


def create_plan(nodes: int) -> Plan:
    c = catalog(nodes)
    layout = solve(c, SolveRequest(template="hadoop-big", nodes=nodes))
    specs = [NodeSpec(id=f"n{i}", hardwaretype=g.hardwaretype, imagetype=g.imagetype, services=g.services)
             for i, g in enumerate((g for g in layout.layout for _ in range(g.count)), start=1)]
    return build_plan(c.services, specs, "create")


def segment(plan: Plan, head: str, done: set[str], busy: set[str]) -> list[str]:
    """The rest of `head`'s segment: at each step the first by rank of the node's tasks whose
    predecessors are all done or in the segment."""
    node, members, last = plan.by_id[head].node, {head}, head
    out: list[str] = []
    while True:
        settled = done | members
        nxt = [s for s in plan.successors(last) if plan.by_id[s].node == node and s not in settled and s not in busy
               and all(p in settled for p in plan.predecessors(s))]
        if not nxt:
            return out
        last = min(nxt, key=plan.rank.__getitem__)
        members.add(last)
        out.append(last)


def play(plan: Plan, segments: bool) -> tuple[int, int]:
    """(dispatch rounds, task messages) with unit-time tasks, eager mode."""
    done: set[str] = set()
    running: set[str] = set()
    ends: list[tuple[int, str]] = []
    rounds = messages = 0
    now = 0
    while True:
        picked = ready_eager(plan, done, running)
        if picked:
            rounds += 1
        for head in picked:
            unit = [head, *(segment(plan, head, done, running) if segments else [])]
            messages += 1
            for k, task in enumerate(unit, start=1):
                running.add(task)
                heapq.heappush(ends, (now + k, task))
        if not ends:
            return rounds, messages
        now = ends[0][0]
        while ends and ends[0][0] == now:
            _, task = heapq.heappop(ends)
            running.discard(task)
            done.add(task)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="2,100,1000", help="sizes of the creates, comma-separated")
    args = parser.parse_args()
    print("| nodes | tasks | stages | dispatch rounds | task messages | with segments: rounds | messages |")
    print("|---|---|---|---|---|---|---|")
    for n in (int(x) for x in args.nodes.split(",")):
        plan = create_plan(n)
        plain, joined = play(plan, False), play(plan, True)
        print(f"| {n:,} | {len(plan.tasks):,} | {len(plan.stages)} | {plain[0]} | {plain[1]:,} | {joined[0]} | {joined[1]:,} |")


if __name__ == "__main__":
    main()
