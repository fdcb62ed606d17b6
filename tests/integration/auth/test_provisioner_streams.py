"""A provisioner serves the tenants of its queue grants only; its bus permissions must not give
it the others' events through JetStream's own stream settings. It could create any stream and
update any stream's config (`$JS.API.STREAM.CREATE.*`, `UPDATE.*`: every service declares its
streams at start), and ask any stream's info: a stream of its own sourcing EVENTS, or EVENTS
itself given a `republish`, had the server copy every tenant's events to the provisioner's own
inbox; a lower limit on EVENTS would have dropped them all; EVENTS' info with a subject filter
named every subject of the log (every tenant's clusters, jobs, governance entities, people)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest_asyncio
from nats.aio.client import Client
from nats.js.api import AckPolicy, ConsumerConfig, DiscardPolicy, RePublish, StreamConfig, StreamSource

from contracts import subjects
from contracts.events import ClusterRequested
from contracts.records import Append
from contracts.tasks import ProvisionerInfo
from muster.bus.eventstore import EventStore
from muster.bus.streams import ensure_streams, events_config
from muster.bus.wire import flush
from services.provisioner.domain.actions import WorkerConfig
from services.provisioner.presence import Presence, live_provisioners, presence_bucket, presence_key
from services.provisioner.queues import declare_queue

from .conftest import Authed
from .refusals import let_through, raw_refused, refused, unanswered
from .watched import WatchedClient, watching

QUIET_S = 1.0
"""How long a copy has to arrive once an event is appended (none may)."""


@dataclass
class World:
    authed: Authed
    p1: Client
    system: Client
    violations: list[str]


@pytest_asyncio.fixture
async def world(authed: Authed) -> AsyncIterator[World]:
    tokens = await authed.people({"p1": {"role": "service", "service": "provisioner"}},
                                 (("p1", "execute", "queue:default"),), tenant="b")
    system = await authed.raw(authed.system_token, "sys")
    await ensure_streams(system.jetstream())
    violations: list[str] = []

    async def on_error(err: Exception) -> None:
        violations.append(str(err).lower())

    p1 = await authed.raw(tokens["p1"], "p1", WatchedClient, error_cb=on_error)
    yield World(authed, p1, system, violations)
    await p1.close()
    await system.close()


async def _append_a(world: World, cluster: str) -> None:
    requested = ClusterRequested(tenant="a", cluster_id=cluster, name=cluster, template="t", provider="p", job_id="j")
    await EventStore(world.system).append(subjects.cluster_events("a", cluster), [Append(requested, msg_id=cluster)])


async def _copies(world: World) -> list[str]:
    got: list[str] = []
    done = asyncio.Event()

    async def take(msg: object) -> None:
        got.append(getattr(msg, "subject", ""))
        done.set()

    sub = await world.p1.subscribe("_INBOX.p1.>", cb=take)
    await flush(world.p1)
    await _append_a(world, "c-after")
    try:
        await asyncio.wait_for(done.wait(), QUIET_S)  # an event is what would wake it, never a sleep loop
    except TimeoutError:
        pass
    await sub.unsubscribe()
    return got


async def test_a_provisioner_cannot_have_another_tenants_events_copied_to_it(world: World) -> None:
    js = world.p1.jetstream(timeout=2)
    spy = StreamConfig(name="SPY", subjects=["spy.nothing"], sources=[StreamSource(name=subjects.EVENTS_STREAM)],
                       republish=RePublish(src=">", dest="_INBOX.p1.spy.>"))
    republished = events_config()
    republished.republish = RePublish(src=">", dest="_INBOX.p1.evt.>")
    assert await let_through({"a stream sourcing the log": refused(js.add_stream(spy)),
                              "the log republished": refused(js.update_stream(republished))}) == []
    assert await _copies(world) == []


async def test_a_provisioner_cannot_drop_the_log_nor_list_its_subjects(world: World) -> None:
    await _append_a(world, "c-before")
    js = world.p1.jetstream(timeout=2)
    limited = events_config()
    limited.max_msgs, limited.discard = 1, DiscardPolicy.OLD
    request = json.dumps({"subjects_filter": ">"}).encode()
    assert await let_through({"a lower limit on the log": refused(js.update_stream(limited)),
                              "the log's info naming every subject": unanswered(
                                  world.p1, f"$JS.API.STREAM.INFO.{subjects.EVENTS_STREAM}", request)}) == []
    info = await world.system.jetstream().stream_info(subjects.EVENTS_STREAM)
    assert info.config.max_msgs == -1 and info.state.messages >= 1


async def test_a_provisioner_still_declares_what_it_uses(world: World) -> None:
    """What its start does: the log's streams (already there: no update) and its presence bucket."""
    await ensure_streams(world.p1.jetstream(timeout=5))
    await presence_bucket(world.p1.jetstream(timeout=5))
    assert not any("permissions violation" in v for v in world.violations), world.violations


async def test_a_provisioner_uses_a_stream_another_version_declared_as_it_is(world: World) -> None:
    """It may not update it (the auth service does at its start): its start goes on, not a crash."""
    other = events_config()
    other.description = "declared by another version"
    await world.system.jetstream().update_stream(other)
    with watching():  # (its refused update ends at the server's word: the same timeout error, without the wait)
        await ensure_streams(world.p1.jetstream(timeout=1))
    info = await world.system.jetstream().stream_info(subjects.EVENTS_STREAM)
    assert info.config.description == "declared by another version"


async def test_a_provisioner_cannot_make_its_queue_take_every_tenants_tasks(world: World) -> None:
    """Its queue's durable (`workers-b-default`) had its filter in the request's body, which
    permissions cannot see: on a TASKS a restart had just emptied of the other queues' consumers
    (TASKS is a work queue: no two consumers may overlap), a provisioner declaring it first with
    `muster.task.>` took every tenant's tasks, and the other queues could not be declared."""
    await ensure_streams(world.system.jetstream())
    js = world.p1.jetstream(timeout=2)
    durable = subjects.task_consumer("b", "default")
    every = f"{subjects.TASK}.>"
    create = f"$JS.API.CONSUMER.CREATE.{subjects.TASKS_STREAM}"
    body = {"stream_name": subjects.TASKS_STREAM,
            "config": {"name": durable, "durable_name": durable, "ack_policy": "explicit", "filter_subject": every}}

    def durable_of(subject_filter: str, name: str | None = durable) -> ConsumerConfig:
        return ConsumerConfig(name=name, durable_name=durable, ack_policy=AckPolicy.EXPLICIT, filter_subject=subject_filter)

    attacks = {
        "legacy durable, the filter in the body": refused(js.add_consumer(subjects.TASKS_STREAM, durable_of(every, None))),
        "named, every task in the subject": refused(js.add_consumer(subjects.TASKS_STREAM, durable_of(every))),
        "named, no filter in the subject": raw_refused(world.p1, f"{create}.{durable}", body),
        "named, another tenant's queue": refused(js.add_consumer(subjects.TASKS_STREAM,
                                                                  durable_of(subjects.task_queue("a", "default")))),
    }
    assert await let_through(attacks) == []
    assert [c.name for c in await world.system.jetstream().consumers_info(subjects.TASKS_STREAM)] == []
    world.violations.clear()  # (the attacks')
    await declare_queue(world.p1.jetstream(timeout=5), "b", WorkerConfig("p1", tenants=("b",)))  # its own, as its start does
    (made,) = await world.system.jetstream().consumers_info(subjects.TASKS_STREAM)
    assert (made.name, made.config.filter_subject) == (durable, subjects.task_queue("b", "default"))
    assert not any("permissions violation" in v for v in world.violations), world.violations



async def test_a_provisioner_takes_its_own_expired_presence_record_back_with_its_own_rights(world: World) -> None:
    """Decision 54: a provisioner writes its presence only over its own last record, and when that
    is gone (expired, deleted) reads what is there to write over it. With its own credentials
    that read was a permission violation (the stream's message get): its lease was never renewed
    again and it gave every forward task back (test-long's compose topology, session 23)."""
    info = ProvisionerInfo(id="p1", session="s-1", host="h", pid=1, capacity=1, provisioner_class="default",
                           tenants=["b"], started_at=datetime.now(UTC))
    presence = Presence(world.p1, EventStore(world.p1), info, lambda: (0, 0, False), ttl_s=30)
    await presence.register()
    try:
        kv = await world.system.jetstream().key_value(subjects.PRESENCE_BUCKET)
        await kv.delete(presence_key("p1"))  # as its expiry would leave it: the record is not its last one
        await presence.refresh()
        [record] = await live_provisioners(world.system, tenant="b")
        assert record.info.session == "s-1" and not presence.replaced and presence.lease.held
        assert not any("permissions violation" in v for v in world.violations), world.violations
    finally:
        await presence.halt()
