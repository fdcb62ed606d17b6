"""Coopr's staged grouping, deterministic (coopr-facts §4.2-4.3).

A plan's dependencies are *links*: `(sources, targets)` = every source finishes before every
target. A chain edge is a link with one source and one target; a cross-node fan-in (start the
namenode before every datanode) is one link, so a 10,000-node plan does not hold 10^8 pairs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .errors import PlanError

Link = tuple[tuple[str, ...], tuple[str, ...]]


def layers(task_ids: Sequence[str], links: Sequence[Link]) -> dict[str, int]:
    """Kahn layering: level 0 = the DAG's sources; a task sits one level after its last
    predecessor. Raises PlanError on a cycle, naming the tasks of one cycle."""
    incoming = dict.fromkeys(task_ids, 0)
    outgoing: dict[str, list[int]] = {t: [] for t in task_ids}
    waiting = [len(sources) for sources, _ in links]
    link_level = [0] * len(links)
    for i, (sources, targets) in enumerate(links):
        for s in sources:
            outgoing[s].append(i)
        for t in targets:
            incoming[t] += 1
    level = dict.fromkeys(task_ids, 0)
    queue = [t for t in task_ids if incoming[t] == 0]
    for task in queue:  # the list grows while we walk it
        for i in outgoing[task]:
            waiting[i] -= 1
            link_level[i] = max(link_level[i], level[task])
            if waiting[i] == 0:
                for t in links[i][1]:
                    level[t] = max(level[t], link_level[i] + 1)
                    incoming[t] -= 1
                    if incoming[t] == 0:
                        queue.append(t)
    if len(queue) < len(task_ids):
        raise PlanError(f"dependency cycle between tasks: {' -> '.join(_a_cycle(task_ids, links, incoming))}")
    return level


def _a_cycle(task_ids: Sequence[str], links: Sequence[Link], incoming: dict[str, int]) -> list[str]:
    # Every task left with incoming > 0 has a predecessor that is also left: walk back.
    stuck = {t for t in task_ids if incoming[t] > 0}
    preds: dict[str, str] = {}
    for sources, targets in links:
        for t in targets:
            if t in stuck and t not in preds:
                source = next((s for s in sources if s in stuck), None)
                if source is not None:
                    preds[t] = source
    path: list[str] = []
    node = min(stuck)
    while node not in path:
        path.append(node)
        node = preds[node]
    cycle = path[path.index(node):]
    cycle.reverse()
    first = cycle.index(min(cycle))  # the same cycle is always named the same way
    cycle = cycle[first:] + cycle[:first]
    return [*cycle, cycle[0]]


def split_one_per_node(tasks: Sequence[str], node_of: Callable[[str], str]) -> list[list[str]]:
    """Coopr's `deDupNodePerStage`: each task goes into the first sub-stage without a task of
    its node. With `tasks` sorted, the split is deterministic."""
    parts: list[list[str]] = []
    seen: dict[str, int] = {}
    for task in tasks:
        node = node_of(task)
        index = seen.get(node, 0)
        seen[node] = index + 1
        if index == len(parts):
            parts.append([])
        parts[index].append(task)
    return parts


def staged(
    task_ids: Sequence[str], links: Sequence[Link], node_of: Callable[[str], str], key: Callable[[str], Any]
) -> tuple[tuple[str, ...], ...]:
    """Stages: Kahn layers, each sorted by `key` and split so a node has one task per stage."""
    level = layers(task_ids, links)
    by_level: list[list[str]] = [[] for _ in range(max(level.values(), default=-1) + 1)]
    for task in task_ids:
        by_level[level[task]].append(task)
    out: list[tuple[str, ...]] = []
    for tasks in by_level:
        tasks.sort(key=key)
        out.extend(tuple(part) for part in split_one_per_node(tasks, node_of))
    return tuple(out)
