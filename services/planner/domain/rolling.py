"""Rolling changes (pure): a restart, configure, upgrade or repair done a batch of nodes at a time.

The operation's plan is cut into batches of nodes (a count, or a percentage of the nodes the
plan touches, in node order; a repair's nodes that it only brings up first). Each batch keeps its own tasks and the links among them; a link
between two batches is dropped (a later batch waits for the whole earlier one anyway, and a
link backwards, e.g. "stop hbase on node 7 before zookeeper on node 2", is what a rolling change
deliberately does not do: dependents keep running while a batch restarts); one link then makes
every task of batch k+1 wait for every task of batch k. A phased plan's batch keeps its phases in
order: its tasks of a phase wait for its tasks of the previous phase with any (a barrier is a
link between batches too, dropped, where a phase has nothing in the batch). So a batch starts
only when the previous one is healthy: every one of its tasks succeeded (including the `status`
checks that follow starts, for services that define one).

The failure tolerance is a number of nodes: a node whose task runs out of attempts is written
off with the tasks of its batch that needed it (`Job`), and the change goes on; one node past
the tolerance stops it and rolls back what it did. docs/planner.md, "Rolling changes".
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from .errors import PlanError
from .model import Link, Plan, _natural, phase_of

_PERCENT = re.compile(r"^(\d+(?:\.\d+)?)%$")


@dataclass(frozen=True)
class Batched:
    plan: Plan
    batches: list[list[str]]
    """Node ids, batch by batch."""


def batch_size(batch: int | str, nodes: int) -> int:
    """A batch of `batch` nodes, or `"p%"` of `nodes` (at least one)."""
    if isinstance(batch, int):
        if batch < 1:
            raise PlanError(f"rolling batch {batch} must be at least 1", "rolling.batch")
        return batch
    match = _PERCENT.match(batch.strip())
    if match is None or not 0 < float(match.group(1)) <= 100:
        raise PlanError(f"rolling batch {batch!r} is neither a count nor a percentage in (0, 100]", "rolling.batch")
    return max(1, math.ceil(float(match.group(1)) * nodes / 100))


def batched(plan: Plan, batch: int | str, first: Collection[str] = ()) -> Batched:
    """The plan done `batch` nodes at a time; the nodes in `first` before the others (a repair's
    nodes where it only brings services up: nothing running goes down before they are back)."""
    nodes = sorted({t.node for t in plan.tasks}, key=lambda n: (n not in first, _natural(n)))
    size = batch_size(batch, len(nodes))
    batches = [nodes[i:i + size] for i in range(0, len(nodes), size)]
    which = {n: i for i, group in enumerate(batches) for n in group}
    node_of = {t.id: t.node for t in plan.tasks}
    links: list[Link] = []
    for sources, targets in plan.links:
        for i in range(len(batches)):
            s = tuple(t for t in sources if which[node_of[t]] == i)
            t = tuple(t for t in targets if which[node_of[t]] == i)
            if s and t:
                links.append((s, t))
    members: list[list[str]] = [[] for _ in batches]
    phases: list[dict[int, list[str]]] = [{} for _ in batches]
    for task in plan.tasks:
        members[which[task.node]].append(task.id)
        phases[which[task.node]].setdefault(phase_of(task), []).append(task.id)
    # A phased plan's barriers (`restore.chain_phases`): a batch keeps the order of its own
    # phases, from each to its next one with tasks of the batch. Its barriers' links dropped
    # where a phase had nothing in the batch, and its phases on either side ran unordered (a
    # rolling repair's stop on one node before its start on another, or their undoing).
    for groups in phases:
        order = sorted(groups)
        links += [(tuple(groups[a]), tuple(groups[b])) for a, b in itertools.pairwise(order)]
    links += [(tuple(members[i]), tuple(members[i + 1])) for i in range(len(batches) - 1)]
    return Batched(Plan.assemble(plan.tasks, links, plan.thrown_in), batches)


def batch_of(batches: Sequence[Sequence[str]]) -> dict[str, int]:
    return {n: i for i, group in enumerate(batches) for n in group}
