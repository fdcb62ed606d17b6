"""A worker silent past the attempt timeout: the attempt times out and is retried; its late result
is recorded in the log and changes nothing. Timed out and cancelled are task states of their own
in the tracker's answers and on the console's job page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from contracts import subjects
from contracts.catalog import Service
from contracts.commands import Accepted, AddServices, CancelJob, CreateCluster
from contracts.events import JobRolledBack, JobSucceeded
from muster.catalog.files import load_catalog
from muster.catalog.store import apply_catalog

pytestmark = [pytest.mark.nats, pytest.mark.timeout(120),
              pytest.mark.parametrize("stack", [{"task_timeout_s": 1.5, "max_attempts": 2}], indirect=True)]
Stack = Any

SLOW = {
    "name": "slow", "description": "installs in 4 s, past the 1.5 s attempt timeout",
    "provisioner": {"actions": {"install": {"type": "simulated", "fields": {"latency_ms": "4000"}}}},
}


async def test_silent_attempts_time_out_and_late_results_are_ignored(stack: Stack) -> None:
    await apply_catalog(stack.store, stack.tenant, _with_slow())  # the other actions take up to 20 ms: well inside the timeout
    created = await stack.client.send(stack.tenant, CreateCluster(name="t", template="hadoop-small", nodes=2))
    assert isinstance(created, Accepted)
    assert isinstance(await stack.client.wait(created.job_id, timeout=60), JobSucceeded)

    reply = await stack.client.send(stack.tenant, AddServices(cluster_id=created.cluster_id, services=["slow"]))
    assert isinstance(reply, Accepted)
    final = await stack.client.wait(reply.job_id, timeout=60)
    assert isinstance(final, JobRolledBack) and "failed 2 times" in final.reason

    job = [r for r in await stack.store.read_many(subjects.job_filters(stack.tenant, reply.job_id))]
    timeouts = [r.event for r in job if r.type == "TaskAttemptFailed" and r.event.state == "timed_out"]
    assert {(e.attempt) for e in timeouts} == {1, 2} and "timed out" in timeouts[0].error
    install = timeouts[0].task_id
    states = await _task_states(stack, reply.job_id)
    assert states[install] == "timed_out" and {t for t, s in states.items() if s == "timed_out"} == {e.task_id for e in timeouts}
    assert not any(r.type == "TaskCompleted" and r.event.task_id == install for r in job)

    # The slow worker does finish attempt 1, after the job ended: its result is in the log...
    subject = subjects.task_history_filter(stack.tenant, reply.job_id, install)
    late = await _first(stack, subject, "TaskSucceeded", timeout=15)
    assert late.attempt == 1
    # ...and changes nothing.
    assert stack.planner.jobs[reply.job_id].state == "rolled_back"
    assert "slow" not in {s for n in stack.planner.clusters[created.cluster_id].nodes.values() for s in n.services}


async def test_tasks_a_cancel_keeps_from_running_are_cancelled(stack: Stack) -> None:
    await apply_catalog(stack.store, stack.tenant, _with_slow())
    created = await stack.client.send(stack.tenant, CreateCluster(name="c", template="hadoop-small", nodes=2))
    assert isinstance(await stack.client.wait(created.job_id, timeout=60), JobSucceeded)
    reply = await stack.client.send(stack.tenant, AddServices(cluster_id=created.cluster_id, services=["slow"]))
    # Cancelled once it has a plan: before it, nothing ran and the job just fails (a CI run's
    # cancel overtook the solver's answer).
    await _first(stack, subjects.job_events(stack.tenant, reply.job_id), "JobPlanned", timeout=30)
    assert isinstance(await stack.client.send(stack.tenant, CancelJob(job_id=reply.job_id)), Accepted)
    final = await stack.client.wait(reply.job_id, timeout=60)
    assert isinstance(final, JobRolledBack) and final.reason.startswith("cancelled by ")
    job = await stack.store.read_many(subjects.job_filters(stack.tenant, reply.job_id))
    queued = {r.event.task_id for r in job if r.type == "TaskQueued"}
    # (a task queued that no provisioner had claimed yet is cancelled too: its attempt ends with the cancel)
    unclaimed = {r.event.task_id for r in job if r.type == "TaskAttemptFailed" and r.event.state == "cancelled"}
    states = await _task_states(stack, reply.job_id)
    cancelled = {t for t, s in states.items() if s == "cancelled"}
    assert cancelled and cancelled == {t for t in states if t not in queued and not t.startswith("undo.")} | unclaimed
    page = await (await stack.http.get(f"/ui/jobs/{reply.job_id}")).text()
    assert page.count('class="badge st-cancelled"') >= len(cancelled) and f"{len(cancelled)} cancelled" in page


async def _task_states(stack: Stack, job_id: str) -> dict[str, str]:
    """Each task's state as the tracker answers (`GET /v1/jobs/{id}`); the console's graph says the same."""
    answer = await (await stack.http.get(f"/v1/jobs/{job_id}", headers={"X-Muster-Tenant": stack.tenant})).json()
    graph = await (await stack.http.get(f"/ui/jobs/{job_id}/graph", headers={"Accept": "application/json"})).json()
    states = {t["id"]: t["state"] for t in answer["tasks"]}
    assert {t["id"]: t["state"] for t in graph["tasks"]} == states
    return states


def _with_slow() -> Any:
    catalog = load_catalog(Path(__file__).parents[3] / "muster" / "demo" / "catalog")
    sim = catalog.providers["sim"]
    catalog.providers["sim"] = sim.model_copy(update={"provisioner": {**sim.provisioner, "latency_ms": "0-20"}})
    catalog.services["slow"] = Service.model_validate(SLOW)
    catalog.clustertemplates["hadoop-small"].compatibility.services.append("slow")
    return catalog


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
