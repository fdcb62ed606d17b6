"""Issue #18.7: two clusters could share a name. Names are unique in a tenant among clusters not
deleted, through a claim on `muster.evt.<tenant>.clustername.<name>` fenced by that subject's
sequence (so two planners racing for a name cannot both win)."""

from __future__ import annotations

from typing import Any

from planner_harness import Harness

from contracts import subjects
from contracts.commands import Accepted, CreateCluster, DeleteCluster, Rejected


async def test_a_taken_name_is_refused_naming_its_cluster_until_that_one_is_deleted(h: Harness) -> None:
    first = await h.ok(CreateCluster(name="web", template="hadoop-small", nodes=2))
    claims = await h.log.read(subjects.cluster_name_events("default", "web"))
    assert [(r.type, r.event.cluster_id) for r in claims] == [("ClusterNameClaimed", first.cluster_id)]

    for dry_run in (False, True):
        before = len(h.log.records)
        reply = await h.send(CreateCluster(name="web", template="hadoop-small", nodes=3, dry_run=dry_run))
        assert isinstance(reply, Rejected) and len(h.log.records) == before
        assert reply.reason == (f"cluster name 'web' is taken in tenant 'default' by cluster {first.cluster_id} (active): "
                                "pick another name, or delete that cluster first")
    other = await h.send(CreateCluster(name="web", template="hadoop-small", nodes=2), tenant="other")
    assert not (isinstance(other, Rejected) and "taken" in other.reason), other  # another tenant's names are its own

    await h.ok(DeleteCluster(cluster_id=first.cluster_id))
    again = await h.ok(CreateCluster(name="web", template="hadoop-small", nodes=2))
    assert again.cluster_id != first.cluster_id


async def test_of_two_creates_racing_for_a_name_one_is_refused(h: Harness) -> None:
    """The second planner read the name's subject before the first one's claim landed."""
    first = await h.ok(CreateCluster(name="race", template="hadoop-small", nodes=2))
    real_read = h.log.read

    async def stale(subject: str, *args: Any, **kwargs: Any) -> Any:
        return [] if ".clustername." in subject else await real_read(subject, *args, **kwargs)

    h.log.read = stale  # a view from before the claim
    reply = await h.send(CreateCluster(name="race", template="hadoop-small", nodes=2))
    assert isinstance(reply, Rejected), reply
    assert reply.reason == "cluster name 'race' was taken in tenant 'default' by another create just now: pick another name"
    assert first.cluster_id in {r.event.cluster_id for r in await real_read(subjects.cluster_name_events("default", "race"))}


async def test_a_create_sent_again_keeps_its_own_name(h: Harness) -> None:
    command = CreateCluster(name="again", template="hadoop-small", nodes=2, request_id="again-1")
    first = await h.send(command)
    second = await h.send(command)
    assert isinstance(first, Accepted) and isinstance(second, Accepted) and second.duplicate
