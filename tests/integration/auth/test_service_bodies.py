"""The pool service, the solver, governance and the notifier read of `BODIES` (the offloaded
bodies of events larger than 32 KB) only the bodies of the events they may read: each part by the
direct get naming its subject, `muster.body.<the event's subject after muster.evt.>.<hex>.<i>`,
under rights that name their filters (decision 0057; docs/security.md, "Services' JetStream
rights"). Before, each had every read of `BODIES` (the message get and the batch direct get with
the subject in the request's body, consumers of any filter, its info naming every subject), and
a body stored per tenant (`muster.body.<tenant>.<hex>`): a compromised one read any tenant's large
plan or layout. These are a raw nats-py client's attacks with each one's own credentials; and its
own reads and writes of bodies, as its code makes them, with no permission violation."""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from nats.js.api import ConsumerConfig, DeliverPolicy

from contracts import subjects
from contracts.events import ClusterLayoutChanged
from contracts.layout import NodeSpec
from contracts.records import Append
from muster.bus.bodies import BODIES_STREAM, CHUNK, H_BODY, INLINE_LIMIT, BodyError
from muster.bus.bodymove import move_old_bodies
from muster.bus.eventstore import EventStore
from muster.bus.scopedlog import ScopedEventStore

from .conftest import Authed
from .refusals import let_through, raw_refused, refused
from .serviceworld import SCOPED, World, service_world
from .watched import watching

FOREIGN = subjects.plan_events("other", "p1")
"""Another tenant's plan, whose body none of them may read."""
OWN = {"pool": subjects.pool_events("p1"), "solver": subjects.layout_events("acme", "j1"),
       "governance": subjects.cluster_events("acme", "c1"), "notifier": subjects.job_events("acme", "j1")}
"""A subject of each one's own filters, whose bodies it reads."""
WRITES = {"pool": subjects.pool_request_events("acme", "p1", "r1"), "solver": subjects.layout_events("acme", "j2"),
          "governance": subjects.governance_events("acme", "schedule", "s1"),
          "notifier": subjects.notification_events("acme", "s1")}
"""A subject each one writes."""


@pytest_asyncio.fixture
async def world(authed: Authed) -> AsyncIterator[World]:
    async with service_world(authed, SCOPED) as made:
        yield made


def _big(name: str) -> Append:
    nodes = [NodeSpec(id=f"n{i}", hardwaretype="large", imagetype="ubuntu22", services=["base"], hostname=f"h{i}.local",
                      nodenum=i, flavor="m5.large", image="ami-1", sshuser="ubuntu") for i in range(1000, 2500)]
    event = ClusterLayoutChanged(cluster_id=name, job_id="j1", nodes=nodes)
    assert len(event.model_dump_json()) > INLINE_LIMIT
    return Append(event, msg_id=f"big/{name}")


async def _old_layout_body(world: World, tenant: str) -> str:
    """A body as versions before 0057 stored it, every part on `muster.body.<tenant>.<hex>`."""
    data = b'{"secret": "' + b"y" * 50_000 + b'"}'
    digest = hashlib.sha256(data).hexdigest()
    subject = f"{subjects.BODY}.{tenant}.{digest}"
    await world.system.jetstream().publish(subject, zlib.compress(data)[:CHUNK], headers={"Muster-Part": "0/1"})
    return subject


@pytest.mark.parametrize("kind", SCOPED)
async def test_a_service_cannot_read_another_tenants_bodies(world: World, kind: str) -> None:
    [seq] = await EventStore(world.system).append(FOREIGN, [_big("p1")])
    digest = (await world.system.jetstream().get_msg(subjects.EVENTS_STREAM, seq)).headers[H_BODY].split(":")[1]  # type: ignore[index]
    part = subjects.body_part(FOREIGN, digest, 0)
    old = await _old_layout_body(world, "other")
    nc = world.services[kind]
    js = nc.jetstream(timeout=2)
    direct, message = f"$JS.API.DIRECT.GET.{BODIES_STREAM}", f"$JS.API.STREAM.MSG.GET.{BODIES_STREAM}"
    every = f"{subjects.BODY}.>"
    attacks = {
        "direct get of another tenant's body part, its subject in the API subject": refused(
            js.get_last_msg(BODIES_STREAM, part, direct=True)),
        "direct get of a body of the layout before 0057": refused(js.get_last_msg(BODIES_STREAM, old, direct=True)),
        "batch direct get, a filter in the body": raw_refused(nc, direct, {"seq": 1, "batch": 10, "next_by_subj": every}),
        "direct get, the last of a subject in the body": raw_refused(nc, direct, {"last_by_subj": part}),
        "direct get of each subject's last (multi_last)": raw_refused(nc, direct, {"multi_last": [every], "batch": 10}),
        "message get, the next of a filter (the reads before 0057)": raw_refused(nc, message, {"seq": 1, "next_by_subj": every}),
        "message get, the last of a subject": refused(js.get_last_msg(BODIES_STREAM, part)),
        "message get by sequence": refused(js.get_msg(BODIES_STREAM, 1)),
        "BODIES' info naming every subject": refused(js.stream_info(BODIES_STREAM, subjects_filter=">")),
        "a consumer, the filter in the body": refused(js.add_consumer(BODIES_STREAM, ConsumerConfig(
            filter_subject=every, deliver_policy=DeliverPolicy.ALL, inactive_threshold=5))),
        "a named consumer, the filter in the API subject": raw_refused(
            nc, f"$JS.API.CONSUMER.CREATE.{BODIES_STREAM}.x.{every}",
            {"stream_name": BODIES_STREAM, "config": {"name": "x", "filter_subject": every, "inactive_threshold": 5_000_000_000}}),
        "an ordered consumer": refused(js.subscribe(every, stream=BODIES_STREAM, ordered_consumer=True)),
    }
    assert await let_through(attacks) == []


@pytest.mark.parametrize("kind", SCOPED)
async def test_a_service_reads_and_writes_the_bodies_of_its_own_events(world: World, kind: str) -> None:
    """A large event of its filters read whole (each part by its subject's direct get), and a
    large event of its own written (a body's put asks whether its last part is stored), with
    its own credentials and no permission violation."""
    [seq] = await EventStore(world.system).append(OWN[kind], [_big("own")])
    mine = ScopedEventStore(world.services[kind], confirm=False, deletes=kind == "pool")
    [read] = await mine.read(OWN[kind])
    assert read.seq == seq and read.event == _big("own").event
    [written] = await mine.append(WRITES[kind], [_big("written")])
    assert await mine.append(WRITES[kind], [_big("written")], expect_last_seq=0) == [written]  # (a retry that landed)
    [back] = await EventStore(world.system).read(WRITES[kind])
    assert back.event == _big("written").event
    assert world.clean(), world.violations


async def test_a_body_offloaded_before_0057_is_moved_where_the_services_read_it(world: World) -> None:
    """An event a version before 0057 offloaded: its stub names no `parts`, its body is on
    `muster.body.<tenant>.<hex>`, which governance may not read; the auth service's start copies
    it under the event's subject (`move_old_bodies`), and governance reads it whole there."""
    cluster = subjects.cluster_events("acme", "c-old")
    big = _big("c-old")
    data = big.event.model_dump_json().encode()
    digest = hashlib.sha256(data).hexdigest()
    packed = zlib.compress(data)
    chunks = [packed[i : i + CHUNK] for i in range(0, len(packed), CHUNK)]
    js = world.system.jetstream()
    for i, chunk in enumerate(chunks):
        await js.publish(f"{subjects.BODY}.acme.{digest}", chunk, headers={"Muster-Part": f"{i}/{len(chunks)}"})
    old_stub = {"type": "ClusterLayoutChanged", "v": 1,
                "body": {"ref": f"sha256:{digest}", "size": len(data), "encoding": "zlib", "stream": BODIES_STREAM}}
    await js.publish(cluster, json.dumps(old_stub).encode(), headers={**big.headers(), H_BODY: f"sha256:{digest}"})
    governance = ScopedEventStore(world.services["governance"], confirm=False, deletes=False)
    with pytest.raises(BodyError, match="before decision 0057"), watching():  # (its refused get: the server's word, no wait)
        await governance.read(cluster)
    world.violations.clear()

    assert await move_old_bodies(world.system) == 1
    [read] = await governance.read(cluster)
    assert read.event == big.event and world.clean(), world.violations
    assert await move_old_bodies(world.system) == 0  # (from the mark on: nothing new)
