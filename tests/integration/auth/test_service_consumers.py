"""The pool, governance, notifier and solver services may create consumers on the log of the
filters they read only (docs/security.md, "Services' JetStream rights"). Before, each could
create an unnamed consumer (`$JS.API.CONSUMER.CREATE.EVENTS`, its filter in the request's body
where permissions cannot see it) or a legacy durable one with any filter, so a compromised one
read every tenant's events as they came; and governance, the notifier and the solver could
delete any consumer of the log (a planner's). These are a raw nats-py client's attacks with each
service's own credentials; and the same credentials' own reads, as its code makes them (durables
of its routes, nats-py's ordered consumers of its mirrors, reset after a gap, muster's ordered
reader), with no permission violation."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from contracts import subjects
from contracts.events import ClusterRequested
from contracts.records import Append, Recorded
from muster.bus.consume import consume_events
from muster.bus.eventstore import EventStore
from muster.bus.ordered import OrderedReader
from muster.bus.scopedlog import ScopedEventStore
from muster.bus.wire import close_push, flush, ordered_config, restart_ordered
from services.auth.domain.buspermissions import CONSUMED
from services.auth.view import IdentityView
from services.governance.mirror import GovernanceMirror
from services.pool.mirror import PoolMirror

from .conftest import Authed
from .refusals import let_through, raw_refused, refused
from .serviceworld import World, service_world

SCOPED = tuple(sorted(CONSUMED))
DEADLINE_S = 10.0
QUIET_S = 1.0
"""How long a copy of another tenant's event has to arrive (none may)."""
FOREIGN = f"{subjects.EVT}.other.plan.>"
"""Another tenant's plans: a filter none of these services' consumers reads."""


@pytest_asyncio.fixture
async def world(authed: Authed) -> AsyncIterator[World]:
    async with service_world(authed, (*SCOPED, "planner")) as made:
        yield made


async def _append(world: World, subject: str, name: str) -> None:
    requested = ClusterRequested(tenant="other", cluster_id=name, name=name, template="t", provider="p", job_id="j")
    await EventStore(world.system).append(subject, [Append(requested, msg_id=f"{subject}/{name}")])


def _example(subject_filter: str) -> str:
    """A subject the filter matches."""
    return ".".join("other" if t == "*" else "x.y" if t == ">" else t for t in subject_filter.split("."))


@pytest.mark.parametrize("kind", SCOPED)
async def test_a_service_cannot_read_other_events_by_a_consumer(world: World, kind: str) -> None:
    nc = world.services[kind]
    js = nc.jetstream(timeout=2)
    inbox = f"_INBOX.{kind}-1.spy"
    got: list[str] = []
    arrived = asyncio.Event()

    async def take(msg: Msg) -> None:
        got.append(msg.subject)
        arrived.set()

    sub = await nc.subscribe(f"{inbox}.>", cb=take)
    await flush(nc)
    own = CONSUMED[kind][0]
    create = f"$JS.API.CONSUMER.CREATE.{subjects.EVENTS_STREAM}"

    def push(name: str | None, **fields: Any) -> dict[str, Any]:
        config = {"deliver_subject": f"{inbox}.{name or 'unnamed'}", "ack_policy": "none", **fields}
        return {"stream_name": subjects.EVENTS_STREAM, "config": config | ({"name": name} if name else {})}

    attacks = {
        "unnamed, any filter in the body (nats-py's ordered consumer)": refused(js.add_consumer(
            subjects.EVENTS_STREAM, ConsumerConfig(filter_subject=FOREIGN, deliver_subject=f"{inbox}.a", ack_policy=AckPolicy.NONE))),
        "legacy durable, the filter in the body": refused(js.add_consumer(
            subjects.EVENTS_STREAM, ConsumerConfig(durable_name="spy", filter_subject=FOREIGN, deliver_subject=f"{inbox}.b"))),
        "named, a foreign filter in the subject": refused(js.add_consumer(
            subjects.EVENTS_STREAM, ConsumerConfig(name="spy", filter_subject=FOREIGN, deliver_subject=f"{inbox}.c"))),
        "named, every event": raw_refused(nc, f"{create}.spy2.>", push("spy2", filter_subject=">")),
        "named, no filter in the subject, several in the body": raw_refused(
            nc, f"{create}.spy3", push("spy3", filter_subjects=[own, FOREIGN])),
        # what the server's own check refuses: the body's filter is not the subject's
        "named, its own filter in the subject, another in the body": raw_refused(
            nc, f"{create}.spy4.{own}", push("spy4", filter_subject=FOREIGN)),
        "named, its own filter in the subject, several in the body": raw_refused(
            nc, f"{create}.spy5.{own}", push("spy5", filter_subjects=[own, FOREIGN])),
    }
    assert await let_through(attacks) == []
    await _append(world, _example(FOREIGN), "c-after")
    try:
        await asyncio.wait_for(arrived.wait(), QUIET_S)  # a copy is what would wake it
    except TimeoutError:
        pass
    await sub.unsubscribe()
    assert got == []
    made = await world.system.jetstream().consumers_info(subjects.EVENTS_STREAM)
    assert [c.name for c in made if (c.config.deliver_subject or "").startswith(inbox)] == []


@pytest.mark.parametrize("kind", ("governance", "notifier", "solver"))
async def test_a_service_that_deletes_no_consumer_cannot_delete_a_planners(world: World, kind: str) -> None:
    durable = "planner-jobs-test"
    await world.system.jetstream().add_consumer(subjects.EVENTS_STREAM, ConsumerConfig(
        durable_name=durable, filter_subject=subjects.ALL_JOB_EVENTS, ack_policy=AckPolicy.EXPLICIT))
    assert await refused(world.services[kind].jetstream(timeout=2).delete_consumer(subjects.EVENTS_STREAM, durable))
    assert (await world.system.jetstream().consumer_info(subjects.EVENTS_STREAM, durable)).name == durable


@pytest.mark.parametrize("kind", ("pool", "notifier", "solver"))
async def test_a_service_consumes_its_routes(world: World, kind: str) -> None:
    """Its durables (`consume_events`, as `consume_routes` makes them), created by name with
    their filter in the subject, and what is appended there delivered."""
    js = world.services[kind].jetstream(timeout=5)
    got: asyncio.Queue[str] = asyncio.Queue()

    async def handler(r: Recorded) -> None:
        await got.put(r.subject)

    subs = []
    for route in importlib.import_module(f"services.{kind}.routing").ROUTES:
        subs.append(await consume_events(js, route.filter, route.durable, handler, queue=route.queue))
        await _append(world, _example(route.filter), route.durable)
        assert await asyncio.wait_for(got.get(), DEADLINE_S) == _example(route.filter)
    for sub in subs:
        await sub.unsubscribe()
    assert world.clean(), world.violations


async def test_the_mirrors_and_views_start_with_the_services_credentials(world: World) -> None:
    """The pool's mirror (and its start's replay), governance's schedules and identities, the
    notifier's subscriptions and identities: nats-py's ordered consumers and muster's ordered reader."""
    pool = PoolMirror(world.services["pool"].jetstream(timeout=5))
    schedules = GovernanceMirror(world.services["governance"].jetstream(timeout=5), subjects.ALL_SCHEDULE_EVENTS)
    subscriptions = GovernanceMirror(world.services["notifier"].jetstream(timeout=5), subjects.ALL_SUBSCRIPTION_EVENTS)
    for mirror in (pool, schedules, subscriptions):
        await mirror.start()
        await mirror.wait_ready()
    views = [await IdentityView(world.services[kind]).start() for kind in ("governance", "notifier")]
    await _append(world, subjects.pool_events("p1"), "p1")
    replayed: list[str] = []
    assert await ScopedEventStore(world.services["pool"]).replay(subjects.ALL_POOL_EVENTS, lambda r: replayed.append(r.subject)) == 1
    assert replayed == [subjects.pool_events("p1")]
    for mirror in (pool, schedules, subscriptions):
        await mirror.stop()
    for view in views:
        await view.stop()
    assert world.clean(), world.violations


@pytest.mark.parametrize("kind", SCOPED)
@pytest.mark.parametrize("reset", ("nats-py's, after a gap", "restart_ordered"))
async def test_an_ordered_consumer_reset_is_made_again_under_a_new_name(world: World, kind: str, reset: str) -> None:
    """nats-py's reset re-sends the config it made the consumer with: under the same name the
    server refused it (that consumer is still there) and the reader read nothing more."""
    nc = world.services[kind]
    js = nc.jetstream(timeout=5)
    own = CONSUMED[kind][-1]
    got: asyncio.Queue[Msg] = asyncio.Queue()
    sub = await js.subscribe(own, ordered_consumer=True, config=ordered_config(), cb=got.put, stream=subjects.EVENTS_STREAM,
                             deliver_policy=DeliverPolicy.ALL, idle_heartbeat=5.0)  # (no reset of its own on a loaded machine)
    await _append(world, _example(own), "first")
    first = await asyncio.wait_for(got.get(), DEADLINE_S)
    before = sub._consumer
    jsi = sub._sub._jsi
    assert jsi is not None
    if reset == "restart_ordered":
        assert await restart_ordered(sub)
    else:
        assert await jsi.reset_ordered_consumer(jsi._sseq + 1)  # what nats-py does on a gap
    await _append(world, _example(own), "second")
    second = await asyncio.wait_for(got.get(), DEADLINE_S)
    assert second.metadata.sequence.stream > first.metadata.sequence.stream
    made = await world.system.jetstream().consumers_info(subjects.EVENTS_STREAM)
    now = [c.name for c in made if c.config.deliver_subject == jsi._ccreq.deliver_subject]
    # The second message is the reset's proof (under the same name the server refused it); the
    # listing may meet nats-py between two consumers of another reset, so it may list none.
    assert now != [before]  # (not the first one's name, once that had gone)
    await close_push(sub)
    assert world.violations == []


async def test_the_pools_ordered_reader_makes_its_consumer_again_after_a_pause(world: World) -> None:
    """muster's ordered reader (a replay) gives up its consumer while a message's awaitable is
    awaited and makes another after: a name of its own each time."""
    for n in range(3):
        await _append(world, subjects.pool_events(f"p{n}"), f"p{n}")
    seen: list[int] = []

    async def later() -> None:
        return None

    def on_message(subject: bytes, seq: int, data: bytes, headers: bytes) -> Any:
        seen.append(seq)
        return later() if len(seen) == 1 else None

    reader = OrderedReader(world.services["pool"], subjects.EVENTS_STREAM, [subjects.ALL_POOL_EVENTS], on_message)
    assert await reader.run(DEADLINE_S) == 3
    assert reader.pauses == 1 and seen == sorted(seen)
    assert world.clean(), world.violations
