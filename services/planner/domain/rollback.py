"""The rollback plan of a failed job: undo what had completed, in reverse dependency order.

Inverse of each completed task (docs/planner.md, "Rollback"):
- on a node this job created (its CREATE completed): one DELETE of the machine covers every
  completed task on it (confirm, bootstrap, installs, starts...);
- INSTALL s -> REMOVE s, which also covers s's CONFIGURE and INITIALIZE on that node; but an
  install over a service the node had before the job (`had`: an upgrade's, a repair's
  reinstall) has no inverse: removing it would leave the node without a service its layout
  keeps, so its configure is put back and its stop undone instead;
- START s -> STOP s, but not where s was meant to run before the job (`meant_running`: a
  repair's start) and the job did not stop it: a rollback never stops a service that should
  run (a repair of nodes whose state was unknown stopped every service it could not check);
  one the job stopped and started again is restarted by the rollback (stop, start), on the
  config it puts back;
- STOP s -> START s; REMOVE s -> INSTALL s;
- CONFIGURE s -> CONFIGURE s (the executor supplies the previous config);
- no inverse: BOOTSTRAP, INITIALIZE, DELETE (a deleted machine cannot be brought back), and
  START tasks thrown in for services outside the operation (they were running before).
If u had to finish before v, inverse(v) finishes before inverse(u); a completed task without
an inverse passes the ordering through. DELETEs are not ordered among themselves. One exception:
a configure that came right before its service's stop on a node (configure-restart) is put back
before that stop is undone, not after, so the service starts again on its old config.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from contracts.catalog import Action, Service

from .model import Link, Plan, PlannedTask, task_id

A = Action
_INVERSE = {A.INSTALL: A.REMOVE, A.START: A.STOP, A.STOP: A.START, A.CONFIGURE: A.CONFIGURE, A.REMOVE: A.INSTALL}


def rollback_plan(plan: Plan, completed: Collection[str], services: Mapping[str, Service] | None = None,
                  had: Collection[tuple[str, str]] = (), meant_running: Collection[tuple[str, str]] = ()) -> Plan:
    """Inverse tasks of `completed` (task ids of `plan`), ordered in reverse. With the
    catalog's `services`, an inverse the service does not define (often REMOVE) is left out.
    `had`: the (node, service) pairs of the cluster before the job; `meant_running`: those of
    them meant to run then."""
    done = [t for t in plan.tasks if t.id in completed]
    kept = frozenset(had), frozenset(meant_running)
    inverse = _inverses(done, plan.thrown_in, services, *kept)
    fronts: dict[str, frozenset[str]] = {}
    links: list[Link] = []
    for sources, targets in plan.links:
        after = [inverse[s].id for s in sources if s in inverse]
        before = set().union(*(_front(t, plan, inverse, completed, fronts) for t in targets if t in completed))
        if _config_first(sources, targets, plan, inverse):
            links.extend(_split(after, sorted(before), inverse))
            continue
        links.extend(_split(sorted(before), after, inverse))
    tasks = {t.id: t for t in inverse.values()}
    return Plan.assemble(tasks.values(), links)


def _inverses(done: list[PlannedTask], thrown_in: Collection[str], services: Mapping[str, Service] | None,
              had: frozenset[tuple[str, str]], meant_running: frozenset[tuple[str, str]]) -> dict[str, PlannedTask]:
    created = {t.node for t in done if t.action is A.CREATE}
    installed = {(t.node, t.service) for t in done if t.action is A.INSTALL and (t.node, t.service) not in had}
    # stopped and started again by the job: the rollback restarts it (on the config it puts back)
    restarted = {(t.node, t.service) for t in done if t.action is A.STOP}
    out: dict[str, PlannedTask] = {}
    for t in done:
        if t.node in created:
            out[t.id] = PlannedTask(task_id(t.node, A.DELETE, None), t.node, A.DELETE, None)
            continue
        if t.id in thrown_in or t.service is None or (t.action is A.INSTALL and (t.node, t.service) in had) \
                or (t.action is A.START and (t.node, t.service) in meant_running - restarted):
            continue
        action = A.REMOVE if (t.node, t.service) in installed and t.action in (A.INSTALL, A.CONFIGURE, A.INITIALIZE) else _INVERSE.get(t.action)
        if action is None or (services is not None and not services[t.service].has_action(action)):
            continue
        out[t.id] = PlannedTask(task_id(t.node, action, t.service), t.node, action, t.service)
    return out


def _config_first(sources: tuple[str, ...], targets: tuple[str, ...], plan: Plan, inverse: Mapping[str, PlannedTask]) -> bool:
    """The chain link `configure s -> stop s` on a node, with the configure put back: reversed,
    the old config would be written after the service started again on the new one."""
    if len(sources) != 1 or len(targets) != 1 or sources[0] not in inverse:
        return False
    src, dst = plan.by_id[sources[0]], plan.by_id[targets[0]]
    return inverse[src.id].action is A.CONFIGURE and (dst.node, dst.service, dst.action) == (src.node, src.service, A.STOP)


def _front(task: str, plan: Plan, inverse: Mapping[str, PlannedTask], completed: Collection[str], memo: dict[str, frozenset[str]]) -> frozenset[str]:
    """The nearest inverse tasks at or after `task`: its own, or, if it has none, those reached
    through its completed successors."""
    if task in inverse:
        return frozenset({inverse[task].id})
    if task not in memo:
        memo[task] = frozenset()  # the plan is a DAG; this only guards the recursion
        found: set[str] = set()
        for nxt in plan.successors(task):
            if nxt in completed:
                found |= _front(nxt, plan, inverse, completed, memo)
        memo[task] = frozenset(found)
    return memo[task]


def _split(before: list[str], after: list[str], inverse: Mapping[str, PlannedTask]) -> list[Link]:
    """`before` x `after` without self pairs and without DELETE -> DELETE pairs."""
    deletes = {t.id for t in inverse.values() if t.action is A.DELETE}
    b_del, b_other = [t for t in before if t in deletes], [t for t in before if t not in deletes]
    a_del, a_other = [t for t in after if t in deletes], [t for t in after if t not in deletes]
    out: list[Link] = []
    for src, dst in ((b_other, a_other), (b_del, a_other), (b_other, a_del)):
        if not src or not dst:
            continue
        if set(src) & set(dst):
            out.extend(((s,), (d,)) for s in src for d in dst if s != d)
        else:
            out.append((tuple(src), tuple(dst)))
    return out
