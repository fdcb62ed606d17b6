"""After an expand or a shrink, a service whose config's macros name the members (`%ip.service.x%`)
runs a config written for the old set of nodes: the drift names it `stale` on the nodes the job
did not configure, and the repair configures and restarts it there (docs/planner.md, "Services
on nodes"). The read model's drift (what `muster cluster drift` and the tracker show) says the
same. A config without such macros is not made stale by a layout change."""

from __future__ import annotations

from typing import Any

from planner_harness import Harness, checked_harness

from contracts import subjects
from contracts.commands import CreateCluster, DryRun, ExpandCluster, RepairCluster, ShrinkCluster
from muster.readmodel.clusters import ClusterInfo

MEMBERS = {"checked": {"peers": "%join(map(ip.service.checked,'$:6222'),',')%"}}


def _shown(h: Harness, cid: str) -> dict[tuple[str, str], str]:
    own = [r for r in h.log.records if r.subject == subjects.cluster_events("default", cid)]
    info = ClusterInfo.from_history(own)
    assert info is not None
    return {(d.node, d.service): d.repair for d in info.drift}


def _running(h: Harness, cid: str, nodes: list[str]) -> set[tuple[str, str]]:
    return {k for k, (state, _, _) in h.cluster(cid).services_state.items() if k[0] in nodes and state == "running"}


async def _cluster(h: Harness, config: dict[str, Any], nodes: int = 2) -> str:
    return (await h.ok(CreateCluster(name="c1", template="hadoop-small", nodes=nodes, config=config))).cluster_id


async def test_an_expand_leaves_the_old_nodes_stale_and_the_repair_configures_them() -> None:
    h = checked_harness()
    cid = await _cluster(h, MEMBERS)
    old = sorted(h.cluster(cid).nodes)
    assert h.cluster(cid).drift() == []
    await h.ok(ExpandCluster(cluster_id=cid, nodes=4))
    drift = {(d.node, d.service): (d.observed, d.repair) for d in h.cluster(cid).drift()}
    # Every running service of the old nodes (each is given the whole config, as a config change makes
    # each outdated); the new nodes were configured with all four.
    assert drift == {(n, s): ("stale", "reconfigure") for n, s in _running(h, cid, old)}
    assert _shown(h, cid) == {k: r for k, (_, r) in drift.items()}
    dry = await h.send(RepairCluster(cluster_id=cid, dry_run=True))
    assert isinstance(dry, DryRun)
    assert {(t["node"], t["action"]) for t in dry.plan["tasks"] if t["service"] == "checked"} == {
        (n, a) for n in old for a in ("configure", "stop", "start", "status")}
    await h.ok(RepairCluster(cluster_id=cid))
    assert h.cluster(cid).drift() == [] and _shown(h, cid) == {}


async def test_a_shrink_leaves_the_remaining_nodes_stale() -> None:
    h = checked_harness()
    cid = await _cluster(h, MEMBERS, nodes=3)
    await h.ok(ShrinkCluster(cluster_id=cid, nodes=2))
    kept = sorted(h.cluster(cid).nodes)
    assert {(d.node, d.service, d.repair) for d in h.cluster(cid).drift()} == {
        (n, s, "reconfigure") for n, s in _running(h, cid, kept)}
    await h.ok(RepairCluster(cluster_id=cid))
    assert h.cluster(cid).drift() == []


async def test_a_config_that_names_no_members_is_not_stale_after_an_expand() -> None:
    h = checked_harness()
    cid = await _cluster(h, {"checked": {"port": 6222, "me": "%ip.self%"}})
    await h.ok(ExpandCluster(cluster_id=cid, nodes=3))
    assert h.cluster(cid).drift() == []
