"""A provisioner serves the queues its grant names, and a grant given or taken back while it runs
takes effect at once: the auth service closes its connection (its bus permissions are made when
it connects), it reconnects, asks again what it serves, and takes up a new tenant's queue."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import pytest
import pytest_asyncio
from nats.aio.client import Client
from nats.aio.msg import Msg

from contracts import subjects
from contracts.tasks import TaskMessage, TaskOutcome
from muster.bus.connect import connect
from services.provisioner.app import Provisioner
from services.provisioner.entrypoint import granted_tenants
from services.provisioner.plugins.testing import make_task
from services.provisioner.worker import WorkerConfig

from .conftest import Authed

pytestmark = pytest.mark.nats

DEADLINE_S = 20.0


class Quick:
    def describe(self) -> list[dict[str, Any]]:
        return [{"name": "quick", "type": "automator", "version": "0.1"}]

    async def execute(self, task: TaskMessage) -> TaskOutcome:
        return TaskOutcome(ok=True, result={"ran": task.task_id})


@pytest_asyncio.fixture
async def system(authed: Authed) -> AsyncIterator[Client]:
    nc = await authed.raw(authed.system_token, "sys")
    yield nc
    await nc.close()


async def _grant(authed: Authed, verb: str, tenant: str) -> None:
    root = await authed.raw(authed.admin_token, "root")
    try:
        answer = await authed.ask(root, "root", verb, principal="pg", permission="execute", tenant=tenant, scope="queue:default")
        assert answer["ok"], answer
    finally:
        await root.close()


async def _ran(system: Client, tenant: str, task_id: str) -> None:
    """Publish a task to the tenant's queue; return once its success is in the log."""
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def on_event(msg: Msg) -> None:
        if b'"TaskSucceeded"' in msg.data and not done.done():
            done.set_result(None)

    sub = await system.subscribe(f"{subjects.EVT}.{tenant}.task.j-{task_id}.>", cb=on_event)
    try:
        task = make_task("install", service="svc", task_id=task_id, tenant=tenant, cluster_id=f"c-{tenant}")
        task = task.model_copy(update={"job_id": f"j-{task_id}"})
        await system.jetstream().publish(subjects.task_queue(tenant, "default"), task.model_dump_json().encode(),
                                         headers={"Nats-Msg-Id": f"{task.job_id}.{task.task_id}.{task.attempt}"})
        await asyncio.wait_for(done, DEADLINE_S)
    finally:
        await sub.unsubscribe()


async def test_a_queue_granted_while_the_provisioner_runs_is_taken_up_without_a_restart(authed: Authed, system: Client) -> None:
    root = await authed.raw(authed.admin_token, "root")
    made = await authed.ask(root, "root", "user-create", principal="pg", role="service", service="provisioner")
    await root.close()
    assert made["ok"], made
    await _grant(authed, "grant", "a")
    async with AsyncExitStack() as stack:
        nc = await connect(authed.url, name="pg", token=made["data"]["token"])  # reconnects without end, as a service does
        stack.push_async_callback(nc.close)
        granted = await granted_tenants(nc, "default")
        assert granted == ("a",)
        prov = Provisioner(nc, Quick(), WorkerConfig(provisioner_id="pg", tenants=granted),
                           grants=lambda: granted_tenants(nc, "default"))
        await prov.start()
        stack.push_async_callback(prov.abort)
        await _ran(system, "a", "t1")

        reconnected: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        served = prov.workers.serve

        async def serving(tenants: tuple[str, ...]) -> None:
            await served(tenants)
            if not reconnected.done():
                reconnected.set_result(None)

        prov.workers.serve = serving  # type: ignore[method-assign]
        await _grant(authed, "grant", "b")
        await asyncio.wait_for(reconnected, DEADLINE_S)
        assert prov.workers.config.tenants == ("a", "b") and sorted(prov.info.tenants) == ["a", "b"]
        await _ran(system, "b", "t2")  # the new tenant's task runs here, no restart
        await _ran(system, "a", "t3")  # and the first tenant's still do
        await asyncio.wait_for(prov.workers.idle.wait(), DEADLINE_S)  # (its last ack may follow the outcome)
        assert prov.workers.completed == 3
