"""Provisioner classes route (#14.3): a template or provider names a class, the planner queues
its clusters' tasks there, and only provisioners of that class take them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from contracts import subjects
from contracts.commands import Accepted, CreateCluster, DeleteCluster
from contracts.events import JobSucceeded
from muster.bus.eventstore import EventStore
from muster.catalog.store import apply_catalog
from services.provisioner.plugins import PluginRegistry
from services.provisioner.worker import WorkerConfig, Workers

from .conftest import quick_demo_catalog

pytestmark = [pytest.mark.nats, pytest.mark.timeout(150), pytest.mark.parametrize("stack", [{"http": False}], indirect=True)]
Stack = Any


async def _claims(stack: Stack, job_id: str) -> set[str]:
    return {r.event.provisioner for r in await stack.store.read(subjects.job_task_events(stack.tenant, job_id)) if r.type == "TaskClaimed"}


async def test_a_class_named_by_the_template_or_the_provider_gets_that_work_and_no_other(stack: Stack) -> None:
    catalog = quick_demo_catalog()
    small = catalog.clustertemplates["hadoop-small"]
    catalog.clustertemplates["hadoop-gpu"] = small.model_copy(update={
        "name": "hadoop-gpu", "defaults": small.defaults.model_copy(update={"provisionerclass": "gpu"})})
    sim = catalog.providers["sim"]
    catalog.providers["sim-edge"] = sim.model_copy(update={"name": "sim-edge", "provisionerclass": "edge"})
    for kind in (catalog.hardwaretypes, catalog.imagetypes):  # the same machines under the new provider
        for name, entity in kind.items():
            kind[name] = entity.model_copy(update={"providermap": {**entity.providermap, "sim-edge": entity.providermap["sim"]}})
    await apply_catalog(stack.store, stack.tenant, catalog)

    registry = PluginRegistry.discover()
    extra = []
    for klass in ("gpu", "edge"):
        workers = Workers(stack.store.js, EventStore(stack.store.nc), registry,
                          WorkerConfig(provisioner_id=f"prov-{klass}", provisioner_class=klass, capacity=4))
        await workers.ensure_queues()
        extra.append((workers, asyncio.create_task(workers.run())))
    try:
        gpu = await stack.client.send(stack.tenant, CreateCluster(name="g", template="hadoop-gpu", nodes=3))
        edge = await stack.client.send(stack.tenant, CreateCluster(name="e", template="hadoop-small", nodes=3, provider="sim-edge"))
        plain = await stack.client.send(stack.tenant, CreateCluster(name="p", template="hadoop-small", nodes=3))
        for reply in (gpu, edge, plain):
            assert isinstance(reply, Accepted), reply
            assert isinstance(await stack.client.wait(reply.job_id, timeout=90), JobSucceeded)
        assert await _claims(stack, gpu.job_id) == {"prov-gpu"}
        assert await _claims(stack, edge.job_id) == {"prov-edge"}
        assert await _claims(stack, plain.job_id) == {"prov-test"}
        queued = {r.event.provisioner_class for r in await stack.store.read_many(subjects.job_filters(stack.tenant, gpu.job_id))
                  if r.type == "TaskQueued"}
        assert queued == {"gpu"}
        # Later jobs on the cluster go to the same class.
        gone = await stack.client.send(stack.tenant, DeleteCluster(cluster_id=gpu.cluster_id))
        assert isinstance(gone, Accepted) and isinstance(await stack.client.wait(gone.job_id, timeout=90), JobSucceeded)
        assert await _claims(stack, gone.job_id) == {"prov-gpu"}
    finally:
        for workers, runner in extra:
            await workers.drain()
            await runner
        await registry.aclose()  # (its work directory, a temporary one)
