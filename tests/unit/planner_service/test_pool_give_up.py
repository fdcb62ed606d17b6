"""A job on a pool that ends without the hosts it asked for, or with hosts its cluster no longer
has (services/planner/pools.py), on in-memory fakes: a create whose deadline passed frees its
cluster's name, a create that failed for good with nothing made gives its hosts back, and a
retry of a job that gave up asks the pool again with its deadline counted from the retry
(docs/pools.md, "Giving up")."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

from planner_harness import KEY, Harness, Mirror

from bench.pool_bench import ONE_NODE_CATALOG
from contracts import subjects
from contracts.catalog import Catalog
from contracts.commands import Accepted, CancelJob, CreateCluster, ExpandCluster, PoolWait, Rejected, RetryJob
from contracts.pools import HostSpec, NodeNeed, PoolHostsRequested, PoolNodesReported, PoolRequest
from contracts.records import Recorded
from services.pool.domain import intake
from services.pool.domain.pool import Pool, PoolCreated


def _setup(*hosts: str, size: int = 1) -> tuple[Harness, Pool]:
    catalog: dict[str, Any] = copy.deepcopy(ONE_NODE_CATALOG)
    catalog["clustertemplates"]["one"]["constraints"]["size"]["max"] = size
    mirror = Mirror()
    h = Harness(catalog=Catalog.model_validate(catalog), pools=mirror)
    pool = Pool(PoolCreated(pool="lab", by="admin"))
    pool.add_hosts([HostSpec.model_validate({"id": i, "address": f"10.0.0.{n + 1}", "host_keys": [KEY]})
                    for n, i in enumerate(hosts)], by="admin")
    pool.collect_events()
    mirror.pools["lab"] = pool
    return h, pool


def _busy(pool: Pool, host_count: int = 1) -> None:
    """Another tenant's cluster holds `host_count` hosts: what asks next waits."""
    req = PoolRequest(request_id="other", pool="lab", tenant="other", cluster_id="elsewhere",
                      nodes=[NodeNeed(node_id=f"x{i}") for i in range(host_count)])
    assert pool.request(req) == "granted"
    pool.collect_events()


async def _decide(h: Harness, pool: Pool) -> None:
    """The pool's new events, as the planner's fold of the pool delivers them; then settle."""
    for e in pool.collect_events():
        await h.planner.on_pool_event("lab", pool, Recorded(
            seq=len(h.log.records) + 1, subject=subjects.pool_events("lab"), time=h.clock.now(), event=e.payload,  # type: ignore[attr-defined]
            aggregate_id=None, version=None))
    await h.settle()


def _asked(h: Harness) -> list[PoolRequest]:
    return [r.event.request for r in h.log.records if isinstance(r.event, PoolHostsRequested)]


async def _take_facts(h: Harness, pool: Pool, since: int = 0) -> None:
    """The pool service takes the requester's facts written since `since` (its consumer)."""
    for r in h.log.records[since:]:
        if r.subject.startswith("muster.evt.default.poolreq.lab.") and r.type != "PoolHostsRequested":
            intake.take(pool, "default", r.subject.rsplit(".", 1)[1], r.event)
    await _decide(h, pool)


async def test_a_create_past_its_deadline_ends_its_cluster_and_frees_the_name() -> None:
    h, pool = _setup("h1")
    _busy(pool)
    reply = await h.send(CreateCluster(name="shop", template="one", nodes=1, pool=PoolWait(wait_s=5)))
    assert isinstance(reply, Accepted)
    await h.settle()
    [asked] = _asked(h)
    assert pool.request(asked) == "waiting" and asked.deadline is not None
    assert pool.expire(asked.request_id, asked.deadline)
    await _decide(h, pool)

    job, cluster = h.job(reply.job_id), h.cluster(reply.cluster_id)
    assert job.state == "failed" and "no hosts of pool lab were free by the deadline" in job.error
    # Nothing ran (the create waited for its host): the cluster is over, with the pool's reason.
    assert cluster.status == "deleted" and "free by the deadline" in cluster.status_reason and not cluster.nodes
    again = await h.send(CreateCluster(name="shop", template="one", nodes=1))
    assert isinstance(again, Accepted), again  # on main: "cluster name 'shop' is taken ... (failed)"
    retried = await h.send(RetryJob(job_id=reply.job_id))
    assert isinstance(retried, Rejected) and "is deleted" in retried.reason  # ask again instead: the name is free


async def test_hosts_of_a_create_that_failed_for_good_with_nothing_made_go_back() -> None:
    h, pool = _setup("h1")
    h.behaviour = lambda m: "refuse" if m.action.value == "create" else "succeed"  # e.g. no SSH key in the provider
    reply = await h.send(CreateCluster(name="shop", template="one", nodes=1))
    assert isinstance(reply, Accepted)
    await h.settle()
    [asked] = _asked(h)
    assert pool.request(asked) == "granted"
    await _decide(h, pool)
    assert h.job(reply.job_id).is_final and h.cluster(reply.cluster_id).status == "failed"

    [released] = [r.event for r in h.log.records if isinstance(r.event, PoolNodesReported) and r.event.status == "released"]
    assert released.cluster_id == reply.cluster_id and "has no such node" in released.reason
    await _take_facts(h, pool)
    host = pool.book.hosts["h1"]
    assert host.state == "unassigned" and host.holder is None  # on main: assigning, for a cluster with no node
    # Taken again (a planner that starts over replays its jobs): reported once.
    await h.restart()
    await h.settle()
    assert sum(isinstance(r.event, PoolNodesReported) and r.event.status == "released" for r in h.log.records) == 1


async def test_a_retry_of_an_expand_that_gave_up_asks_again_with_a_deadline_from_the_retry() -> None:
    h, pool = _setup("h1", "h2", size=2)
    made = await h.send(CreateCluster(name="shop", template="one", nodes=1))
    assert isinstance(made, Accepted)
    await h.settle()
    assert pool.request(_asked(h)[0]) == "granted"
    await _decide(h, pool)
    assert h.job(made.job_id).state == "succeeded"
    _busy(pool)

    grow = await h.send(ExpandCluster(cluster_id=made.cluster_id, nodes=2, pool=PoolWait(wait_s=30)))
    assert isinstance(grow, Accepted)
    await h.settle()
    first = _asked(h)[-1]
    assert pool.request(first) == "waiting" and first.deadline is not None
    assert pool.expire(first.request_id, first.deadline)
    await _decide(h, pool)
    assert h.job(grow.job_id).state == "failed" and len(h.cluster(made.cluster_id).nodes) == 1  # kept what it had

    retried = await h.send(RetryJob(job_id=grow.job_id))
    assert isinstance(retried, Accepted), retried
    await h.settle()
    job = h.job(grow.job_id)
    second = _asked(h)[-1]
    # On main the retry asked nothing and waited for ever ("not in line").
    assert second.request_id == f"{grow.job_id}_r2" and job.waiting_for_resources
    assert job.run_started is not None and second.deadline == job.run_started + timedelta(seconds=30)
    assert second.deadline > first.deadline
    assert pool.request(second) == "waiting" and pool.position(second.request_id) == 1


async def test_a_cancelled_create_that_waited_for_hosts_ends_its_cluster_and_frees_the_name() -> None:
    """Nothing was made (every create waits for its host), so a user's cancel ends the cluster
    as giving up does: its name is free for the create asked again, and the pool's line loses
    the request. It stayed `failed`, holding its name until `muster cluster delete`."""
    h, pool = _setup("h1")
    _busy(pool)
    reply = await h.send(CreateCluster(name="shop", template="one", nodes=1))
    assert isinstance(reply, Accepted)
    await h.settle()
    [asked] = _asked(h)
    assert pool.request(asked) == "waiting"
    assert isinstance(await h.send(CancelJob(job_id=reply.job_id)), Accepted)
    await h.settle()

    job, cluster = h.job(reply.job_id), h.cluster(reply.cluster_id)
    assert job.state == "rolled_back" and "cancelled by" in job.error
    assert cluster.status == "deleted" and "cancelled by" in cluster.status_reason and not cluster.nodes
    assert "nothing was made" in cluster.status_reason
    again = await h.send(CreateCluster(name="shop", template="one", nodes=1))
    assert isinstance(again, Accepted), again  # on main: "cluster name 'shop' is taken ... (failed)"
    await _take_facts(h, pool)
    assert pool.position(asked.request_id) is None  # its request left the pool's line


async def test_a_cancelled_create_that_made_something_keeps_its_name_until_deleted() -> None:
    """The rule for a create that made something is unchanged: rolled back, `failed`, its name
    kept until `muster cluster delete` (its rollback's story is the cluster's)."""
    h, pool = _setup("h1")
    h.behaviour = lambda m: "hold" if m.action.value == "install" else "succeed"
    reply = await h.send(CreateCluster(name="shop", template="one", nodes=1))
    assert isinstance(reply, Accepted)
    await h.settle()
    assert pool.request(_asked(h)[0]) == "granted"
    await _decide(h, pool)
    assert isinstance(await h.send(CancelJob(job_id=reply.job_id)), Accepted)
    await h.settle()
    assert h.cluster(reply.cluster_id).status == "failed"
    again = await h.send(CreateCluster(name="shop", template="one", nodes=1))
    assert isinstance(again, Rejected) and "taken" in again.reason
