"""A rollback ends each service in its state of before the job, with the real planner, solver
and provisioner (the simulated automator: what it last ran on each node is the service's state)
on a nats-server: a service the user stopped stays stopped when a restart of every service fails
and is rolled back, and a configure --restart only configures it (docs/planner.md, "Rollback").
The rules are unit tests on the fakes."""

from __future__ import annotations

from typing import Any

import pytest

from contracts.commands import Accepted, ConfigureCluster, CreateCluster, RestartServices, StopServices
from contracts.events import JobRolledBack
from muster.catalog.store import apply_catalog
from services.provisioner.plugins.builtin.simulated_automator.automator import SimulatedAutomator

from .conftest import quick_demo_catalog, succeeded

pytestmark = [pytest.mark.nats, pytest.mark.timeout(120), pytest.mark.parametrize("stack", [{"http": False}], indirect=True)]
Stack = Any
STOPPED = "yarn-nodemanager"


async def test_a_service_the_user_stopped_stays_stopped_through_a_failed_restart_and_a_configure_restart(stack: Stack) -> None:
    """The nodemanager stopped by the user; a restart of every service whose zookeeper start
    check fails (slowly, and not retried), by when every stop has run: before session 33 the rollback
    started the nodemanager on each node (the inverse of the job's stop of it); since session 37
    the restart leaves it out (it restarts what runs: decision 53). Then a configure --restart:
    it started the nodemanager too, and made it meant to run."""
    cid = (await succeeded(stack, CreateCluster(name="kept", template="hadoop-small", nodes=3))).cluster_id
    await succeeded(stack, StopServices(cluster_id=cid, services=[STOPPED]))
    automator = stack.workers.executor.inner.automator("simulated")
    assert isinstance(automator, SimulatedAutomator)
    on = sorted(n.id for n in stack.planner.clusters[cid].nodes.values() if STOPPED in n.services)
    assert on and {automator.states[(cid, n, STOPPED)] for n in on} == {"stopped"}

    catalog = quick_demo_catalog()
    fields = catalog.services["zookeeper-server"].provisioner.actions["status"].fields
    fields.update({"latency_ms": "1500", "failure_rate": "1", "failure_permanent": "true"})
    await apply_catalog(stack.store, stack.tenant, catalog)
    reply = await stack.client.request(RestartServices(cluster_id=cid))
    assert isinstance(reply, Accepted), reply
    final = await stack.client.wait(reply.job_id, timeout=60)
    assert isinstance(final, JobRolledBack), final
    job = stack.planner.jobs[reply.job_id]
    assert [t.id for t in job.plan.tasks if t.service == STOPPED] == []
    assert [t for t in job.plan.tasks if t.action.value == "stop" and job.task_state.get(t.id) == "succeeded"], \
        "the job stopped nothing before its check failed: nothing to roll back"
    assert {automator.states[(cid, n, STOPPED)] for n in on} == {"stopped"}
    cluster = stack.planner.clusters[cid]
    assert STOPPED in cluster.stopped and cluster.status == "active"

    await apply_catalog(stack.store, stack.tenant, quick_demo_catalog())
    configured = await succeeded(stack, ConfigureCluster(cluster_id=cid, config={"hdfs": {"replication": 1}}, restart=True))
    plan = stack.planner.jobs[configured.job_id].plan
    assert {t.action.value for t in plan.tasks if t.service == STOPPED} == {"configure"}
    assert {automator.states[(cid, n, STOPPED)] for n in on} == {"stopped"}
    assert STOPPED in stack.planner.clusters[cid].stopped
