"""Bring a cluster back to an earlier state (pure): the plan of `rollback --to-job`.

The difference between the cluster now and the target state becomes sub-plans, run one
phase after another (a barrier link between phases):
  1. remove the services the target does not have, on nodes both states have;
  2. delete the nodes the target does not have;
  3. create the nodes the target has and the cluster lost;
  4. add the services the target has on nodes both states have;
  5. if the config differs: configure and restart the services meant to run (so that they run
     with the config put back), configure the ones meant to be stopped;
  6. start the services meant to run that may not (stopped now, not restarted in 5);
  7. stop the services meant to be stopped that may run (running now, or started in 3-4).
Running and stopped are per (node, service) (`readmodel.desired`): 5-7 act on exactly the pairs
concerned, each one plan (`exact`): neither a stop's dependents nor a start's needs are
added, and the dependency rules order the pairs of all services and nodes alike.
Each phase is an ordinary `build_plan`, so every dependency rule holds inside it; task ids
get the phase as a prefix so they never collide.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contracts.catalog import Action, Service
from contracts.layout import NodeSpec
from muster.readmodel.desired import Pair

from .model import Plan, PlannedTask
from .plan import build_plan


@dataclass(frozen=True)
class Restore:
    plan: Plan
    interim: tuple[NodeSpec, ...]
    """The nodes while the job runs: today's nodes plus the ones to create again."""


def restore_plan(services: Mapping[str, Service], current: Sequence[NodeSpec], target: Sequence[NodeSpec], config_changed: bool,
                 stopped_now: Collection[Pair] = (), stopped_then: Collection[Pair] = (), config: Any = None) -> Restore:
    """`stopped_now` / `stopped_then`: the (node, service) pairs meant to be stopped now and in
    the target. `config`: the one the tasks will carry (the target's), whose macros may read the
    addresses of the nodes made again (`plan.build_plan`)."""
    now = {n.id: n for n in current}
    then = {n.id: n for n in target}
    common = [i for i in now if i in then]
    phases: list[Plan] = []

    extra = sorted({s for i in common for s in set(now[i].services) - set(then[i].services)})
    if extra:
        # planned with each node's services the target keeps out of sight: one removal of the
        # services any node loses, on every node losing one, took a service off a node the
        # target keeps it on too
        nodes = [i for i in common if set(now[i].services) - set(then[i].services)]
        losing = [_with(n, [s for s in n.services if s not in extra or s not in then[n.id].services]) if n.id in then else n
                  for n in current]
        phases.append(build_plan(services, losing, "remove-services", services=extra, node_ids=nodes))
    gone = [i for i in now if i not in then]
    if gone:
        phases.append(build_plan(services, current, "shrink", node_ids=gone))
    back = [then[i] for i in then if i not in now]
    # stopped now and meant to be then: no phase throws in their start (before session 36 a
    # restart or a start of what needs one started it, and the last phase stopped it again)
    kept = set(stopped_now) & set(stopped_then)
    interim = [*current, *back]
    # the later phases are planned on the nodes as the first two leave them: without the nodes
    # deleted, nor the services removed (an expand or add-services threw in the start of a
    # service they need on every node that has it, one deleted or removed by then too)
    left = [_with(n, [s for s in n.services if s in then[n.id].services]) for n in interim if n.id not in gone]
    if back:
        phases.append(build_plan(services, left, "expand", node_ids=[n.id for n in back], config=config,
                                 stopped=kept))
    added = {(i, s) for i in common for s in set(then[i].services) - set(now[i].services)}
    missing = sorted({s for _, s in added})
    if missing:
        nodes = sorted({i for i, _ in added})
        # a node getting a service keeps the others it has out of sight: add-services plans
        # each planned service on every planned node that has it (installed and started again)
        widened = [_with(n, sorted({s for s in n.services if n.id not in nodes or s not in missing}
                                   | {s for s in then[n.id].services if (n.id, s) in added})) for n in left]
        phases.append(build_plan(services, widened, "add-services", services=missing, node_ids=nodes, stopped=kept))
    in_target = {(n.id, s) for n in target for s in n.services}
    run, rest = in_target - set(stopped_then), in_target & set(stopped_then)
    if config_changed:
        phases += exact(services, target, "configure-restart", run, kept)
        phases += exact(services, target, "configure", rest, kept)
    start = set() if config_changed else run & set(stopped_now)
    phases += exact(services, target, "start", start, kept)
    started = {(n.id, s) for n in back for s in n.services} | added | (in_target - set(stopped_now))
    # and whatever an earlier phase starts: a start thrown in for what a planned service needs,
    # a start's of what its services need, on a node where it is meant to be stopped (before
    # session 34 left running)
    started |= {(t.node, t.service) for phase in phases for t in phase.tasks if t.action is Action.START and t.service}
    phases += exact(services, target, "stop", rest & started)
    return Restore(chain_phases(phases), tuple(interim))


def exact(services: Mapping[str, Service], nodes: Sequence[NodeSpec], operation: str, pairs: Collection[Pair],
          stopped: Collection[Pair] = ()) -> list[Plan]:
    """The plan of `operation` on exactly these pairs, if any, throwing in no start of the pairs
    `stopped` (meant to be stopped: `build_plan`). Before session 35 a restore
    stopped a service meant to be stopped on every node that has it as a cluster-wide stop
    does, with its dependents on every node: those the target keeps running too; and a
    restore, a configure --restart keeping services stopped, planned the services of each set
    of nodes a phase after another's, so a restart could stop a service under what needs it
    (`pair_phases`, which a repair used until session 36)."""
    return [build_plan(services, nodes, operation, pairs=pairs, stopped=stopped)] if pairs else []


def _with(node: NodeSpec, services: list[str]) -> NodeSpec:
    return node if services == node.services else node.model_copy(update={"services": services})


def chain_phases(phases: Sequence[Plan]) -> Plan:
    """Plans one after another (a barrier link between two), task ids prefixed by the phase
    (`model.phase_of`: a rolling change keeps the phases' order within each batch from them)."""
    tasks: list[PlannedTask] = []
    links: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
    thrown_in: list[str] = []
    previous: tuple[str, ...] = ()
    for n, phase in enumerate(phases, 1):
        name = {t.id: f"p{n}.{t.id}" for t in phase.tasks}
        thrown_in.extend(name[t] for t in phase.thrown_in)
        tasks.extend(PlannedTask(name[t.id], t.node, t.action, t.service) for t in phase.tasks)
        links.extend((tuple(name[s] for s in src), tuple(name[t] for t in dst)) for src, dst in phase.links)
        ids = tuple(name[t.id] for t in phase.tasks)
        if previous and ids:
            links.append((previous, ids))  # a barrier: this phase starts when the last is done
        previous = ids or previous
    return Plan.assemble(tasks, links, thrown_in)
