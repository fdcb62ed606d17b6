"""The planner's reaction to a pool's grant (services/planner/pools.py) on in-memory fakes: the
nodes' hosts on the cluster first, the creates they let go next, the job's record of the grant
last (one chain; docs/pools.md, "Latency"), and a chain cut short after the creates is taken
up again with nothing queued twice and nothing left unpublished."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from planner_harness import KEY, Harness, Mirror

from bench.pool_bench import ONE_NODE_CATALOG as CATALOG
from contracts import subjects
from contracts.catalog import Catalog
from contracts.commands import Accepted, CreateCluster
from contracts.events import JobResourcesGranted
from contracts.pools import HostSpec, PoolHostsRequested
from contracts.records import Recorded
from muster.ports.eventlog import Append, ConcurrencyError
from services.planner.pools import GRANT, PoolBroker
from services.pool.domain.pool import Pool, PoolCreated


def _setup() -> tuple[Harness, PoolBroker, Pool]:
    mirror = Mirror()
    h = Harness(catalog=Catalog.model_validate(CATALOG), pools=mirror)
    assert isinstance(h.planner.pools, PoolBroker)
    pool = Pool(PoolCreated(pool="lab", by="admin"))
    pool.add_hosts([HostSpec.model_validate({"id": "h1", "address": "10.0.0.1", "host_keys": [KEY]})], by="admin")
    pool.collect_events()
    mirror.pools["lab"] = pool
    return h, h.planner.pools, pool


async def _waiting_job(h: Harness, pool: Pool) -> tuple[str, Recorded]:
    """A create accepted, planned and waiting; the pool takes its request and grants the host
    (the grant as the planner's fold of the pool would deliver it)."""
    reply = await h.send(CreateCluster(name="c1", template="one", nodes=1))
    assert isinstance(reply, Accepted)
    await h.settle()
    assert h.planner.state.jobs[reply.job_id].waiting_for_resources
    assert not h.queue.messages  # the create is held until the node has a host
    [asked] = [r for r in h.log.records if isinstance(r.event, PoolHostsRequested)]
    assert pool.request(asked.event.request) == "granted"
    [granted] = [e.payload for e in pool.collect_events() if e.payload.type == "HostsGranted"]  # type: ignore[attr-defined]
    return reply.job_id, Recorded(seq=len(h.log.records) + 1, subject=subjects.pool_events("lab"), time=h.clock.now(),
                                  event=granted, aggregate_id=None, version=None)


def _types(h: Harness, job_id: str, cluster_id: str) -> list[str]:
    own = {*subjects.job_filters("default", job_id), subjects.cluster_events("default", cluster_id)}
    return [r.type for r in h.log.records if r.subject in own]


async def test_the_nodes_host_then_its_create_then_the_jobs_record_of_the_grant() -> None:
    h, broker, pool = _setup()
    job_id, grant = await _waiting_job(h, pool)
    job = h.planner.state.jobs[job_id]
    start = len(h.log.records)
    await h.planner.on_pool_event("lab", pool, grant)
    chain = [(r.type, getattr(r.event, "action", None)) for r in h.log.records[start:]]
    # (the job's part of the chain begins with its task record: a marker on the job's subject
    # goes first, so the first link that lands moves the job's fence, docs/decisions/0033)
    # (with segments, docs/decisions/0058, the create's followers are queued right after it)
    queued = [action for t, action in chain if t == "TaskQueued"]
    assert [t for t, _ in chain] == ["NodeResultsRecorded", "TasksRecorded", *["TaskQueued"] * len(queued), "JobResourcesGranted"]
    assert queued[0] is not None and queued[0].value == "create" and len(queued) == len(h.sent())
    [message] = h.queue.messages
    assert message.action.value == "create" and message.job_id == job_id
    assert message.results[GRANT]["host_id"] == "h1"  # the static-pool plugin takes the host from there
    assert h.planner.state.clusters[job.cluster_id].results[message.node.id][GRANT]["host_id"] == "h1"
    assert not h.planner.state.jobs[job_id].waiting_for_resources

    await h.planner.on_pool_event("lab", pool, grant)  # the same grant again (a replay): nothing new
    assert len(h.log.records) == start + len(chain) and len(h.queue.messages) == 1
    await h.settle()
    assert h.planner.state.jobs[job_id].state == "succeeded"


@pytest.mark.parametrize("lands", [False, True], ids=["refused", "ack-lost"])
async def test_a_chain_cut_after_the_create_is_taken_up_again(lands: bool) -> None:
    """The job's record of the grant is refused (another writer came first) after the create
    was queued: the reaction reloads the job, records the grant, queues nothing twice, and the
    create's message goes out (the refused try never published it)."""
    h, broker, pool = _setup()
    job_id, grant = await _waiting_job(h, pool)

    def grant_record(subject: str, items: Sequence[Append]) -> bool:
        return any(isinstance(i.event, JobResourcesGranted) for i in items)

    h.log.inject(grant_record, ConcurrencyError("another writer"), lands=lands)
    await h.planner.on_pool_event("lab", pool, grant)
    job = h.planner.state.jobs[job_id]
    types = _types(h, job_id, job.cluster_id)
    assert types.count("JobResourcesGranted") == 1 and types.count("TaskQueued") == len(h.sent())  # (a create's segment's steps too)
    assert types.index("NodeResultsRecorded") < types.index("TaskQueued")
    assert not job.waiting_for_resources and job.task_state[h.queue.messages[0].task_id] == "queued"
    assert [m.action.value for m in h.queue.messages] == ["create"]
    await h.settle()
    assert h.planner.state.jobs[job_id].state == "succeeded"
