"""The notifier against a real nats-server and a webhook receiver the test starts: a job's end
reaches the receiver signed (HMAC, timestamped, a delivery id: verifiable), a receiver that is
down is retried with every attempt recorded, a bus subscription gets its message, and
`muster notify test` sends one now."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import nats
import pytest
import pytest_asyncio
from nats.aio.client import Client

from contracts import subjects
from contracts.events import JobFailed, JobRequested, JobSucceeded
from contracts.governance import GovernancePut
from muster import tracing
from muster.bus.connect import connect
from muster.bus.eventstore import Append, EventStore
from muster.bus.streams import ensure_streams
from services.notifier.domain.signing import DELIVERY, SIGNATURE, BadSignature, verify
from services.notifier.entrypoint import start_notifier
from tests.integration.conftest import LOCAL, Webhook


async def _own_connection(url: str, system: Client, violations: list[str]) -> Client:
    """A connection with a notifier service's own token (its rights: services/auth/domain/buspermissions.py)."""
    answer = json.loads((await system.request(subjects.auth_request("test-system", "user-create"), json.dumps(
        {"principal": "notifier-1", "role": "service", "service": "notifier"}).encode(), timeout=10)).data)
    assert answer["ok"], answer

    async def on_error(err: Exception) -> None:
        violations.append(str(err))

    return await nats.connect(url, token=answer["data"]["token"], inbox_prefix="_INBOX.notifier-1", error_cb=on_error,
                              allow_reconnect=False)


@pytest_asyncio.fixture(params=("system", "own"))
async def world(fresh_nats: str, webhook: Webhook, request: pytest.FixtureRequest) -> AsyncIterator[tuple[Any, Webhook]]:
    """The notifier on the test's connection (the system's rights), or on one with its own rights."""
    violations: list[str] = []
    async with AsyncExitStack() as stack:
        nc = await connect(fresh_nats, name="notifier-test")
        stack.push_async_callback(nc.close)
        await ensure_streams(nc.jetstream())
        mine = nc
        if request.param == "own":
            mine = await _own_connection(fresh_nats, nc, violations)
            stack.push_async_callback(mine.close)
        await start_notifier(mine, stack, {"hook": webhook.secret}, allowed=LOCAL)
        yield nc, webhook
    assert not any("permissions violation" in v.lower() for v in violations), violations


async def subscribe(store: EventStore, name: str, **fields: Any) -> None:
    entity = {"name": name, "events": ["job_succeeded", "job_failed"], **fields}
    await store.append(subjects.governance_events("a", "subscription", name),
                       [Append(GovernancePut(kind="subscription", name=name, entity=entity, version=1, by="ada"), msg_id=name)])


async def job(store: EventStore, job_id: str, end: Any) -> None:
    subject = subjects.job_events("a", job_id)
    await store.append(subject, [Append(JobRequested(tenant="a", job_id=job_id, cluster_id="c1", operation="delete",
                                                     request={}, requested_by="uma"), msg_id=f"{job_id}-r"),
                                 Append(end, msg_id=f"{job_id}-end")])


async def test_a_jobs_end_reaches_the_webhook_signed_and_verifiable(world: tuple[Any, Webhook]) -> None:
    nc, receiver = world
    store = EventStore(nc)
    await subscribe(store, "hook", webhook={"url": receiver.url, "secret": "secret://hook"})
    await job(store, "j1", JobFailed(job_id="j1", reason="node n1 did not start"))
    payload, raw, headers = await asyncio.wait_for(receiver.got.get(), 20)
    assert payload["kind"] == "job_failed" and payload["job_id"] == "j1" and "did not start" in payload["text"]
    seen: set[str] = set()
    verify(receiver.secret.encode(), raw, headers[SIGNATURE], headers[DELIVERY], time.time(), seen)
    for tampered, why in ((raw + b" ", "does not match"), (raw, "taken already")):
        try:
            verify(receiver.secret.encode(), tampered, headers[SIGNATURE], headers[DELIVERY], time.time(), seen)
        except BadSignature as err:
            assert why in str(err)
        else:
            raise AssertionError("a tampered or replayed delivery was taken")
    try:
        verify(receiver.secret.encode(), raw, headers[SIGNATURE], "other", time.time() + 3600, set())
    except BadSignature as err:
        assert "tolerance" in str(err)
    events = await Webhook.until(store, subjects.notification_events("a", "hook"),
                         lambda es: any(e.type == "NotificationAttempted" and e.ok for e in es))
    # (On a busy machine a first attempt may time out and be retried: each is recorded.)
    assert events[0].type == "NotificationQueued" and events[-1].ok and events[-1].status == 204 and events[-1].final
    assert receiver.secret not in json.dumps([e.model_dump(mode="json") for e in events])


async def test_a_receiver_that_is_down_is_retried_and_each_attempt_recorded(world: tuple[Any, Webhook], closed_port: int) -> None:
    nc, _ = world
    store = EventStore(nc)
    await subscribe(store, "down", webhook={"url": f"http://127.0.0.1:{closed_port}/nobody", "secret": "secret://hook",
                                            "format": "slack"})
    await subscribe(store, "bus", subject="muster.cb.a.jobs")
    bus = await nc.subscribe("muster.cb.a.jobs")
    await job(store, "j2", JobSucceeded(job_id="j2"))
    message = await bus.next_msg(timeout=20)
    assert json.loads(message.data)["kind"] == "job_succeeded" and message.headers[DELIVERY].startswith("bus-")
    events = await Webhook.until(store, subjects.notification_events("a", "down"),
                         lambda es: sum(e.type == "NotificationAttempted" for e in es) >= 2)
    attempts = [e for e in events if e.type == "NotificationAttempted"]
    assert [a.attempt for a in attempts[:2]] == [1, 2] and not attempts[0].ok and not attempts[0].final
    assert attempts[0].next_at is not None and "127.0.0.1" in attempts[0].error


async def test_notify_test_sends_one_now(world: tuple[Any, Webhook]) -> None:
    nc, receiver = world
    store = EventStore(nc)
    await subscribe(store, "hook", webhook={"url": receiver.url, "secret": "secret://hook"})
    request = {"kind": "subscription", "name": "hook"}
    reply = json.loads((await nc.request(subjects.governance_request("a", "test-system", "notify-test"),
                                         json.dumps(request).encode(), timeout=20)).data)
    assert reply["ok"], reply
    payload, _, _ = await asyncio.wait_for(receiver.got.get(), 5)
    assert payload["kind"] == "test"


async def test_a_webhook_url_given_by_reference_is_delivered_to_and_never_recorded(fresh_nats: str, webhook: Webhook,
                                                                                     closed_port: int) -> None:
    """A URL that is itself a credential (a Slack incoming webhook's path, a receiver's
    `?token=`) lives in the notifier's secrets file; the log, the attempts and the answers
    name the reference only, also when the receiver is down."""
    async with AsyncExitStack() as stack:
        nc = await connect(fresh_nats, name="notifier-test")
        stack.push_async_callback(nc.close)
        await ensure_streams(nc.jetstream())
        down = f"http://127.0.0.1:{closed_port}/nobody?token=tok-down"
        await start_notifier(nc, stack, {"hook": webhook.secret, "hook-url": f"{webhook.url}?token=tok-up", "down-url": down},
                             allowed=LOCAL)
        store = EventStore(nc)
        await subscribe(store, "up", webhook={"url": "secret://hook-url", "secret": "secret://hook"})
        await subscribe(store, "down", webhook={"url": "secret://down-url", "secret": "secret://hook"})
        await job(store, "j3", JobSucceeded(job_id="j3"))
        payload, raw, headers = await asyncio.wait_for(webhook.got.get(), 20)
        verify(webhook.secret.encode(), raw, headers[SIGNATURE], headers[DELIVERY], time.time(), set())
        assert payload["job_id"] == "j3"
        failed = await Webhook.until(store, subjects.notification_events("a", "down"),
                                     lambda es: any(e.type == "NotificationAttempted" for e in es))
        attempt = next(e for e in failed if e.type == "NotificationAttempted")
        assert not attempt.ok and attempt.error.startswith("secret://down-url: ")
        recorded = json.dumps([r.event.model_dump(mode="json") for r in await store.read("muster.evt.a.>")])
        assert "tok-up" not in recorded and "tok-down" not in recorded and "/nobody" not in recorded and webhook.url not in recorded


async def test_a_traced_jobs_delivery_is_a_span_of_its_trace_and_the_receiver_is_given_it(
        world: tuple[Any, Webhook], spans: Any) -> None:
    """docs/tracing.md: each attempt a `notify <subscription>` span under the job's span; the
    webhook's request carries that span as its `traceparent`, so a receiver may join the trace."""
    nc, receiver = world
    store = EventStore(nc)
    job_trace, _ = tracing.new_job(None)
    assert job_trace is not None
    await subscribe(store, "hook", webhook={"url": receiver.url, "secret": "secret://hook"})
    subject = subjects.job_events("a", "j9")
    await store.append(subject, [Append(JobRequested(tenant="a", job_id="j9", cluster_id="c1", operation="delete", request={},
                                                     requested_by="uma", trace=job_trace), msg_id="j9-r"),
                                 Append(JobSucceeded(job_id="j9"), msg_id="j9-end")])
    _, _, headers = await asyncio.wait_for(receiver.got.get(), 20)
    events = await Webhook.until(store, subjects.notification_events("a", "hook"),
                                 lambda es: any(e.type == "NotificationAttempted" and e.ok for e in es))
    assert events[-1].status == 204
    delivered = [s for s in spans.get_finished_spans() if s.name == "notify hook" and s.attributes.get("muster.ok")]
    assert len(delivered) == 1, [s.name for s in spans.get_finished_spans()]
    [span] = delivered
    assert f"{span.context.trace_id:032x}" == job_trace.split("-")[1] and f"{span.parent.span_id:016x}" == job_trace.split("-")[2]
    assert span.attributes["http.response.status_code"] == 204 and span.attributes["muster.target"] == "webhook"
    assert headers["traceparent"].split("-")[1:3] == [f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}"]
    assert receiver.url not in str(dict(span.attributes))  # never the URL
