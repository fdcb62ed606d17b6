"""A repair of a live cluster a batch of nodes at a time (`repair --rolling N`): after an expand
the old nodes are stale (their configs name the members before it, decision 0048) and a repair
configured and restarted all of them at once; `configure --restart --rolling N` was the only
rolling way, and it restarted every node, not just the drifted ones. Now the repair takes
`rolling`, and the nodes where it only brings a service up go first: the service has its most
members running when each batch of the others restarts."""

from __future__ import annotations

from planner_harness import checked_harness

from contracts.commands import Accepted, CheckCluster, CreateCluster, DryRun, ExpandCluster, RepairCluster, Rolling

MEMBERS = {"checked": {"peers": "%join(map(ip.service.checked,'$:6222'),',')%"}}


async def test_a_rolling_repair_brings_up_first_then_restarts_the_stale_a_batch_at_a_time() -> None:
    h = checked_harness()
    cid = (await h.ok(CreateCluster(name="c1", template="hadoop-small", nodes=3, config=MEMBERS))).cluster_id
    old = sorted(h.cluster(cid).nodes)
    await h.ok(ExpandCluster(cluster_id=cid, nodes=4))
    [new] = sorted(set(h.cluster(cid).nodes) - set(old))
    h.states[(new, "checked")] = "stopped"  # died since the expand
    await h.ok(CheckCluster(cluster_id=cid))
    fixes = {(d.node, d.repair) for d in h.cluster(cid).drift() if d.service == "checked"}
    assert fixes == {(new, "start"), *((n, "reconfigure") for n in old)}

    dry = await h.send(RepairCluster(cluster_id=cid, dry_run=True, rolling=Rolling(batch=1)))
    assert isinstance(dry, DryRun), dry
    assert dry.plan["rolling"] == {"batches": [[new], *([n] for n in old)], "tolerance": 0}

    del h.states[(new, "checked")]  # what the repair puts right
    h.behaviour = lambda m: "hold"
    reply = await h.send(RepairCluster(cluster_id=cid, rolling=Rolling(batch=1)))
    assert isinstance(reply, Accepted), reply
    await h.settle()
    [planned] = h.events(reply.job_id, "JobPlanned")
    batch = {n: i for i, group in enumerate(planned.batches) for n in group}
    seen: list[int] = []
    while h.held:  # one node's tasks in flight at a time, the batches in order
        in_flight = {batch[m.node.id] for m in h.held}
        assert len(in_flight) == 1, in_flight
        seen.append(in_flight.pop())
        first, h.held = h.held[0], h.held[1:]
        await h.work(first, "succeed")
        await h.settle()
    assert sorted(set(seen)) == [0, 1, 2, 3] and seen == sorted(seen)
    assert h.job(reply.job_id).state == "succeeded" and h.cluster(cid).drift() == []
