"""The plan of an operation: a DAG of node-level tasks (coopr-facts §2.2-2.4, §4.1).

Pure and deterministic: no IO, no clock, no randomness; the same inputs give the same plan,
task for task and edge for edge. See docs/planner.md for the rules and the task-id scheme.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from contracts.catalog import HARDWARE_ACTIONS, Action, Service
from contracts.layout import NodeSpec

from .dependencies import DependencyResolver, Kind
from .errors import PlanError
from .stages import Link, staged

__all__ = ["OPERATIONS", "RULES", "Plan", "PlanError", "PlannedTask", "Rule", "build_plan", "task_id"]

A = Action
_CREATE = (A.CREATE, A.CONFIRM, A.BOOTSTRAP, A.INSTALL, A.CONFIGURE, A.INITIALIZE, A.START)
OPERATIONS: dict[str, tuple[Action, ...]] = {
    "create": _CREATE,
    "expand": _CREATE,
    "delete": (A.DELETE,),
    "shrink": (A.STOP, A.DELETE),
    "add-services": (A.BOOTSTRAP, A.INSTALL, A.CONFIGURE, A.INITIALIZE, A.START),
    "remove-services": (A.STOP, A.REMOVE),
    "configure": (A.BOOTSTRAP, A.CONFIGURE),
    "configure-restart": (A.BOOTSTRAP, A.STOP, A.CONFIGURE, A.START),
    "start": (A.START,),
    "stop": (A.STOP,),
    "restart": (A.STOP, A.START),
}
"""Each operation's per-service action chain, in order (Coopr's `Actions.actionOrder`)."""

# Operations whose planned nodes get their machine actions even without a planned service.
MACHINE_OPERATIONS = frozenset({"create", "expand", "delete", "shrink"})
_NEED_NODES = frozenset({"expand", "shrink"})
_NEED_SERVICES = frozenset({"add-services", "remove-services"})
ACTION_INDEX = {a: i for i, a in enumerate(Action)}


@dataclass(frozen=True)
class Rule:
    """If A depends on B: B.`before` finishes before A.`after` (reversed: A.`before` before
    B.`after`). Rules with an install-time `before` use the install graph."""

    before: Action
    after: Action
    reverse: bool = False

    @property
    def kind(self) -> Kind:
        return Kind.INSTALL if self.before in (A.INSTALL, A.REMOVE) else Kind.RUNTIME


RULES = (
    Rule(A.START, A.START),
    Rule(A.START, A.INITIALIZE),
    Rule(A.STOP, A.STOP, reverse=True),
    Rule(A.INSTALL, A.INSTALL),
    Rule(A.REMOVE, A.REMOVE, reverse=True),  # muster: Coopr never planned REMOVE
)


_NAME = {a: a.value for a in Action}  # Enum.value is slow in a loop of 10^5


def task_id(node: str, action: Action, service: str | None) -> str:
    """`<node>.<action>` for machine tasks, `<node>.<action>.<service>` for service tasks."""
    return f"{node}.{_NAME[action]}" if service is None else f"{node}.{_NAME[action]}.{service}"


@dataclass(frozen=True, slots=True)
class PlannedTask:
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
    def assemble(
        cls,
        tasks: Iterable[PlannedTask],
        links: Iterable[Link],
        thrown_in: Iterable[str] = (),
        node_order: Sequence[str] = (),
    ) -> Plan:
        """Order and stage the tasks; ties are broken by node (in `node_order`, then first
        appearance), action (Coopr's order) and service name. Links keep their order."""
        by_id = {t.id: t for t in tasks}
        nodes = {n: i for i, n in enumerate(dict.fromkeys([*node_order, *(t.node for t in by_id.values())]))}
        links = [lk for lk in links if lk[0] and lk[1]]

        keys = {t.id: (nodes[t.node], ACTION_INDEX[t.action], t.service or "") for t in by_id.values()}
        stages = staged(list(by_id), links, lambda tid: by_id[tid].node, keys.__getitem__)
        order = [tid for stage in stages for tid in stage]
        pos = {tid: i for i, tid in enumerate(order)}.__getitem__

        def norm(link: Link) -> Link:
            s, t = link
            if len(s) == 1 and len(t) == 1:
                return link
            return tuple(sorted(set(s), key=pos)), tuple(sorted(set(t), key=pos))

        # Links keep the order they were given in (build_plan's is deterministic), once each.
        unique = tuple(dict.fromkeys(map(norm, links)))
        return cls(tuple(by_id[t] for t in order), unique, stages, frozenset(thrown_in))

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


# ---------------------------------------------------------------------------- building


def build_plan(
    catalog_services: Mapping[str, Service],
    nodes: Sequence[NodeSpec],
    operation: str,
    *,
    services: Sequence[str] | None = None,
    node_ids: Sequence[str] | None = None,
) -> Plan:
    """The task DAG of `operation` on the cluster `nodes` (semantics per operation in
    docs/planner.md). Raises PlanError on invalid input or a dependency cycle."""
    if operation not in OPERATIONS:
        raise PlanError(f"unknown operation {operation!r}; operations are {sorted(OPERATIONS)}")
    _check_nodes(nodes)
    cluster = {s for n in nodes for s in n.services}
    if operation == "delete":  # machines go; their services need not be in the catalog
        cluster &= set(catalog_services)
    resolver = DependencyResolver(catalog_services, cluster)
    planned_nodes = _planned_nodes(operation, nodes, node_ids)
    planned_services = _planned_services(operation, resolver, services)
    builder = _Builder(catalog_services, nodes, OPERATIONS[operation])
    for node in nodes:
        if node.id in planned_nodes:
            chosen = [s for s in dict.fromkeys(node.services) if s in planned_services]
            builder.add_node(node.id, chosen, operation in MACHINE_OPERATIONS)
    builder.add_rules(resolver)
    return Plan.assemble(builder.tasks.values(), builder.links(), builder.thrown_in, [n.id for n in nodes])


def _check_nodes(nodes: Sequence[NodeSpec]) -> None:
    seen: set[str] = set()
    for node in nodes:
        if node.id in seen:
            raise PlanError(f"node id {node.id!r} appears twice")
        seen.add(node.id)


def _planned_nodes(operation: str, nodes: Sequence[NodeSpec], node_ids: Sequence[str] | None) -> set[str]:
    known = {n.id for n in nodes}
    if node_ids is None:
        if operation in _NEED_NODES:
            raise PlanError(f"{operation} needs node_ids (the nodes it adds or removes)")
        return known
    unknown = sorted(set(node_ids) - known)
    if unknown:
        raise PlanError(f"unknown node(s) {unknown}: not in the cluster")
    return set(node_ids)


def _planned_services(operation: str, resolver: DependencyResolver, services: Sequence[str] | None) -> set[str]:
    if services is None:
        if operation in _NEED_SERVICES:
            raise PlanError(f"{operation} needs the services to add or remove")
        chosen = set(resolver.cluster)
    else:
        missing = sorted(set(services) - resolver.cluster)
        if missing:
            where = "in the catalog" if set(missing) - set(resolver.catalog) else "on the cluster"
            raise PlanError(f"service(s) {missing} not {where}")
        chosen = set(services)
    if operation == "start":  # and what they need running (coopr-facts §2.4)
        closure = resolver.closure(Kind.RUNTIME)
        chosen |= {d for s in chosen for d in closure[s]}
    elif operation in ("stop", "restart"):  # and what depends on them
        closure = resolver.closure(Kind.RUNTIME, reverse=True)
        chosen |= {d for s in chosen for d in closure[s]}
    return chosen


class _Builder:
    def __init__(self, catalog: Mapping[str, Service], nodes: Sequence[NodeSpec], order: tuple[Action, ...]) -> None:
        self.catalog, self.order = catalog, order
        self.tasks: dict[str, PlannedTask] = {}
        self.chain: dict[tuple[str, str], None] = {}
        self.fanins: list[Link] = []
        self.thrown_in: list[str] = []
        self.hosts: dict[str, list[str]] = {}
        for node in nodes:
            for service in dict.fromkeys(node.services):
                self.hosts.setdefault(service, []).append(node.id)
        self.planned: dict[tuple[Action, str], list[str]] = {}  # (action, service) -> chain tasks
        self._chains: dict[str | None, list[tuple[Action, str | None]]] = {}

    def _add(self, node: str, action: Action, service: str | None) -> str:
        tid = task_id(node, action, service)
        if tid not in self.tasks:
            self.tasks[tid] = PlannedTask(tid, node, action, service)
        return tid

    def _chain_of(self, service: str | None) -> list[tuple[Action, str | None]]:
        if service not in self._chains:
            # A service lacking an action is skipped: the chain goes on from the last one.
            self._chains[service] = [
                (a, None if a in HARDWARE_ACTIONS else service)
                for a in self.order
                if a in HARDWARE_ACTIONS or (service is not None and self.catalog[service].has_action(a))
            ]
        return self._chains[service]

    def add_node(self, node: str, services: list[str], machine: bool) -> None:
        """Each service's chain on `node`; machine tasks are shared by the node's chains. A
        machine operation plans the machine even without services."""
        hardware: dict[Action, str] = {}
        for service in services or ([None] if machine else []):
            previous: str | None = None
            for action, owner in self._chain_of(service):
                if owner is None:
                    tid = hardware.get(action) or hardware.setdefault(action, self._add(node, action, None))
                else:
                    tid = self._add(node, action, owner)
                    self.planned.setdefault((action, owner), []).append(tid)
                if previous is not None:
                    self.chain[(previous, tid)] = None
                previous = tid

    def add_rules(self, resolver: DependencyResolver) -> None:
        for rule in RULES:
            if rule.after not in self.order:
                continue
            for service in sorted({s for a, s in self.planned if a is rule.after}):
                deps = resolver.direct(service, rule.kind, rule.before, rule.reverse)
                sources = [src for dep in sorted(deps) for src in self._sources(rule.before, dep)]
                if sources:  # cross-node fan-in: one link, every host of every dependency
                    self.fanins.append((tuple(sources), tuple(self.planned[(rule.after, service)])))

    def _sources(self, action: Action, service: str) -> list[str]:
        found = []
        for node in self.hosts[service]:
            tid = task_id(node, action, service)
            if tid in self.tasks:
                found.append(tid)
            elif action is A.START:
                # A running service outside the operation: Coopr throws its START in "for
                # safety" (starts are idempotent). Install and stop edges from outside are dropped.
                self.thrown_in.append(self._add(node, action, service))
                found.append(tid)
        return found

    def links(self) -> list[Link]:
        return [((a,), (b,)) for a, b in self.chain] + self.fanins
