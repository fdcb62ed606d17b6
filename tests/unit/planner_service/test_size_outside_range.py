"""A cluster left outside its template's size range by a catalog change (the max lowered below its
size, the min raised above it) may move toward the range one step at a time: the answer (and the
dry run) says it is still outside; a change that moves away is refused at once, naming the range."""

from __future__ import annotations

from planner_harness import Harness, demo_catalog

from contracts.catalog import SizeConstraint
from contracts.commands import Accepted, AddServices, DryRun, ExpandCluster, Rejected, ShrinkCluster


def _sized(h: Harness, lo: int, hi: int | None) -> None:
    """A catalog apply: the template's size range changes under the live cluster."""
    catalog = h.catalogs.by_tenant["default"].model_copy(deep=True)
    catalog.clustertemplates["hadoop-small"].constraints.size = SizeConstraint(min=lo, max=hi)
    h.catalogs.by_tenant["default"] = catalog


async def test_a_shrink_toward_a_lowered_max_is_accepted_with_a_note() -> None:
    h = Harness()
    cid = await h.cluster_of(6)
    _sized(h, 2, 3)
    reply = await h.send(ShrinkCluster(cluster_id=cid, nodes=5))
    assert isinstance(reply, Accepted), reply
    assert reply.warnings == ["cluster 'c1' has 6 nodes and will have 5, still outside the size range of template "
                              "'hadoop-small' (2 to 3 nodes), which changed after the cluster was made: it may only shrink "
                              "toward it"]
    await h.settle()
    assert h.job(reply.job_id).state == "succeeded" and len(h.cluster(cid).nodes) == 5
    last = await h.send(ShrinkCluster(cluster_id=cid, nodes=3))  # into the range: nothing to note
    assert isinstance(last, Accepted) and last.warnings == []
    await h.settle()
    assert len(h.cluster(cid).nodes) == 3


async def test_a_dry_run_shows_the_same_note() -> None:
    h = Harness()
    cid = await h.cluster_of(6)
    _sized(h, 2, 3)
    reply = await h.send(ShrinkCluster(cluster_id=cid, nodes=4, dry_run=True))
    assert isinstance(reply, DryRun) and reply.layout is not None and reply.layout.nodes == 4, reply
    assert reply.warnings == ["cluster 'c1' has 6 nodes and will have 4, still outside the size range of template "
                              "'hadoop-small' (2 to 3 nodes), which changed after the cluster was made: it may only shrink "
                              "toward it"]


async def test_an_expand_toward_a_raised_min_is_accepted_with_a_note() -> None:
    h = Harness()
    cid = await h.cluster_of(3)
    _sized(h, 6, 10)
    reply = await h.send(ExpandCluster(cluster_id=cid, nodes=4))
    assert isinstance(reply, Accepted) and reply.warnings and "may only grow toward it" in reply.warnings[0], reply
    await h.settle()
    assert h.job(reply.job_id).state == "succeeded" and len(h.cluster(cid).nodes) == 4


async def test_a_change_away_from_the_range_is_refused_at_once() -> None:
    h = Harness()
    cid = await h.cluster_of(6)
    _sized(h, 2, 3)
    before = len(h.log.records)
    for cmd in (ExpandCluster(cluster_id=cid, nodes=7), ExpandCluster(cluster_id=cid, nodes=7, dry_run=True)):
        reply = await h.send(cmd)
        assert isinstance(reply, Rejected) and reply.field == "nodes" and reply.code == "invalid", reply
        assert reply.reason == ("template 'hadoop-small' allows 2 to 3 nodes (its size constraint); 7 requested; cluster 'c1' has 6, outside "
                                "the size range of template 'hadoop-small' (2 to 3 nodes), which changed after the cluster "
                                "was made: it may only shrink toward it")
    past = await h.send(ShrinkCluster(cluster_id=cid, nodes=1))  # past the range, below its min
    assert isinstance(past, Rejected) and past.reason.startswith("template 'hadoop-small' allows 2 to 3 nodes (its size constraint); 1 requested")
    assert len(h.log.records) == before  # nothing recorded


async def test_a_change_of_services_keeps_the_size_and_is_noted() -> None:
    h = Harness(catalog=demo_catalog(extra={"provisioner": {"actions": {"install": {"type": "simulated", "fields": {}}}}}))
    cid = await h.cluster_of(6)
    _sized(h, 2, 3)
    reply = await h.send(AddServices(cluster_id=cid, services=["extra"]))
    assert isinstance(reply, Accepted) and reply.warnings == [
        "cluster 'c1' has 6 nodes and stays outside the size range of template 'hadoop-small' (2 to 3 nodes), which changed "
        "after the cluster was made: it may only shrink toward it"], reply
    await h.settle()
    assert h.job(reply.job_id).state == "succeeded"
