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
    index = {t: i for i, t in enumerate(task_ids)}
    n = len(task_ids)
    # Forward-star arrays (flat lists of ints, no list per task: 10^5 small containers cost
    # more in garbage-collector passes than in the walk itself). Edge e: into target[e].
    # A one-source link is a plain edge from its source; a fan-in is a pseudo-node n + k that
    # its sources feed and that feeds its targets once all of them are done.
    first = [-1] * n
    target: list[int] = []
    after: list[int] = []
    waiting: list[int] = []  # per fan-in: sources not done yet
    incoming = [0] * n
    for sources, targets in links:
        if len(sources) == 1:
            origin = index[sources[0]]
        else:
            origin = len(first)
            first.append(-1)
            waiting.append(len(sources))
            for src in sources:
                i = index[src]
                target.append(origin)
                after.append(first[i])
                first[i] = len(target) - 1
        for name in targets:
            i = index[name]
            incoming[i] += 1
            target.append(i)
            after.append(first[origin])
            first[origin] = len(target) - 1
    level = [0] * len(first)
    queue = [i for i in range(n) if incoming[i] == 0]
    for i in queue:  # the list grows while we walk it
        up = level[i] + 1
        e = first[i]
        while e >= 0:
            t = target[e]
            e = after[e]
            if t >= n:  # a fan-in: its targets go one level after its last source
                if level[t] < level[i]:
                    level[t] = level[i]
                waiting[t - n] -= 1
                if waiting[t - n]:
                    continue
                fan_up, f = level[t] + 1, first[t]
                while f >= 0:
                    u, f = target[f], after[f]
                    if level[u] < fan_up:
                        level[u] = fan_up
                    incoming[u] -= 1
                    if incoming[u] == 0:
                        queue.append(u)
                continue
            if level[t] < up:
                level[t] = up
            incoming[t] -= 1
            if incoming[t] == 0:
                queue.append(t)
    if len(queue) < n:
        stuck = {task_ids[i] for i in range(n) if incoming[i] > 0}
        raise PlanError(f"dependency cycle between tasks: {' -> '.join(_a_cycle(stuck, links))}")
    return dict(zip(task_ids, level, strict=False))  # `level` goes on with the fan-in pseudo-nodes


def _a_cycle(stuck: set[str], links: Sequence[Link]) -> list[str]:
    # Every task left waiting has a predecessor that is also left: walk back.
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
