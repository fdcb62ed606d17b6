"""Planning an operation: a DAG of node-level tasks (coopr-facts §2.2-2.4, §4.1).

Pure and deterministic: no IO, no clock, no randomness; the same inputs give the same plan,
task for task and edge for edge. See docs/planner.md for the rules and the task-id scheme;
which operations exist and how each is planned is the operations table (`operations.py`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contracts.catalog import HARDWARE_ACTIONS, Action, Service
from contracts.layout import NodeSpec
from muster.macros import services_read

from .dependencies import DependencyResolver, Kind
from .errors import PlanError, services_named
from .model import Link, Plan, PlannedTask, task_id
from .operations import CHAINS, OPERATIONS, Operation

__all__ = ["CHAINS", "RULES", "Plan", "PlanError", "PlannedTask", "Rule", "build_plan", "task_id"]

A = Action


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


# ---------------------------------------------------------------------------- building


def build_plan(
    catalog_services: Mapping[str, Service],
    nodes: Sequence[NodeSpec],
    operation: str,
    *,
    services: Sequence[str] | None = None,
    node_ids: Sequence[str] | None = None,
    config: Any = None,
    pairs: Collection[tuple[str, str]] | None = None,
    stopped: Collection[tuple[str, str]] = (),
) -> Plan:
    """The task DAG of `operation` on the cluster `nodes` (semantics per operation in
    docs/planner.md). `config`: the cluster's config the tasks will carry, whose macros may read
    other nodes' addresses (`_Builder.add_reads`). `pairs` instead of `services` and `node_ids`:
    exactly these (node, service) pairs, without the operation's closure (a restore puts back a
    state where a service was stopped and what needs it ran: a stop's dependents are not its
    to stop). `stopped`: (node, service) pairs meant to be stopped (the user's `stop`), whose
    start is never thrown in: a thrown-in start is for a service that runs (an idempotent start,
    Coopr's safety), and starting one the user stopped changes what was asked (docs/planner.md,
    "Subsets"; decision 53). Raises PlanError on invalid input or a dependency cycle."""
    if operation not in CHAINS:
        raise PlanError(f"unknown operation {operation!r}; operations are {sorted(CHAINS)}")
    op = OPERATIONS[operation]
    _check_nodes(nodes)
    cluster = {s for n in nodes for s in n.services}
    if operation == "delete":  # machines go; their services need not be in the catalog
        cluster &= set(catalog_services)
    resolver = DependencyResolver(catalog_services, cluster)
    wanted = None if pairs is None else _checked_pairs(nodes, pairs, services, node_ids)
    if wanted is not None:
        planned_nodes, planned_services = {n for n, _ in wanted}, {s for _, s in wanted}
    else:
        planned_nodes, planned_services = _planned_nodes(op, nodes, node_ids), _planned_services(op, resolver, services)
    builder = _Builder(catalog_services, nodes, op.chain, stopped)
    for node in nodes:
        if node.id in planned_nodes:
            chosen = [s for s in dict.fromkeys(node.services) if s in planned_services
                      and (wanted is None or (node.id, s) in wanted)]
            builder.add_node(node.id, chosen, op.machine)
    builder.add_rules(resolver, every_need=wanted is not None)
    builder.add_reads(config)
    return Plan.assemble(builder.tasks.values(), builder.links(), builder.thrown_in)


def _check_nodes(nodes: Sequence[NodeSpec]) -> None:
    seen: set[str] = set()
    for node in nodes:
        if node.id in seen:
            raise PlanError(f"node id {node.id!r} appears twice")
        seen.add(node.id)


def _checked_pairs(nodes: Sequence[NodeSpec], pairs: Collection[tuple[str, str]], services: Sequence[str] | None,
                   node_ids: Sequence[str] | None) -> set[tuple[str, str]]:
    if services is not None or node_ids is not None:
        raise PlanError("pairs name the nodes and services: not with services or node_ids")
    wanted = set(pairs)
    have = {(n.id, s) for n in nodes for s in n.services}
    absent = sorted(wanted - have)
    if absent:
        raise PlanError(f"(node, service) pair(s) {absent} not on the cluster")
    return wanted


def _planned_nodes(op: Operation, nodes: Sequence[NodeSpec], node_ids: Sequence[str] | None) -> set[str]:
    known = {n.id for n in nodes}
    if node_ids is None:
        if op.needs_nodes:
            raise PlanError(f"{op.name} needs node_ids (the nodes it adds or removes)")
        return known
    unknown = sorted(set(node_ids) - known)
    if unknown:
        raise PlanError(f"unknown node(s) {unknown}: not in the cluster")
    return set(node_ids)


def _planned_services(op: Operation, resolver: DependencyResolver, services: Sequence[str] | None) -> set[str]:
    if services is None:
        if op.needs_services:
            raise PlanError(f"{op.name} needs the services to add or remove")
        chosen = set(resolver.cluster)
    else:
        missing = sorted(set(services) - resolver.cluster)
        if missing:
            where = "in the catalog" if set(missing) - set(resolver.catalog) else "on the cluster"
            raise PlanError(f"{services_named(missing)} not {where}")
        chosen = set(services)
    if op.closure == "requires":  # and what they need running (coopr-facts §2.4)
        closure = resolver.closure(Kind.RUNTIME)
        chosen |= {d for s in chosen for d in closure[s]}
    elif op.closure == "dependents":  # and what depends on them
        closure = resolver.closure(Kind.RUNTIME, reverse=True)
        chosen |= {d for s in chosen for d in closure[s]}
    return chosen


class _Builder:
    def __init__(self, catalog: Mapping[str, Service], nodes: Sequence[NodeSpec], order: tuple[Action, ...],
                 stopped: Collection[tuple[str, str]] = ()) -> None:
        self.catalog, self.order = catalog, order
        self.stopped = frozenset(stopped)
        self.tasks: dict[str, PlannedTask] = {}
        self.chain: dict[tuple[str, str], None] = {}
        self.fanins: list[Link] = []
        self.thrown_in: list[str] = []
        self.thrown: dict[str, list[str]] = {}  # service -> its thrown-in starts
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
        chains: list[str | None] = list(services) if services else ([None] if machine else [])
        for service in chains:
            previous: str | None = None
            for action, owner in self._chain_of(service):
                tid = self._add(node, action, owner)
                if owner is not None:
                    self.planned.setdefault((action, owner), []).append(tid)
                if previous is not None:
                    self.chain[(previous, tid)] = None
                previous = tid

    def add_rules(self, resolver: DependencyResolver, every_need: bool = False) -> None:
        """`every_need`: a thrown-in start's own needs are thrown in too (exact pairs, without
        the closure that plans them in an operation on services: every start still follows the
        starts of what it needs, on every node, as in a create)."""
        for rule in RULES:
            if rule.after not in self.order:
                continue
            for service in sorted({s for a, s in self.planned if a is rule.after}):
                deps = resolver.direct(service, rule.kind, rule.before, rule.reverse)
                sources = [src for dep in sorted(deps) for src in self._sources(rule.before, dep)]
                if sources:  # cross-node fan-in: one link, every host of every dependency
                    self.fanins.append((tuple(sources), tuple(self.planned[(rule.after, service)])))
        if every_need and A.START in self.order:
            self._throw_in_needs(resolver)
        self._order_thrown_in(resolver)

    def _throw_in_needs(self, resolver: DependencyResolver) -> None:
        todo, seen = sorted(self.thrown), set(self.thrown)
        while todo:
            for dep in sorted(resolver.direct(todo.pop(), Kind.RUNTIME, A.START)):
                self._sources(A.START, dep)
                if dep in self.thrown and dep not in seen:
                    seen.add(dep)
                    todo.append(dep)

    def add_reads(self, config: Any) -> None:
        """A service task whose macros (the cluster's config, or its own action's fields: the
        ansible automator expands its `vars`) read the host names or addresses of the nodes with
        a service waits for the plan's confirm of each of those nodes it creates, where the
        address is recorded (a create's or a confirm's results). Without it the task could go in its own
        node's segment, queued with the nodes map of before the others were up (decision 58,
        item 8). One link per set of confirms read; a task whose chain predecessor already
        waits for them gets none. The own node's confirm stays among the sources (it precedes
        the task anyway): one link for all the nodes, not one per node without itself."""
        from_config = frozenset(services_read(config)) if config else frozenset()
        fields = {(name, action): frozenset(services_read(step.fields)) for name in self.hosts if name in self.catalog
                  for action, step in self.catalog[name].provisioner.actions.items()}
        if not (from_config or any(fields.values())):
            return  # nothing reads another node (the demo catalog): no pass over the tasks
        # The nodes the plan makes: another node's address is in the map already (a repair's
        # confirm of a node that was up finds it where it was; waiting on it would serialize
        # the repair's starts behind every reconnected node).
        confirms = {t.node: task_id(t.node, A.CONFIRM, None) for t in self.tasks.values() if t.action is A.CREATE}
        confirms = {n: c for n, c in confirms.items() if c in self.tasks}
        if not confirms:
            return
        before = {b: a for a, b in self.chain}
        made = {s: [n for n in hosts if n in confirms] for s, hosts in self.hosts.items()}
        reads: dict[str, frozenset[str]] = {}  # task -> the services it and its chain before it read
        targets: dict[frozenset[str], list[str]] = {}
        for task in self.tasks.values():  # a chain's tasks in order: a task's predecessor first
            if task.service is None or task.action in HARDWARE_ACTIONS:
                continue
            read = from_config | fields.get((task.service, task.action), frozenset())
            inherited = reads.get(before.get(task.id, ""), frozenset())
            reads[task.id] = read | inherited
            if any(n != task.node for s in read - inherited for n in made.get(s, ())):
                targets.setdefault(read, []).append(task.id)
        for read, tasks in targets.items():
            self.fanins.append((tuple(confirms[n] for s in sorted(read) for n in made.get(s, ())), tuple(tasks)))

    def _order_thrown_in(self, resolver: DependencyResolver) -> None:
        """A thrown-in start waits for the plan's starts of what it needs, on every node: Coopr
        gave it no edges, so a start or a repair on some nodes started a replica on another
        node together with the primary thrown in for the planned ones, not after it."""
        if not self.thrown:
            return
        needs = resolver.closure(Kind.RUNTIME)
        starts: dict[str, list[str]] = {}
        for task in self.tasks.values():
            if task.action is A.START and task.service is not None:
                starts.setdefault(task.service, []).append(task.id)
        for service, thrown in self.thrown.items():
            sources = [tid for need in sorted(needs[service]) for tid in starts.get(need, ())]
            if sources:
                self.fanins.append((tuple(sources), tuple(thrown)))

    def _sources(self, action: Action, service: str) -> list[str]:
        found = []
        for node in self.hosts[service]:
            tid = task_id(node, action, service)
            if tid in self.tasks:
                found.append(tid)
            elif action is A.START and (node, service) not in self.stopped:
                # A running service outside the operation: Coopr throws its START in "for
                # safety" (starts are idempotent). Install and stop edges from outside are dropped,
                # and so is a start of one meant to be stopped: it does not run, and is to stay so.
                self.thrown_in.append(self._add(node, action, service))
                self.thrown.setdefault(service, []).append(tid)
                found.append(tid)
        return found

    def links(self) -> list[Link]:
        return [((a,), (b,)) for a, b in self.chain] + self.fanins
