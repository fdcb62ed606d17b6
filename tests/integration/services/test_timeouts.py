"""A worker silent past the attempt timeout: the attempt fails and is retried; its late result
is recorded in the log and changes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from contracts import subjects
from contracts.catalog import Service
from contracts.commands import Accepted, AddServices, CreateCluster
from contracts.events import JobRolledBack, JobSucceeded
from muster.catalog.files import load_catalog
from muster.catalog.store import apply_catalog

pytestmark = [pytest.mark.nats, pytest.mark.timeout(120),
              pytest.mark.parametrize("stack", [{"http": False, "task_timeout_s": 1.5, "max_attempts": 2}], indirect=True)]
Stack = Any

SLOW = {
    "name": "slow", "description": "installs in 4 s, past the 1.5 s attempt timeout",
    "provisioner": {"actions": {"install": {"type": "simulated", "fields": {"latency_ms": "4000"}}}},
}


async def test_silent_attempts_time_out_and_late_results_are_ignored(stack: Stack) -> None:
    from pathlib import Path

    catalog = load_catalog(Path(__file__).parents[3] / "muster" / "demo" / "catalog")
    sim = catalog.providers["sim"]
    catalog.providers["sim"] = sim.model_copy(update={"provisioner": {**sim.provisioner, "latency_ms": "0-20"}})
    catalog.services["slow"] = Service.model_validate(SLOW)
    catalog.clustertemplates["hadoop-small"].compatibility.services.append("slow")
    # The other actions take up to 20 ms: well inside the timeout.
    await apply_catalog(stack.store, stack.tenant, catalog)
    created = await stack.client.send(stack.tenant, CreateCluster(name="t", template="hadoop-small", nodes=2))
    assert isinstance(created, Accepted)
    assert isinstance(await stack.client.wait(created.job_id, timeout=60), JobSucceeded)

    reply = await stack.client.send(stack.tenant, AddServices(cluster_id=created.cluster_id, services=["slow"]))
    assert isinstance(reply, Accepted)
    final = await stack.client.wait(reply.job_id, timeout=60)
    assert isinstance(final, JobRolledBack) and "failed 2 times" in final.reason

    job = [r for r in await stack.store.read(f"muster.evt.{stack.tenant}.job.{reply.job_id}")]
    timeouts = [r.event for r in job if r.type == "TaskAttemptFailed" and "timed out" in r.event.error]
    assert {(e.attempt) for e in timeouts} == {1, 2}
    install = timeouts[0].task_id
    assert not any(r.type == "TaskCompleted" and r.event.task_id == install for r in job)

    # The slow worker does finish attempt 1, after the job ended: its result is in the log...
    subject = subjects.task_history_filter(stack.tenant, reply.job_id, install)
    late = await _first(stack, subject, "TaskSucceeded", timeout=15)
    assert late.attempt == 1
    # ...and changes nothing.
    assert stack.planner.jobs[reply.job_id].state == "rolled_back"
    assert "slow" not in {s for n in stack.planner.clusters[created.cluster_id].nodes.values() for s in n.services}


async def _first(stack: Stack, subject: str, event_type: str, timeout: float) -> Any:
    import asyncio

    from nats.js.api import DeliverPolicy

    from muster.bus.eventstore import recorded_from_msg

    found: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    async def on_msg(msg: Any) -> None:
        recorded = recorded_from_msg(msg)
        if recorded.type == event_type and not found.done():
            found.set_result(recorded.event)

    sub = await stack.store.js.subscribe(subject, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL, cb=on_msg)
    try:
        return await asyncio.wait_for(found, timeout)
    finally:
        await sub.unsubscribe()
