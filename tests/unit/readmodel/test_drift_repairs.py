"""The drift the read side shows (`muster cluster drift`, the tracker's cluster view and replay,
the console) says what `muster cluster repair` does: the read model folds the cluster's events
from the log and takes the tenant's catalog, the planner plans the repair; both are asked after
the same check, on random states of services that need each other (a replica and its primary,
a service that uses a name another provides, a chain), and must agree pair by pair, down to the
repair's own plan (an install where the drift says `reinstall`, none where it says `start`, a
start after each service it waits for, and every start, also one thrown in for another, after
the starts of what it needs on every node, as in a create)."""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.append(str(Path(__file__).parents[1] / "planner_service"))  # the planner's harness (a test helper)

from planner_harness import CHECKED, Harness, demo_catalog

from contracts import subjects
from contracts.catalog import Action, ServiceConstraint
from contracts.commands import Accepted, CheckCluster, DryRun, Rejected, RepairCluster
from muster.catalog.needs import runtime_needs
from muster.catalog.store import apply_catalog
from muster.readmodel.clusters import ClusterInfo
from services.planner.domain.model import Plan
from services.planner.domain.observed import repairs
from services.tracker.story import replay_cluster

CHECKS = ["primary", "replica", "watcher", "proxy", "lone"]


def needful() -> Harness:
    """`replica` needs `primary` (one node of it, never with a replica); `watcher` uses `store`,
    which `primary` provides; `proxy` needs `replica` (so `primary` too); `lone` needs nothing."""
    def checked(**deps: Any) -> dict[str, Any]:
        return {**CHECKED, "dependencies": {"runtime": {"requires": [], "uses": [], **deps}}}

    catalog = demo_catalog(primary={**CHECKED, "dependencies": {"provides": ["store"]}}, replica=checked(requires=["primary"]),
                           watcher=checked(uses=["store"]), proxy=checked(requires=["replica"]), lone=CHECKED)
    template = catalog.clustertemplates["hadoop-small"]
    template.defaults.services += CHECKS
    template.constraints.layout.cantcoexist.append(["primary", "replica"])
    template.constraints.services["primary"] = ServiceConstraint.model_validate({"quantities": {"min": 1, "max": 1}})
    return Harness(catalog=catalog)


async def _checked(h: Harness, states: Callable[[Any], dict[tuple[str, str], str]]) -> str:
    """A 3-node cluster, checked while `status` answers `states(cluster)` (else running)."""
    cid = await h.cluster_of(3)
    h.states.update(states(h.cluster(cid)))
    reply = await h.send(CheckCluster(cluster_id=cid))
    assert isinstance(reply, Accepted), reply
    await h.settle()
    return cid


def _shown(h: Harness, cid: str) -> ClusterInfo:
    own = [r for r in h.log.records if r.subject == subjects.cluster_events("default", cid)]
    info = ClusterInfo.from_history(own, h.catalogs.by_tenant["default"].services)
    assert info is not None
    return info


async def _agree(h: Harness, cid: str) -> ClusterInfo:
    """The read side's drift against the planner's repairs and the repair's plan."""
    services = h.catalogs.by_tenant["default"].services
    shown = _shown(h, cid)
    assert {(d.node, d.service): d.repair for d in shown.drift if d.repair} == repairs(services, h.cluster(cid))
    dry = await h.send(RepairCluster(cluster_id=cid, dry_run=True))
    if not any(d.repair for d in shown.drift):
        assert isinstance(dry, Rejected) and "no drift to repair" in dry.reason
        return shown
    assert isinstance(dry, DryRun), dry
    stage = {t: i for i, ids in enumerate(dry.plan["stages"]) for t in ids}
    tasks = {(t["node"], t["service"], t["action"]): stage[t["id"]] for t in dry.plan["tasks"]}
    assert {(n, s) for n, s, a in tasks if a == "install"} == {(d.node, d.service) for d in shown.drift if d.repair == "reinstall"}
    assert {(d.node, d.service) for d in shown.drift if d.repair in ("start", "reinstall")} <= {(n, s) for n, s, a in tasks if a == "start"}
    assert _started_after_what_they_wait_for(shown, dry) == []
    assert _started_before_what_they_need(h, cid, dry) == []
    return shown


def _started_after_what_they_wait_for(shown: ClusterInfo, dry: DryRun) -> list[tuple[str, str, str]]:
    """(node, service, need) of every pair the repair starts before something it waits for."""
    stage = {t: i for i, ids in enumerate(dry.plan["stages"]) for t in ids}
    starts = [(t["node"], t["service"], stage[t["id"]]) for t in dry.plan["tasks"] if t["action"] == "start"]
    late = []
    for d in shown.drift:
        if not d.after:
            continue
        began = max(i for n, s, i in starts if (n, s) == (d.node, d.service))  # its own phase's start (the last)
        late += [(d.node, d.service, need) for need in d.after if not any(s == need and i < began for _, s, i in starts)]
    return late


def _started_before_what_they_need(h: Harness, cid: str, dry: DryRun) -> list[tuple[str, str, str]]:
    """(start, node, need) of every start in the repair's plan, a pair's own or one thrown in for
    another, not preceded by a start of something its service needs (`muster/catalog/needs.py`)
    on a node that hosts it: a create orders every start so, on every node."""
    services, nodes = h.catalogs.by_tenant["default"].services, h.cluster(cid).nodes
    needs = runtime_needs(services, {s for n in nodes.values() for s in n.services})
    assert needs is not None
    plan = Plan.from_json(dry.plan)
    before: dict[str, set[str]] = {}
    for task in plan.tasks:  # in stage order, a topological one
        before[task.id] = {p for q in plan.predecessors(task.id) for p in (q, *before[q])}
    missed = []
    for t in plan.tasks:
        if t.action is not Action.START or t.service is None:
            continue
        ran = {(plan.by_id[b].node, plan.by_id[b].service) for b in before[t.id] if plan.by_id[b].action is Action.START}
        missed += [(t.id, n, need) for need in sorted(needs[t.service]) if services[need].has_action(Action.START)
                   for n in sorted(nodes) if need in nodes[n].services and (n, need) not in ran]
    return missed


async def test_a_replica_failed_with_its_primary_down_is_started_after_it_on_every_read_path() -> None:
    h = needful()

    def states(cluster: Any) -> dict[tuple[str, str], str]:
        out = {(n, "primary"): "stopped" for n, spec in cluster.nodes.items() if "primary" in spec.services}
        return out | {(n, "replica"): "failed" for n, spec in cluster.nodes.items() if "replica" in spec.services}

    cid = await _checked(h, states)
    shown = await _agree(h, cid)
    replicas = [d for d in shown.drift if d.service == "replica"]
    assert replicas and all((d.repair, d.after) == ("start", ("primary",)) for d in replicas)
    assert all(d.to_json()["after"] == ["primary"] and d.to_json()["repair"] == "start" for d in replicas)
    # The tracker's replay (the console's cluster page, `muster replay`) reads the catalog from
    # the log, as it stood at the point asked.
    checked_at = h.log.records[-1].seq
    await apply_catalog(h.log, "default", h.catalogs.by_tenant["default"])
    now = await replay_cluster(h.log, "default", cid, None, None)
    assert now is not None and [d for d in now["cluster"]["drift"] if d["service"] == "replica"] == [d.to_json() for d in replicas]
    # Without the catalog (none in the log at that point) each pair says its own repair.
    before = await replay_cluster(h.log, "default", cid, checked_at, None)
    assert before is not None and {d["repair"] for d in before["cluster"]["drift"] if d["service"] == "replica"} == {"reinstall"}


@pytest.mark.parametrize("seed", range(60))
async def test_random_states_the_drift_says_what_the_repair_plans(seed: int) -> None:
    pick = random.Random(seed)
    h = needful()

    def states(cluster: Any) -> dict[tuple[str, str], str]:
        return {(n, s): pick.choice(["running", "running", "stopped", "failed", "failed", "unknown"])
                for n, spec in sorted(cluster.nodes.items()) for s in spec.services if s in CHECKS}

    await _agree(h, await _checked(h, states))

