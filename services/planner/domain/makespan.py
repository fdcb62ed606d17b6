"""How long a plan takes, given each task's duration: the critical path (no schedule can beat
it), the busiest node (neither can that, with one task per node at a time), and a simulated
run of the eager or staged dispatcher with unlimited workers."""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence

from .model import Plan
from .scheduling import Dispatcher


def critical_path(plan: Plan, durations: Mapping[str, float]) -> tuple[float, tuple[str, ...]]:
    """Length of the longest path (sum of its tasks' durations) and the path itself."""
    finish: dict[str, float] = {}
    via: dict[str, str | None] = {}
    link_end: dict[int, tuple[float, str]] = {}
    for task in plan.tasks:  # plan order is topological
        start, previous = 0.0, None
        for i in plan.in_links[task.id]:
            if i not in link_end:
                link_end[i] = max((finish[s], s) for s in plan.links[i][0])
            if link_end[i][0] > start or previous is None:
                start, previous = link_end[i]
        finish[task.id] = start + durations[task.id]
        via[task.id] = previous
    if not finish:
        return 0.0, ()
    end = max(finish, key=lambda t: (finish[t], -plan.index[t]))
    path: list[str] = []
    node: str | None = end
    while node is not None:
        path.append(node)
        node = via[node]
    return finish[end], tuple(reversed(path))


def busiest_node(plan: Plan, durations: Mapping[str, float]) -> float:
    """The most work any one node has to do in sequence."""
    total: dict[str, float] = {}
    for task in plan.tasks:
        total[task.node] = total.get(task.node, 0.0) + durations[task.id]
    return max(total.values(), default=0.0)


def by_remaining_time(plan: Plan, durations: Mapping[str, float]) -> tuple[str, ...]:
    """A dispatch priority: most remaining work (the task's longest path to the end) first."""
    remaining: dict[str, float] = {}
    for task in reversed(plan.tasks):
        after = max((remaining[s] for s in plan.successors(task.id)), default=0.0)
        remaining[task.id] = durations[task.id] + after
    return tuple(sorted(remaining, key=lambda t: (-remaining[t], plan.index[t])))


def simulate(plan: Plan, durations: Mapping[str, float], mode: str = "eager", priority: Sequence[str] | None = None) -> float:
    """Makespan of running `plan` with `Dispatcher` (every dispatched task starts at once)."""
    dispatcher = Dispatcher(plan, mode, priority)
    events: list[tuple[float, int, str]] = []
    now = 0.0

    def launch(tasks: list[str]) -> None:
        for t in tasks:
            heapq.heappush(events, (now + durations[t], plan.index[t], t))

    launch(dispatcher.start())
    while events:
        now, _, task = heapq.heappop(events)
        launch(dispatcher.finished(task))
    if len(dispatcher.done) != len(plan.tasks):  # pragma: no cover - a dispatcher bug
        raise RuntimeError("simulation stalled before every task ran")
    return now
