"""Lease and drift notifications with the real planner, solver, provisioner and notifier on a
nats-server, delivered to a webhook receiver the test starts: a lease about to end is told once
per lease (a redelivered event and a notifier restart tell it no second time; an extended lease
is a new one), to the subscriptions that ask for it alone; a check that finds a service stopped
tells `drift_found`, naming the cluster and the node, with no secret (docs/governance.md,
"Notifications"). The rules are unit tests on the fakes."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import pytest
import pytest_asyncio

from contracts import subjects
from contracts.catalog import Catalog, Service
from contracts.commands import Accepted, CheckCluster, CreateCluster, ExtendLease, LeaseExtended
from contracts.events import JobSucceeded
from contracts.governance import GovernancePut
from contracts.records import Append
from muster.bus.connect import connect
from muster.catalog.store import apply_catalog, read_catalog
from services.notifier.app import Notifier
from services.notifier.domain.signing import DELIVERY, SIGNATURE, verify
from services.notifier.entrypoint import start_notifier
from services.provisioner.plugins.builtin.simulated_automator.automator import SimulatedAutomator
from tests.integration.conftest import LOCAL, Webhook

pytestmark = [pytest.mark.nats, pytest.mark.timeout(120)]
Stack = Any
SERVICE = "hdfs-datanode"
LEASE, WARNING_S = "60s", 59.0
"""A lease of a minute, told of 59 s before it ends: the warning falls due a second after the
lease is set, long before the lease ends while the test runs."""


class Notifiers:
    """The notifier on a connection of its own, which the test can stop and start again."""

    def __init__(self, stack: Stack, webhook: Webhook) -> None:
        self.url, self.secrets = stack.url, {"hook": webhook.secret}
        self.exits = AsyncExitStack()

    async def start(self) -> Notifier:
        nc = await connect(self.url, name="notifier")
        self.exits.push_async_callback(nc.close)
        return await start_notifier(nc, self.exits, self.secrets, allowed=LOCAL)

    async def stop(self) -> None:
        await self.exits.aclose()
        self.exits = AsyncExitStack()


@pytest_asyncio.fixture
async def notifiers(stack: Stack, webhook: Webhook) -> AsyncIterator[Notifiers]:
    running = Notifiers(stack, webhook)
    try:
        yield running
    finally:
        await running.stop()


async def subscribe(stack: Stack, webhook: Webhook, name: str, events: list[str], **fields: Any) -> None:
    entity = {"name": name, "events": events, "webhook": {"url": webhook.url, "secret": "secret://hook"}, **fields}
    subject = subjects.governance_events(stack.tenant, "subscription", name)
    await stack.store.append(subject, [Append(GovernancePut(kind="subscription", name=name, entity=entity, version=1, by="ada"),
                                              msg_id=f"{subject}:1")])


async def change_catalog(stack: Stack, lease: str | None = None, status: bool = False) -> None:
    catalog = await read_catalog(stack.store, stack.tenant)
    template = catalog.clustertemplates["hadoop-small"].model_dump()
    if lease is not None:
        template["administration"] = {"leaseduration": {"initial": lease, "max": 0, "step": 0}}
    service = catalog.services[SERVICE].model_dump()
    if status:  # the datanode answers `status`, so that a check sees it stopped
        service["provisioner"]["actions"]["status"] = {"type": "simulated", "fields": {}}
    await apply_catalog(stack.store, stack.tenant, Catalog.model_validate(
        {"clustertemplates": {"hadoop-small": template}, "services": {SERVICE: Service.model_validate(service).model_dump()}}))


async def run(stack: Stack, command: Any) -> Accepted:
    reply = await stack.client.request(command)
    assert isinstance(reply, Accepted), reply
    assert isinstance(await stack.client.wait(reply.job_id, timeout=60), JobSucceeded)
    return reply


async def delivered(webhook: Webhook) -> tuple[dict[str, Any], bytes]:
    """The next delivery, its signature checked."""
    payload, raw, headers = await asyncio.wait_for(webhook.got.get(), 20)
    verify(webhook.secret.encode(), raw, headers[SIGNATURE], headers[DELIVERY], time.time(), set())
    return payload, raw


async def test_a_lease_about_to_end_is_told_once_per_lease_to_whom_asks(stack: Stack, webhook: Webhook,
                                                                        notifiers: Notifiers) -> None:
    await change_catalog(stack, lease=LEASE)
    await subscribe(stack, webhook, "leases", ["lease_expiring"], lease_warning_s=WARNING_S)
    await subscribe(stack, webhook, "failures", ["job_failed", "drift_found"])
    await notifiers.start()
    cid = (await run(stack, CreateCluster(name="leased", template="hadoop-small", nodes=2))).cluster_id
    [lease] = [r for r in await stack.store.read(subjects.cluster_events(stack.tenant, cid)) if r.type == "ClusterLeaseChanged"]
    first, _ = await delivered(webhook)
    assert first["kind"] == "lease_expiring" and first["cluster"] == "leased" and first["cluster_id"] == cid
    assert first["expires_at"] == lease.event.expires_at.isoformat() and "the lease of cluster leased ends at" in first["text"]
    await Webhook.until(stack.store, subjects.notification_events(stack.tenant, "leases"),
                        lambda es: any(e.type == "NotificationAttempted" and e.final for e in es))

    # The notifier restarts, then its consumer hands it the same lease event again (at-least-once
    # delivery): nothing is owed, nothing queued or sent again.
    await notifiers.stop()
    again = await notifiers.start()
    assert again.owed == {}
    await again.on_lease_event(lease)
    assert again.owed == {}

    # An extended lease is a new lease: told once more, of its new end. (A second telling of the
    # first lease would have reached the receiver before this: it was due at once.)
    extended = await stack.client.request(ExtendLease(cluster_id=cid, by_s=1))
    assert isinstance(extended, LeaseExtended), extended
    second, _ = await delivered(webhook)
    assert second["kind"] == "lease_expiring" and second["expires_at"] == extended.expires_at.isoformat()
    events = await Webhook.until(stack.store, subjects.notification_events(stack.tenant, "leases"),
                                 lambda es: sum(e.type == "NotificationAttempted" and e.final for e in es) == 2)
    queued = [e for e in events if e.type == "NotificationQueued"]
    # (On a busy machine an attempt may time out and be retried: each is recorded, one succeeds.)
    assert len(queued) == 2 and queued[0].id != queued[1].id
    assert [a.id for a in events if a.type == "NotificationAttempted" and a.ok] == [queued[0].id, queued[1].id]
    assert webhook.got.empty()
    assert await stack.store.read(subjects.notification_events(stack.tenant, "failures")) == []


async def test_a_check_that_finds_a_service_stopped_tells_drift_found_naming_cluster_and_node(
        stack: Stack, webhook: Webhook, notifiers: Notifiers) -> None:
    await change_catalog(stack, status=True)
    await subscribe(stack, webhook, "drift", ["drift_found"])
    await notifiers.start()
    cid = (await run(stack, CreateCluster(name="drifty", template="hadoop-small", nodes=3))).cluster_id
    node = sorted(n.id for n in stack.planner.clusters[cid].nodes.values() if SERVICE in n.services)[0]
    automator = stack.workers.executor.inner.automator("simulated")
    assert isinstance(automator, SimulatedAutomator)
    automator.states[(cid, node, SERVICE)] = "stopped"  # the service died there
    await run(stack, CheckCluster(cluster_id=cid))
    body, raw = await delivered(webhook)
    assert body["kind"] == "drift_found" and body["cluster"] == "drifty" and body["cluster_id"] == cid and body["count"] == 1
    assert f"{SERVICE} on {node} stopped (should be running)" in body["drift"] and node in body["text"]
    events = await Webhook.until(stack.store, subjects.notification_events(stack.tenant, "drift"),
                                 lambda es: any(e.type == "NotificationAttempted" and e.final for e in es))
    recorded = json.dumps([e.model_dump(mode="json") for e in events])
    for secret in (webhook.secret, os.environ["MUSTER_TOKEN"]):
        assert secret.encode() not in raw and secret not in recorded
    assert [e.type for e in events].count("NotificationQueued") == 1 and events[-1].ok
    assert webhook.got.empty()


async def test_a_subscription_made_after_a_lease_was_set_is_told_of_it(stack: Stack, webhook: Webhook,
                                                                       notifiers: Notifiers) -> None:
    """Session 32: `notify add leases --on lease_expiring` told nothing of the leases the
    tenant's clusters had already (their events came before it); only a lease set or moved
    afterwards was told. A put that wants `lease_expiring` now queues the leases there are."""
    await change_catalog(stack, lease=LEASE)
    await notifiers.start()
    cid = (await run(stack, CreateCluster(name="early", template="hadoop-small", nodes=2))).cluster_id
    [lease] = [r for r in await stack.store.read(subjects.cluster_events(stack.tenant, cid)) if r.type == "ClusterLeaseChanged"]
    await subscribe(stack, webhook, "late", ["lease_expiring"], lease_warning_s=WARNING_S)
    told, _ = await delivered(webhook)
    assert (told["kind"], told["cluster"], told["expires_at"]) == ("lease_expiring", "early", lease.event.expires_at.isoformat())
    events = await Webhook.until(stack.store, subjects.notification_events(stack.tenant, "late"),
                                 lambda es: any(e.type == "NotificationAttempted" and e.final for e in es))
    assert [e.id for e in events if e.type == "NotificationQueued"] == [f"late-{lease.seq}-lease_expiring"]
    await subscribe(stack, webhook, "nothing", ["job_failed"])  # (another kind: no lease read for it)
    assert await stack.store.read(subjects.notification_events(stack.tenant, "nothing")) == []
