"""The rollback plan of a failed job: undo what had completed, in reverse dependency order.

Inverse of each completed task (docs/planner.md, "Rollback"):
- on a node this job created (its CREATE completed): one DELETE of the machine covers every
  completed task on it (confirm, bootstrap, installs, starts...);
- INSTALL s -> REMOVE s, which also covers s's CONFIGURE and INITIALIZE on that node; but an
  install over a service the node had before the job (`had`: an upgrade's, a repair's
  reinstall) has no inverse: removing it would leave the node without a service its layout
  keeps, so its configure is put back and its stop undone instead;
- each service the node had before the job ends in its state of then (`meant_stopped`, from
  the log's `JobPlanned.previous_stopped`): meant to run, a START the job did not stop it for
  has no inverse (a rollback never stops a service that should run: a repair of nodes whose
  state was unknown stopped every service it could not check), and one it stopped (and maybe
  started again) is started (restarted: stop, start) on the config the rollback puts back;
  meant to be stopped, its STOP has no inverse and a START is undone by STOP, a thrown-in one
  too (a configure-restart's rollback started a service the user had stopped);
- otherwise START s -> STOP s; STOP s -> START s; REMOVE s -> INSTALL s, CONFIGURE s, and
  INITIALIZE s, which goes before the START of its stop's inverse when there is one (after the
  starts of what s needs, as add-services does): a removed service comes back configured, not
  only installed (its start found no config: the remove had deleted it);
- CONFIGURE s -> CONFIGURE s (the executor supplies the previous config);
- no inverse: BOOTSTRAP, INITIALIZE, DELETE (a deleted machine cannot be brought back, nor
  anything done on it: a shrink's stops there), and START tasks thrown in for services outside
  the operation (they were running before), but for those meant to be stopped.
The order (decision 51): if u had to finish before v, even through other tasks, inverse(v)
finishes before inverse(u). A task without an inverse passes the order through: one completed
that is not undone, and one that never ran (a rolling change writes off a node's tasks and goes
on with its next batch). Exceptions: a created node's DELETE goes after the inverses nearest it
(last: it stands in for tasks before and after others), passing the order through too, and
DELETEs are not ordered among themselves; a configure that came right before its service's stop
on a node (configure-restart) is put back before that stop is undone, not after, so the service
starts again on its old config (what came after the stop need not wait for it).
Phased plans (`p1.`, `p2.`...): inverse ids have no phase, so an inverse two phases make is the
first one's (`_once`), and "restarted" means stopped earlier in the plan (`_kept_ids`).
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from contracts.catalog import Action, Service
from muster.readmodel.desired import Pair

from .model import Link, Plan, PlannedTask, phase_of, task_id

A = Action
_INVERSE = {A.INSTALL: A.REMOVE, A.START: A.STOP, A.STOP: A.START, A.CONFIGURE: A.CONFIGURE}



def rollback_plan(plan: Plan, completed: Collection[str], services: Mapping[str, Service] | None = None,
                  had: Collection[Pair] = (), meant_stopped: Collection[Pair] | None = None) -> Plan:
    """Inverse tasks of `completed` (task ids of `plan`), ordered in reverse. With the
    catalog's `services`, an inverse the service does not define (often REMOVE) is left out.
    `had`: the (node, service) pairs of the cluster before the job; `meant_stopped`: those of
    them meant to be stopped then, the others meant to run (None: not known, a v1 plan's, and
    every start and stop is undone)."""
    inverse = inverses(plan, completed, services, had, meant_stopped)
    deletes = frozenset(u.id for chain in inverse.values() for u in chain if u.action is A.DELETE)
    front = _Fronts(plan, inverse, deletes)
    links: list[Link] = [((a.id,), (b.id,)) for chain in inverse.values() for a, b in itertools.pairwise(chain)]
    for i, (sources, targets) in enumerate(plan.links):
        after = [inverse[s][0].id for s in sources if s in inverse]
        if not after:
            continue
        if _config_first(sources, targets, plan, inverse):
            links.append(((after[0],), (inverse[targets[0]][0].id,)))  # before the stop is undone, and only that
            continue
        links.extend(_split(front.of_link(i), after, deletes))
    tasks = {t.id: t for chain in inverse.values() for t in chain}
    return Plan.assemble(tasks.values(), links)


def inverses(plan: Plan, completed: Collection[str], services: Mapping[str, Service] | None = None,
             had: Collection[Pair] = (), meant_stopped: Collection[Pair] | None = None) -> dict[str, tuple[PlannedTask, ...]]:
    """Each completed task that has an inverse, and the tasks that undo it in their order
    (`rollback_plan`'s arguments): the tasks `rollback_plan` orders."""
    done = [t for t in plan.tasks if t.id in completed]
    then = _Before(frozenset(had), None if meant_stopped is None else frozenset(meant_stopped) & frozenset(had))
    return _inverses(done, plan.thrown_in, services, then)


@dataclass(frozen=True)
class _Before:
    """The cluster's services before the job, and which of them were meant to be stopped."""
    had: frozenset[Pair]
    stopped: frozenset[Pair] | None

    def running(self, pair: Pair) -> bool:
        return self.stopped is not None and pair in self.had and pair not in self.stopped

    def stopped_then(self, pair: Pair) -> bool:
        return self.stopped is not None and pair in self.stopped


def _inverses(done: list[PlannedTask], thrown_in: Collection[str], services: Mapping[str, Service] | None,
              before: _Before) -> dict[str, tuple[PlannedTask, ...]]:
    """Each completed task's inverse: the tasks that undo it, in order (most often one)."""
    created = {t.node for t in done if t.action is A.CREATE}
    # a machine the job deleted is gone: nothing on it can be undone (its services' starts were
    # tried on no machine, failed, and the rollback needed attention for good)
    deleted = {t.node for t in done if t.action is A.DELETE} - created
    installed = {(t.node, t.service) for t in done if t.action is A.INSTALL and (t.node, t.service) not in before.had}
    removed = {(t.node, t.service) for t in done if t.action is A.REMOVE}
    kept = _kept_ids(done, thrown_in, before)
    # a removed service started again is initialized right before (after the starts of what it
    # needs, as add-services does: the reverse of its stop's order); one left stopped, after its configure
    started = {(t.node, t.service) for t in done if t.action is A.STOP and t.id not in kept}
    out: dict[str, tuple[PlannedTask, ...]] = {}
    machine: dict[str, tuple[PlannedTask, ...]] = {}
    for t in done:
        if t.node in created:
            if t.node not in machine:  # one for the node's tasks (a 10,000-node create has 170,000)
                machine[t.node] = (PlannedTask(task_id(t.node, A.DELETE, None), t.node, A.DELETE, None),)
            out[t.id] = machine[t.node]
            continue
        if t.service is None or t.node in deleted or t.id in kept:
            continue
        pair = (t.node, t.service)
        if t.action is A.REMOVE:
            actions: tuple[Action | None, ...] = (A.INSTALL, A.CONFIGURE) + (() if pair in started else (A.INITIALIZE,))
        elif t.action is A.STOP and pair in removed:
            actions = (A.INITIALIZE, A.START)
        else:
            actions = (A.REMOVE if pair in installed and t.action in (A.INSTALL, A.CONFIGURE, A.INITIALIZE) else _INVERSE.get(t.action),)
        chain = tuple(PlannedTask(task_id(t.node, a, t.service), t.node, a, t.service) for a in actions
                      if a is not None and (services is None or services[t.service].has_action(a)))
        if chain:
            out[t.id] = chain
    return _once(done, out)


def _once(done: list[PlannedTask], out: dict[str, tuple[PlannedTask, ...]]) -> dict[str, tuple[PlannedTask, ...]]:
    """Each inverse task belongs to the first phase that makes it. A phased plan (a repair, a
    rollback to a job, a configure-restart keeping services stopped) may start one service on
    one node in two phases, or work on a node it created in two: the inverses are one task
    (`undo.<node>.<action>.<service>`, `undo.<node>.delete`: no phase in the id), which was
    ordered both before and after what the later phase did (a cycle). It is undone where the
    first phase's is, last, which puts back the state of before the job; a later task left
    without an inverse passes the order through. Within a phase, as in an unphased plan, the
    tasks one inverse covers share it, as ever."""
    first: dict[str, int] = {}
    for t in done:  # plan order: the phases in turn
        phase = phase_of(t)
        for u in out.get(t.id, ()):
            first.setdefault(u.id, phase)
        undo = out.get(t.id, ())
        kept = undo if all(first[u.id] == phase for u in undo) else tuple(u for u in undo if first[u.id] == phase)
        if kept:
            out[t.id] = kept
        else:
            out.pop(t.id, None)
    return out


def _kept_ids(done: list[PlannedTask], thrown_in: Collection[str], before: _Before) -> set[str]:
    """The completed service tasks `_kept` leaves as they are. A start is one of a service
    stopped and started again (restarted: the rollback restarts it, on the config it puts back)
    if the job stopped it before, in plan order: a phased plan may start a service meant to run
    (a no-op) in one phase and stop it in a later one, undone by starting it, and no more."""
    stopped: set[Pair] = set()
    kept: set[str] = set()
    for t in done:
        if not t.service:
            continue
        pair = (t.node, t.service)
        if _kept(t, pair, t.id in thrown_in, pair in stopped, before):
            kept.add(t.id)
        if t.action is A.STOP:
            stopped.add(pair)
    return kept


def _kept(t: PlannedTask, pair: Pair, thrown_in: bool, restarted: bool, before: _Before) -> bool:
    """A completed service task the rollback leaves as it is: what it did is the state of
    before the job (or, an install over what the node had, is put right by its configure and
    stop's inverses)."""
    if t.action is A.START:
        if before.stopped_then(pair):
            return False  # meant to be stopped: stopped again, even thrown in
        return thrown_in or (before.running(pair) and not restarted)
    if t.action is A.STOP:
        return before.stopped_then(pair)
    return t.action is A.INSTALL and pair in before.had


def _config_first(sources: tuple[str, ...], targets: tuple[str, ...], plan: Plan,
                  inverse: Mapping[str, tuple[PlannedTask, ...]]) -> bool:
    """The chain link `configure s -> stop s` on a node, with the configure put back and the stop
    undone: reversed, the old config would be written after the service started again on the
    new one. (A stop not undone, one that never ran, passes the order through as ever: what
    came after it is undone before the configure.)"""
    if len(sources) != 1 or len(targets) != 1 or sources[0] not in inverse or targets[0] not in inverse:
        return False
    src, dst = plan.by_id[sources[0]], plan.by_id[targets[0]]
    return inverse[src.id][0].action is A.CONFIGURE and (dst.node, dst.service, dst.action) == (src.node, src.service, A.STOP)


_NONE: frozenset[str] = frozenset()


class _Front(NamedTuple):
    """The nearest inverse tasks at or after a task: those not DELETEs, and created nodes' DELETEs."""
    undone: frozenset[str]
    deletes: frozenset[str]


_NOTHING = _Front(_NONE, _NONE)


class _Fronts:
    """The nearest inverse tasks at or after a link's targets (`of_link`): each task's own (the
    last of them) or, for a task without one, those at or after its successors. A task not
    undone passes the order through, one done and one that never ran alike (a rolling change
    writes a node's tasks off and goes on with its next batch: the batches on either side of
    one written off wholly were undone at once). So does a created node's DELETE, last of all
    (`_split`), which still goes after what is nearest. Computed once, in reverse plan order
    (topological), for every task: a link's front once, shared by its sources."""

    def __init__(self, plan: Plan, inverse: Mapping[str, tuple[PlannedTask, ...]], deletes: frozenset[str]) -> None:
        self.plan = plan
        self._links: dict[int, _Front] = {}
        self._tasks: dict[str, _Front] = {}  # none for a task after the last one undone: all after it never ran
        last_undone = max((plan.index[t] for t in inverse), default=-1)
        for task in reversed(plan.tasks[:last_undone + 1]):
            undo = inverse.get(task.id)
            last = undo[-1].id if undo else None
            if last is not None and last not in deletes:
                self._tasks[task.id] = _Front(frozenset((last,)), _NONE)
                continue
            after = [self.of_link(i) for i in plan.out_links[task.id]]
            if last is not None:
                self._tasks[task.id] = _Front(_union([f.undone for f in after]), frozenset((last,)))
            else:
                self._tasks[task.id] = _joined(after)

    def of_link(self, i: int) -> _Front:
        if i not in self._links:
            self._links[i] = _joined([self._tasks.get(t, _NOTHING) for t in self.plan.links[i][1]])
        return self._links[i]


def _joined(fronts: list[_Front]) -> _Front:
    """Shared when only one is not empty (most often: a chain), made only otherwise."""
    full = [f for f in fronts if f.undone or f.deletes]
    if len(full) <= 1:
        return full[0] if full else _NOTHING
    return _Front(_union([f.undone for f in full]), _union([f.deletes for f in full]))


def _union(sets: list[frozenset[str]]) -> frozenset[str]:
    """Shared when only one is not empty (a fan-in's sources share its front; a copy each made
    the walk grow with the square of the nodes)."""
    full = [s for s in sets if s]
    if len(full) <= 1:
        return full[0] if full else _NONE
    return frozenset().union(*full)


def _split(before: _Front, after: list[str], deletes: frozenset[str]) -> list[Link]:
    """`before` x `after` without self pairs and without DELETE -> DELETE pairs (`deletes`:
    the inverse tasks that are one, once for the plan: a set per link made a big create's
    rollback take minutes)."""
    a_del, a_other = [t for t in after if t in deletes], [t for t in after if t not in deletes]
    out: list[Link] = []
    # A created node's one DELETE stands in for its tasks before and after a task elsewhere
    # (an expand starting a service the user had stopped on an old node, between the new
    # node's zookeeper and its datanode): ordered both ways, a cycle. It goes after, always:
    # deletes are then sinks, in no cycle, and the node goes last, which is safe whatever ran on it.
    for src, dst in ((before.undone, a_other), (a_other, before.deletes), (before.undone, a_del)):
        if not src or not dst:
            continue
        if set(src) & set(dst):
            out.extend(((s,), (d,)) for s in sorted(src) for d in dst if s != d)
        else:
            out.append((tuple(sorted(src)), tuple(sorted(dst))))
    return out
