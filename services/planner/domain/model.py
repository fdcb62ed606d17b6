"""A plan: node-level tasks and the links between them (`build_plan` makes them, see plan.py).

Pure data with cached lookups; no IO. Task ids: `<node>.<action>` for machine tasks,
`<node>.<action>.<service>` for service tasks (docs/planner.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple

from contracts.catalog import Action

from .errors import PlanError
from .stages import Link, staged

__all__ = ["ACTION_INDEX", "Link", "Plan", "PlannedTask", "phase_of", "task_id"]

ACTION_INDEX = {a: i for i, a in enumerate(Action)}

_NAME = {a: a.value for a in Action}  # Enum.value is slow in a loop of 10^5
_PHASE = re.compile(r"p([0-9]+)\.")


def task_id(node: str, action: Action, service: str | None) -> str:
    """`<node>.<action>` for machine tasks, `<node>.<action>.<service>` for service tasks."""
    return f"{node}.{_NAME[action]}" if service is None else f"{node}.{_NAME[action]}.{service}"


def phase_of(task: PlannedTask) -> int:
    """The phase of a phased plan's task: 2 for `p2.n1.start.s` (`restore.chain_phases`); 0
    for an unphased one, and for any id of another shape (a node named `p1` is no phase)."""
    prefix = task.id.removesuffix(task_id(task.node, task.action, task.service))
    match = _PHASE.fullmatch(prefix) if prefix else None
    return int(match.group(1)) if match else 0


class PlannedTask(NamedTuple):
    """One node-level task of a plan, and of a job (`Job.tasks`). A tuple: a 10,000-node plan
    makes 170,000 of them, and a tuple is made in a third of a frozen dataclass's time."""

    id: str
    node: str
    action: Action
    service: str | None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "node": self.node, "action": self.action.value, "service": self.service}


@dataclass(frozen=True)
class Plan:
    """Tasks in stage order; `links` = dependencies as `(sources, targets)`, every source
    before every target; `stages` = Coopr's staged grouping; `thrown_in` = START tasks of
    services outside the operation, added only so their dependents start after them."""

    tasks: tuple[PlannedTask, ...]
    links: tuple[Link, ...]
    stages: tuple[tuple[str, ...], ...]
    thrown_in: frozenset[str] = frozenset()

    @classmethod
    def assemble(cls, tasks: Iterable[PlannedTask], links: Iterable[Link], thrown_in: Iterable[str] = ()) -> Plan:
        """Order and stage the tasks. The order depends only on the tasks and links, not on
        the order they come in: by stage, then node id (natural order: n2 before n10), action
        (Coopr's order) and service. Links keep their order, each once. Raises PlanError on
        a cycle or a link to a task that is not there."""
        by_id, links, thrown_in = {t.id: t for t in tasks}, list(links), frozenset(thrown_in)
        unknown = {tid for s, t in links for tid in (*s, *t) if tid not in by_id} | (thrown_in - by_id.keys())
        if unknown:
            raise PlanError(f"links or thrown_in name tasks that are not in the plan: {sorted(unknown)[:5]}")
        node_key = {n: _natural(n) for n in {t.node for t in by_id.values()}}
        keys = {t.id: (node_key[t.node], ACTION_INDEX[t.action], t.service or "") for t in by_id.values()}
        stages = staged(list(by_id), links, lambda tid: by_id[tid].node, keys.__getitem__)
        order = [tid for stage in stages for tid in stage]
        pos = {tid: i for i, tid in enumerate(order)}.__getitem__

        def norm(link: Link) -> Link:
            s, t = link
            if len(s) == 1 and len(t) == 1:
                return link
            return tuple(sorted(set(s), key=pos)), tuple(sorted(set(t), key=pos))

        unique = tuple(dict.fromkeys(norm(lk) for lk in links if lk[0] and lk[1]))
        return cls(tuple(by_id[t] for t in order), unique, stages, thrown_in)

    @classmethod
    def from_edges(cls, tasks: Iterable[PlannedTask], edges: Iterable[tuple[str, str]], thrown_in: Iterable[str] = ()) -> Plan:
        return cls.assemble(tasks, [((a,), (b,)) for a, b in edges], thrown_in)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Plan:
        """Read `to_json()` or `to_compact_json()` output back."""
        tasks = [PlannedTask(t["id"], t["node"], Action(t["action"]), t.get("service")) for t in data["tasks"]]
        if "links" in data:
            links = [(tuple(s), tuple(t)) for s, t in data["links"]]
        else:
            links = [((a,), (b,)) for a, b in data["edges"]]
        return cls.assemble(tasks, links, data.get("thrown_in", ()))

    # -- lookups ------------------------------------------------------------------------

    @cached_property
    def index(self) -> dict[str, int]:
        return {t.id: i for i, t in enumerate(self.tasks)}

    @cached_property
    def by_id(self) -> dict[str, PlannedTask]:
        return {t.id: t for t in self.tasks}

    @cached_property
    def in_links(self) -> dict[str, tuple[int, ...]]:
        return self._link_index(1)

    @cached_property
    def out_links(self) -> dict[str, tuple[int, ...]]:
        return self._link_index(0)

    def _link_index(self, side: int) -> dict[str, tuple[int, ...]]:
        found: dict[str, list[int]] = {t.id: [] for t in self.tasks}
        for i, link in enumerate(self.links):
            for tid in link[side]:
                found[tid].append(i)
        return {k: tuple(v) for k, v in found.items()}

    @cached_property
    def heights(self) -> dict[str, int]:
        """Tasks on the longest chain from each task to the end, the task included."""
        height: dict[str, int] = {}
        link_height: dict[int, int] = {}
        for task in reversed(self.tasks):  # plan order is topological
            best = 0
            for i in self.out_links[task.id]:
                if i not in link_height:
                    link_height[i] = max(height[t] for t in self.links[i][1])
                best = max(best, link_height[i])
            height[task.id] = best + 1
        return height

    @cached_property
    def priority(self) -> tuple[str, ...]:
        """Dispatch preference among ready tasks: longest remaining chain first, then the most
        tasks waiting directly on it, then plan order."""
        fanout = {t: sum(len(self.links[i][1]) for i in self.out_links[t]) for t in self.index}
        return tuple(sorted(self.index, key=lambda t: (-self.heights[t], -fanout[t], self.index[t])))

    @cached_property
    def rank(self) -> dict[str, int]:
        """Position of each task in `priority`."""
        return {t: i for i, t in enumerate(self.priority)}

    def predecessors(self, task: str) -> tuple[str, ...]:
        """Tasks that must finish before `task`, in plan order."""
        found = {s for i in self.in_links[task] for s in self.links[i][0]}
        return tuple(sorted(found, key=self.index.__getitem__))

    def successors(self, task: str) -> tuple[str, ...]:
        found = {t for i in self.out_links[task] for t in self.links[i][1]}
        return tuple(sorted(found, key=self.index.__getitem__))

    @cached_property
    def edges(self) -> tuple[tuple[str, str], ...]:
        """Every (before, after) pair, in plan order. Quadratic in a fan-in: prefer `links`
        for big plans."""
        pairs = {(s, t) for sources, targets in self.links for s in sources for t in targets}
        return tuple(sorted(pairs, key=lambda e: (self.index[e[0]], self.index[e[1]])))

    # -- JSON ---------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """What `muster plan` prints."""
        return {
            "tasks": [t.to_json() for t in self.tasks],
            "edges": [list(e) for e in self.edges],
            "stages": [list(s) for s in self.stages],
        }

    def to_compact_json(self) -> dict[str, Any]:
        """Like `to_json` with `links` instead of `edges` (linear in size), plus `thrown_in`."""
        return {
            "tasks": [t.to_json() for t in self.tasks],
            "links": [[list(s), list(t)] for s, t in self.links],
            "stages": [list(s) for s in self.stages],
            "thrown_in": sorted(self.thrown_in, key=self.index.__getitem__),
        }


def _natural(name: str) -> tuple[str | int, ...]:
    return tuple(int(p) if i % 2 else p for i, p in enumerate(re.split(r"(\d+)", name)))
