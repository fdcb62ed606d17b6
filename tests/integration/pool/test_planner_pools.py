"""Clusters on a pool, through the whole pipeline in this loop (planner, solver, provisioner
with the static-pool plugin over real SSH to local hosts, pool service) on a real nats-server:
accepted at once, waiting in line, served by the grant event, cancelled, failed by a deadline,
refused at admission, a host that fails confirm goes to error."""

from __future__ import annotations

import pytest
from pool_env import Pipeline, real_host_key

from contracts import subjects
from contracts.commands import CancelJob, CreateCluster, DeleteCluster, PoolWait, Rejected
from contracts.pool_commands import ConfigurePool, ResetHost, ShowPool
from contracts.pools import PoolTerms, TenantTerms
from muster.bus.repository import rebuild
from muster.readmodel.jobs import job_view
from services.pool import client as pools
from services.pool.domain.pool import Pool

pytestmark = [pytest.mark.nats, pytest.mark.timeout(180)]


async def pool_state(p: Pipeline) -> Pool:
    pool = rebuild(Pool, await p.store.read(subjects.pool_events("lab")))
    assert pool is not None
    return pool


async def job_history_types(p: Pipeline, job_id: str) -> list[str]:
    return [r.type for r in await p.store.read_many(subjects.job_filters(p.tenant, job_id))]


async def until_waiting(p: Pipeline, job_id: str) -> None:
    watch = await p.watch(subjects.job_events(p.tenant, job_id))
    if "JobResourcesRequested" not in await job_history_types(p, job_id):
        await watch.wait(lambda r: r.type == "JobResourcesRequested", timeout=30)
    # The planner's request is in the job's log before the pool has put it in line.
    await p.until_pool(lambda pool: pool.position(job_id) is not None)


async def test_a_cluster_runs_on_the_hosts_its_pool_granted_and_gives_them_back(pipeline: Pipeline) -> None:
    await pipeline.add_hosts("big1", cpu=8, memory="16G", labels=["ssd"])
    await pipeline.add_hosts("small1", "small2")
    done = await pipeline.client.run(CreateCluster(name="shop", template="app-on-pool", nodes=3, requested_by="ann"), timeout=120)
    assert done.succeeded, done.reason
    pool = await pipeline.until_pool(lambda p: p.summary()["states"] == {"assigned": 3})
    db = next(h for h in pool.book.hosts.values() if h.spec.id == "big1")
    assert db.holder is not None and db.holder.cluster_id == done.reply.cluster_id  # the db node needs cpu >= 8, ssd
    assert (pipeline.hosts.workdir("big1") / "app" / "db").read_text() == "db\n"  # installed over SSH
    assert (pipeline.hosts.workdir("small1") / "app" / "web").read_text() == "web\n"
    types = await job_history_types(pipeline, done.reply.job_id)
    # The creates the grant lets go are queued before the job's record of the grant (one chain,
    # the nodes' hosts on the cluster first; docs/pools.md, "Latency").
    assert types.index("JobResourcesRequested") < types.index("TaskQueued") < types.index("JobResourcesGranted")
    accepted = next(r.event for r in await pipeline.store.read(subjects.pool_events("lab")) if r.type == "RequestAccepted")
    requested = (await pipeline.store.read(subjects.job_events(pipeline.tenant, done.reply.job_id)))[0].event
    # The job's requester (the authenticated principal when auth is on, else `requested_by`).
    assert accepted.request.by == requested.requested_by and accepted.request.job_id == done.reply.job_id

    gone = await pipeline.client.run(DeleteCluster(cluster_id=done.reply.cluster_id), timeout=120)
    assert gone.succeeded, gone.reason
    await pipeline.until_pool(lambda p: p.summary()["states"] == {"unassigned": 3})
    assert not (pipeline.hosts.workdir("big1") / "app").exists()  # the release command wiped it


async def test_a_create_waits_in_line_is_cancellable_and_goes_on_when_hosts_free_up(pipeline: Pipeline) -> None:
    await pipeline.add_hosts("big1", cpu=8, labels=["ssd"])
    await pipeline.add_hosts("small1")
    first = await pipeline.client.run(CreateCluster(name="first", template="app-on-pool", nodes=2), timeout=120)
    assert first.succeeded, first.reason
    second = await pipeline.client.submit(CreateCluster(name="second", template="app-on-pool", nodes=2))
    third = await pipeline.client.submit(CreateCluster(name="third", template="app-on-pool", nodes=2,
                                                       pool=PoolWait(urgency=10)))
    for job in (second, third):
        await until_waiting(pipeline, job.job_id)
    view = pipeline.planner.job_view(pipeline.tenant, second.job_id)
    assert view is not None and view["state"] == "waiting_for_resources" and view["resources"]["hosts"] == 2
    history = await pipeline.store.read(subjects.job_events(pipeline.tenant, second.job_id))
    folded = job_view(history)
    assert folded is not None and folded["state"] == "waiting_for_resources"  # the log says so too
    pool = await pool_state(pipeline)
    assert pool.position(second.job_id) == 1 and pool.position(third.job_id) == 2

    pool_events = await pipeline.watch(subjects.pool_events("lab"))
    await pipeline.client.submit(CancelJob(job_id=third.job_id))
    cancelled = await pipeline.client.wait(third.job_id, timeout=60)
    assert cancelled.type == "JobRolledBack"
    await pool_events.wait(lambda r: r.type == "RequestCancelled" and r.event.request_id == third.job_id)
    info = await pipeline.client.cluster(third.cluster_id)
    # Nothing was made (it waited for its hosts): the cluster ends and its name is free; before
    # session 34 it stayed `failed`, its name taken until `muster cluster delete`.
    assert info.status == "deleted" and "nothing was made; its name is free" in info.status_reason, info.status_reason
    again = await pipeline.client.submit(CreateCluster(name="third", template="app-on-pool", nodes=2, pool=PoolWait(urgency=10)))
    await until_waiting(pipeline, again.job_id)  # (in line behind `second`: taken out again)
    await pipeline.client.submit(CancelJob(job_id=again.job_id))
    assert (await pipeline.client.wait(again.job_id, timeout=60)).type == "JobRolledBack"

    deleted = await pipeline.client.run(DeleteCluster(cluster_id=first.reply.cluster_id), timeout=120)
    assert deleted.succeeded
    served = await pipeline.client.wait(second.job_id, timeout=120)
    assert served.type == "JobSucceeded", getattr(served, "reason", "")


async def test_a_deadline_fails_the_waiting_job_with_the_pools_reason(pipeline: Pipeline) -> None:
    await pipeline.add_hosts("big1", cpu=8, labels=["ssd"])
    await pipeline.add_hosts("small1")
    held = await pipeline.client.run(CreateCluster(name="held", template="app-on-pool", nodes=2), timeout=120)
    assert held.succeeded
    late = await pipeline.client.submit(CreateCluster(name="late", template="app-on-pool", nodes=2,
                                                      pool=PoolWait(wait_s=1.0)))
    final = await pipeline.client.wait(late.job_id, timeout=60)
    assert final.type == "JobFailed" and "no hosts of pool lab were free by the deadline" in final.reason
    info = await pipeline.client.cluster(late.cluster_id)
    # Nothing ran: the cluster is over and its name free for the create asked again (before
    # session 33 it stayed `failed`, and that create was refused: the name was taken).
    assert info.status == "deleted" and "free by the deadline" in info.status_reason
    again = await pipeline.client.send(pipeline.tenant, CreateCluster(name="late", template="app-on-pool", nodes=2))
    assert not isinstance(again, Rejected), again
    await until_waiting(pipeline, again.job_id)


async def test_quotas_the_job_limit_and_unknown_pools_are_refused_at_admission(pipeline: Pipeline) -> None:
    await pipeline.add_hosts("big1", cpu=8, labels=["ssd"])
    await pipeline.add_hosts("small1", "small2")
    await pools.send(pipeline.nc, "lab", ConfigurePool(terms=PoolTerms(job_limit=2, tenants={
        "default": TenantTerms(max_clusters=1)})))
    too_big = await pipeline.client.send(pipeline.tenant, CreateCluster(name="big", template="app-on-pool", nodes=3))
    assert isinstance(too_big, Rejected) and "pool lab lends at most 2 to one job" in too_big.reason
    ok = await pipeline.client.run(CreateCluster(name="one", template="app-on-pool", nodes=2), timeout=120)
    assert ok.succeeded
    second = await pipeline.client.send(pipeline.tenant, CreateCluster(name="two", template="app-on-pool", nodes=2))
    assert isinstance(second, Rejected) and "may use pool lab for 1 cluster and already uses it for 1" in second.reason
    await pipeline.store.append(subjects.catalog_events(pipeline.tenant, "providers", "lab"), [])  # nothing: the catalog stays
    from contracts.catalog import Catalog, Provider
    from muster.catalog.store import apply_catalog

    await apply_catalog(pipeline.store, pipeline.tenant, Catalog(providers={"lab": Provider(
        name="lab", providertype="static-pool", provisioner={"pool": "nowhere"})}))
    nowhere = await pipeline.client.send(pipeline.tenant, CreateCluster(name="three", template="app-on-pool", nodes=2))
    assert isinstance(nowhere, Rejected) and "pool 'nowhere' (provider 'lab') does not exist" in nowhere.reason


async def test_a_host_that_fails_confirm_goes_to_error_and_is_lent_again_only_after_a_reset(pipeline: Pipeline) -> None:
    from contracts.pool_commands import AddHosts

    await pipeline.add_hosts("big1", cpu=8, labels=["ssd"])
    await pipeline.hosts.start("liar")  # answers with its own key, registered with another one
    await pools.send(pipeline.nc, "lab", AddHosts(hosts=[pipeline.hosts.spec("liar", host_keys=[real_host_key()])]))
    failed = await pipeline.client.run(CreateCluster(name="shop", template="app-on-pool", nodes=2), timeout=120)
    assert not failed.succeeded and "confirm" in failed.reason
    pool = await pipeline.until_pool(lambda p: p.book.hosts["liar"].holder is None and p.book.hosts["big1"].holder is None)
    liar = pool.book.hosts["liar"]
    assert liar.state == "error" and "confirm of node" in liar.error
    assert pool.book.hosts["big1"].state == "unassigned"

    again = await pipeline.client.submit(CreateCluster(name="again", template="app-on-pool", nodes=2))
    await until_waiting(pipeline, again.job_id)
    assert (await pool_state(pipeline)).position(again.job_id) == 1  # the error host is lent to nobody
    watch = await pipeline.watch(subjects.pool_events("lab"))
    await pools.send(pipeline.nc, "lab", ResetHost(host_id="liar", requested_by="admin"))
    granted = await watch.wait(lambda r: r.type == "HostsGranted" and r.event.request_id == again.job_id)
    assert {a.host_id for a in granted.event.assignments} == {"big1", "liar"}
    await pipeline.client.submit(CancelJob(job_id=again.job_id))
    await pipeline.client.wait(again.job_id, timeout=120)
    view = (await pools.send(pipeline.nc, "lab", ShowPool())).view
    assert view is not None and view["waiting"] == 0



async def test_machines_a_provider_makes_go_on_the_pools_books_count_against_quotas_and_are_returned(
    pipeline: Pipeline,
) -> None:
    from contracts.catalog import Catalog, HardwareType, ImageType, Provider
    from muster.catalog.store import apply_catalog

    catalog = Catalog(
        providers={"local": Provider(name="local", providertype="localhost", provisioner={"pool": "dyn"})},
        hardwaretypes={n: HardwareType(name=n, providermap={"lab": {"flavor": "host", "requires": r}, "local": {"flavor": "local"}})
                       for n, r in (("pool-small", "cpu >= 1"), ("pool-large", "cpu >= 8, labels contains ssd"))},
        imagetypes={"as-installed": ImageType(name="as-installed", providermap={"lab": {"image": "as-installed"},
                                                                                "local": {"image": "local"}})},
    )
    await apply_catalog(pipeline.store, pipeline.tenant, catalog)
    await pools.send(pipeline.nc, "dyn", ConfigurePool(terms=PoolTerms(tenants={"default": TenantTerms(max_nodes=3)})))
    made = await pipeline.client.run(CreateCluster(name="made", template="app-on-pool", nodes=2, provider="local"), timeout=120)
    assert made.succeeded, made.reason
    pool = await pipeline.until_pool(lambda p: len(p.book.hosts) == 2, name="dyn")
    assert {h.spec.kind for h in pool.book.hosts.values()} == {"dynamic"}
    assert {h.holder.cluster_id for h in pool.book.hosts.values() if h.holder} == {made.reply.cluster_id}
    assert all(h.state == "assigned" and h.spec.host_keys for h in pool.book.hosts.values())

    more = await pipeline.client.send(pipeline.tenant, CreateCluster(name="more", template="app-on-pool", nodes=2,
                                                                     provider="local"))
    assert isinstance(more, Rejected) and "tenant default may hold 3 hosts of pool dyn: it holds 2" in more.reason

    gone = await pipeline.client.run(DeleteCluster(cluster_id=made.reply.cluster_id), timeout=120)
    assert gone.succeeded, gone.reason
    await pipeline.until_pool(lambda p: not p.book.hosts, name="dyn")  # returned to their provider


async def test_an_expand_asks_only_for_its_new_nodes_and_a_shrink_gives_hosts_back(pipeline: Pipeline) -> None:
    from contracts.commands import ExpandCluster, ShrinkCluster

    await pipeline.add_hosts("big1", cpu=8, labels=["ssd"])
    await pipeline.add_hosts("small1", "small2")
    made = await pipeline.client.run(CreateCluster(name="shop", template="app-on-pool", nodes=2), timeout=120)
    assert made.succeeded, made.reason
    grown = await pipeline.client.run(ExpandCluster(cluster_id=made.reply.cluster_id, nodes=3), timeout=120)
    assert grown.succeeded, grown.reason
    asked = [r.event for r in await pipeline.store.read(subjects.pool_request_events(pipeline.tenant, "lab", grown.reply.job_id))
             if r.type == "PoolHostsRequested"]
    assert [len(a.request.nodes) for a in asked] == [1]  # the new node only
    await pipeline.until_pool(lambda p: p.summary()["states"] == {"assigned": 3})
    shrunk = await pipeline.client.run(ShrinkCluster(cluster_id=made.reply.cluster_id, nodes=2), timeout=120)
    assert shrunk.succeeded, shrunk.reason
    pool = await pipeline.until_pool(lambda p: p.summary()["states"] == {"assigned": 2, "unassigned": 1})
    assert sum(h.holder is not None for h in pool.book.hosts.values()) == 2
