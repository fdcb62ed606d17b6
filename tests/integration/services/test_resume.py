"""A planner that dies mid-operation is replaced by one rebuilt from the log; the job ends as
if nothing happened, and no attempt was dispatched twice."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from contextlib import AsyncExitStack
from typing import Any

import pytest

from contracts import subjects
from contracts.commands import Accepted, CreateCluster, ExpandCluster
from contracts.events import JobSucceeded, TaskCompleted
from contracts.tasks import TaskMessage
from muster.bus.connect import connect
from services.planner.app import PlannerConfig
from services.planner.entrypoint import start_planner

pytestmark = [pytest.mark.nats, pytest.mark.timeout(150),
              pytest.mark.parametrize("stack", [{"http": False, "ack_wait_s": 1.0, "lease_ttl_s": 2.0}], indirect=True)]
Stack = Any


async def _kill(stack: Stack) -> None:
    """As close to kill -9 as one process allows: timers gone, leases left to expire,
    connection dropped unacked."""
    stack.planner.timers.cancel_all()
    await stack.planner.ownership.leases.abort()
    await stack.planner_nc.close()


@pytest.mark.parametrize("after", [0, 8])
async def test_a_restarted_planner_finishes_the_job(stack: Stack, after: int) -> None:
    reply = await stack.client.send(stack.tenant, CreateCluster(name="resumed", template="hadoop-small", nodes=3))
    assert isinstance(reply, Accepted)
    if after:
        seen = 0
        async for recorded in stack.client.events(reply.job_id):
            seen += isinstance(recorded.event, TaskCompleted)
            if seen >= after:
                break
    await _kill(stack)

    async with AsyncExitStack() as es:
        nc = await connect(stack.url, name="planner-2")
        es.push_async_callback(nc.close)
        second = await start_planner(nc, es, PlannerConfig(instance="planner-2", ack_wait_s=1.0, lease_ttl_s=2.0))
        es.callback(second.timers.cancel_all)
        # It takes the dead planner's shards once their leases expire, and finishes the job.
        final = await stack.client.wait(reply.job_id, timeout=90)
        assert isinstance(final, JobSucceeded), final
        assert reply.job_id in second.jobs  # rebuilt from the log

        history = await stack.store.read_many(subjects.job_filters(stack.tenant, reply.job_id))
        queued = Counter((r.event.task_id, r.event.attempt) for r in history if r.type == "TaskQueued")
        assert queued and max(queued.values()) == 1  # no attempt recorded twice
        assert all(a == 1 for _, a in queued), [r.event for r in history if r.type == "TaskAttemptFailed"]  # and none needed a new attempt
        assert second.clusters[reply.cluster_id].status == "active"

        # The new planner is fully in charge: another operation works.
        more = await stack.client.send(stack.tenant, ExpandCluster(cluster_id=reply.cluster_id, nodes=4))
        assert isinstance(more, Accepted) and isinstance(await stack.client.wait(more.job_id, timeout=90), JobSucceeded)


@pytest.mark.parametrize("failures", [1, 3])
async def test_a_lost_task_publish_is_repaired_by_the_redelivered_outcome(stack: Stack, failures: int) -> None:
    """As in a server failover: the planner records TaskQueued, then its publish to TASKS
    fails. The outcome that triggered it is redelivered; taking it in changes nothing, so the
    planner re-publishes the job's queued attempts, and the job goes on."""
    queue = stack.planner.queue
    real_publish_many = queue.publish_many
    left = {"n": failures}

    async def flaky(messages: Sequence[TaskMessage]) -> list[BaseException | None]:
        lost = set()
        for i, m in enumerate(messages):
            if left["n"] > 0 and m.action.value == "install":
                left["n"] -= 1
                lost.add(i)
        sent = iter(await real_publish_many([m for i, m in enumerate(messages) if i not in lost]))
        return [TimeoutError("simulated: the publish was lost") if i in lost else next(sent) for i in range(len(messages))]

    queue.publish_many = flaky
    reply = await stack.client.send(stack.tenant, CreateCluster(name="lossy", template="hadoop-small", nodes=2))
    assert isinstance(reply, Accepted)
    assert isinstance(await stack.client.wait(reply.job_id, timeout=90), JobSucceeded)
    assert left["n"] == 0  # the failures did happen
    history = await stack.store.read_many(subjects.job_filters(stack.tenant, reply.job_id))
    assert all(r.event.attempt == 1 for r in history if r.type == "TaskQueued")  # repaired, not retried


async def test_a_planner_whose_lease_connection_is_given_up_closes_its_own(stack: Stack) -> None:
    """Its shards' leases live on a connection of their own; given up for good by nats-py (a
    reload's auth check: docs/security.md, "TLS"), the planner could act for no shard, and no
    other could take them while it lives: its own connection is closed too, which makes the
    service exit and its supervisor start it again (muster/runtime/service.py)."""
    leases = stack.planner.ownership.leases
    assert not stack.planner_nc.is_closed
    # Closed on the leases' own loop, as nats-py closes a connection it gives up.
    await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(leases._nc.close(), leases._loop))
    assert stack.planner_nc.is_closed
