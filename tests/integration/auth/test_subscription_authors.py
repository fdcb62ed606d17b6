"""A subscription sends the tenant's events only while its author may read them. A user with
`read` on the tenant made one to a receiver of its choosing, was disabled (or lost the grant),
and the notifier went on sending it every job of the tenant: a schedule stops when its owner
may no longer run it, a subscription did not."""

from __future__ import annotations

import asyncio
import json
import uuid
from contextlib import AsyncExitStack

from contracts import subjects
from contracts.events import JobRequested, JobSucceeded
from contracts.governance import GovernancePut
from contracts.notifications import NotificationAttempted
from muster.bus.connect import connect
from muster.bus.eventstore import Append, EventStore
from muster.bus.wire import flush
from services.notifier.entrypoint import start_notifier

from .conftest import Authed

DEADLINE_S = 15.0


async def test_a_disabled_authors_subscription_is_not_sent(authed: Authed) -> None:
    tokens = await authed.people({"sam": {"tenant": "a"}, "ada": {"tenant": "a", "role": "tenant_admin"},
                                  "notifier": {"role": "service", "service": "notifier"}}, (("sam", "read", "tenant"),))
    system = await authed.raw(authed.system_token, "sys")
    store = EventStore(system)
    for name, by in (("sams", "sam"), ("adas", "ada")):
        put = GovernancePut(kind="subscription", name=name, version=1, by=by,
                            entity={"name": name, "events": ["job_succeeded"], "subject": f"muster.cb.a.{name}"})
        await store.append(subjects.governance_events("a", "subscription", name), [Append(put, msg_id=f"sub-{name}")])
    root = await authed.raw(authed.admin_token, "root")
    assert (await authed.ask(root, "root", "user-disable", principal="sam"))["ok"]  # before the notifier starts: it knows
    await root.close()
    attempts: dict[str, NotificationAttempted] = {}
    sent: list[str] = []
    both = asyncio.Event()

    async def attempted(msg: object) -> None:
        data = json.loads(getattr(msg, "data", b"{}"))
        if data.get("type") == "NotificationAttempted":
            attempts[getattr(msg, "subject", "").split(".")[-1]] = NotificationAttempted.model_validate(data)
            if len(attempts) == 2:
                both.set()

    async def told(msg: object) -> None:
        sent.append(getattr(msg, "subject", ""))

    await system.subscribe("muster.evt.a.notify.*", cb=attempted)
    await system.subscribe("muster.cb.a.>", cb=told)
    async with AsyncExitStack() as stack:
        nc = await connect(authed.url, name="notifier", token=tokens["notifier"])
        stack.push_async_callback(nc.close)
        await start_notifier(nc, stack, {})
        job = str(uuid.uuid4())
        await store.append(subjects.job_events("a", job), [
            Append(JobRequested(tenant="a", job_id=job, cluster_id=str(uuid.uuid4()), operation="check", request={},
                                requested_by="ada"), msg_id=f"{job}-r"),
            Append(JobSucceeded(job_id=job), msg_id=f"{job}-s")])
        await asyncio.wait_for(both.wait(), DEADLINE_S)
        await flush(system)
    await system.close()
    assert attempts["adas"].ok, attempts["adas"]
    refused = attempts["sams"]
    assert not refused.ok and refused.final and "its author sam may no longer read tenant a" in refused.error, refused
    assert sent == ["muster.cb.a.adas"], sent
