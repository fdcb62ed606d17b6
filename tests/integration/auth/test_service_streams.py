"""Every service but the auth service may create only the streams and buckets its start declares,
and update none (docs/security.md, "Services' JetStream rights"). With every service's right to
create any stream and update any stream's config, a compromised one could drop the log with a
lower limit, capture `muster.ops.>` in a stream of its own (JetStream then answered every
tenant's requests with its acknowledgements), or have every tenant's events copied to its own
inbox by a stream's `republish`; as was closed for provisioners (test_provisioner_streams.py).
Each also reads only the buckets its code uses. These are a raw nats-py client's attacks with
each service's own credentials, as a compromised service in any language would make them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import pytest
import pytest_asyncio
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from nats.js.api import ConsumerConfig, DiscardPolicy, KeyValueConfig, RePublish, StreamConfig, StreamSource
from nats.js.errors import NoStreamResponseError, NotFoundError

from contracts import subjects
from contracts.events import ClusterRequested
from contracts.records import Append
from muster.bus.budgets import NatsBudgets
from muster.bus.eventstore import EventStore
from muster.bus.shards import leases_bucket
from muster.bus.snapshotstore import SnapshotStore
from muster.bus.spend import NatsSpend
from muster.bus.streams import ensure_streams, events_config, tasks_config
from muster.bus.wire import flush
from muster.runtime.service import TASK_QUEUE_SERVICES
from services.auth.taskqueue import restore_tasks
from services.planner.nodemaps import ensure_bucket as nodemaps_bucket
from services.provisioner.presence import live_provisioners, watched_bucket
from services.tracker.adapters.kv import LocationIndex

from .conftest import Authed
from .refusals import let_through, refused, unanswered
from .serviceworld import World, service_world
from .watched import watching

SERVICES = ("tracker", "solver", "planner", "pool", "governance", "notifier")
NARROWED = ("planner", "pool", "governance", "notifier")
"""The services narrowed in session 22 (the tracker and the solver were before)."""

QUIET_S = 1.0
"""How long a copy has to arrive once an event is appended (none may)."""

BUCKETS = ("locations", "nodemaps", "snapshots", "presence", "leases", "budgets", "spend")
FORBIDDEN = {
    "planner": ("locations",),  # the tracker's index: the planner answers from its own state
    "pool": BUCKETS, "governance": BUCKETS, "notifier": BUCKETS, "solver": BUCKETS,  # they read the log only
    "tracker": ("nodemaps", "leases", "budgets", "spend"),  # its index, the stories' snapshots, the live provisioners
}
"""The buckets each service may not read (it may read the others)."""
READERS = ("planner", "pool", "governance", "notifier", "tracker", "solver")
"""The services whose buckets are narrowed to those they use (session 22)."""


@pytest_asyncio.fixture
async def world(authed: Authed) -> AsyncIterator[World]:
    async with service_world(authed, SERVICES) as made:
        yield made


async def _append(world: World, tenant: str, cluster: str) -> None:
    requested = ClusterRequested(tenant=tenant, cluster_id=cluster, name=cluster, template="t", provider="p", job_id="j")
    await EventStore(world.system).append(subjects.cluster_events(tenant, cluster), [Append(requested, msg_id=cluster)])


async def _copies(world: World, kind: str) -> list[str]:
    """What reaches the service's inbox once another tenant's event is appended."""
    nc, got, done = world.services[kind], [], asyncio.Event()

    async def take(msg: object) -> None:
        got.append(getattr(msg, "subject", ""))
        done.set()

    sub = await nc.subscribe(f"_INBOX.{kind}-1.>", cb=take)
    await flush(nc)  # (wire.flush: nats-py's own may return before the SUB reached the server)
    await _append(world, "other", "c-after")
    try:
        await asyncio.wait_for(done.wait(), QUIET_S)  # an event is what would wake it, never a sleep loop
    except TimeoutError:
        pass
    await sub.unsubscribe()
    return got


@pytest.mark.parametrize("kind", SERVICES)
async def test_a_service_cannot_drop_the_log_nor_capture_the_tenants_requests(world: World, kind: str) -> None:
    js = world.services[kind].jetstream(timeout=2)
    limited = events_config()
    limited.max_msgs, limited.discard = 1, DiscardPolicy.OLD
    capture = StreamConfig(name="CAPTURE", subjects=[f"{subjects.OPS}.>"])
    assert await let_through({"a lower limit on the log": refused(js.update_stream(limited)),
                              "a stream capturing the requests": refused(js.add_stream(capture))}) == []
    assert (await world.system.jetstream().stream_info(subjects.EVENTS_STREAM)).config.max_msgs == -1
    with pytest.raises(NotFoundError):
        await world.system.jetstream().stream_info("CAPTURE")


@pytest.mark.parametrize("kind", NARROWED)
async def test_a_service_cannot_change_the_logs_subjects_nor_its_limits(world: World, kind: str) -> None:
    js = world.services[kind].jetstream(timeout=2)
    narrowed = events_config()
    narrowed.subjects = [f"{subjects.EVT}.{kind}.>"]  # every other subject's appends refused
    aged = events_config()
    aged.max_age, aged.deny_purge, aged.deny_delete = 1.0, False, False
    assert await let_through({"narrowed subjects": refused(js.update_stream(narrowed)),
                              "an age limit, purges and deletes allowed": refused(js.update_stream(aged))}) == []
    config = (await world.system.jetstream().stream_info(subjects.EVENTS_STREAM)).config
    assert config.subjects == [subjects.ALL_EVENTS] and not config.max_age and config.deny_purge


@pytest.mark.parametrize("kind", NARROWED)
async def test_a_service_cannot_have_every_tenants_events_copied_to_it(world: World, kind: str) -> None:
    js = world.services[kind].jetstream(timeout=2)
    spy = StreamConfig(name="SPY", subjects=["spy.nothing"], sources=[StreamSource(name=subjects.EVENTS_STREAM)],
                       republish=RePublish(src=">", dest=f"_INBOX.{kind}-1.spy.>"))
    republished = events_config()
    republished.republish = RePublish(src=">", dest=f"_INBOX.{kind}-1.evt.>")
    assert await let_through({"a stream sourcing the log": refused(js.add_stream(spy)),
                              "the log republished": refused(js.update_stream(republished))}) == []
    assert await _copies(world, kind) == []


@pytest.mark.parametrize("kind", NARROWED)
async def test_a_service_cannot_purge_nor_delete_the_log(world: World, kind: str) -> None:
    """(Refused before too: no service ever had these; kept so that none gets them.)"""
    await _append(world, "other", "c-before")
    nc = world.services[kind]
    js = nc.jetstream(timeout=2)
    attacks: dict[str, Coroutine[Any, Any, bool]] = {}
    for stream in (subjects.EVENTS_STREAM, "BODIES", subjects.TASKS_STREAM):
        attacks |= {f"{stream}: purge": refused(js.purge_stream(stream)), f"{stream}: delete": refused(js.delete_stream(stream))}
    assert await let_through(attacks) == []
    assert (await world.system.jetstream().stream_info(subjects.EVENTS_STREAM)).state.messages >= 1


async def _buckets(world: World) -> None:
    """Every bucket there, with a key of tenant `other` in each."""
    js = world.system.jetstream()
    for bucket in BUCKETS:
        kv = await js.create_key_value(KeyValueConfig(bucket=bucket, history=1, direct=True))
        await kv.put("other.c1", b"{}")


@pytest.mark.parametrize("kind", READERS)
async def test_a_service_cannot_read_the_buckets_it_does_not_use(world: World, kind: str) -> None:
    await _buckets(world)
    nc = world.services[kind]
    js = nc.jetstream(timeout=2)
    attacks: dict[str, Coroutine[Any, Any, bool]] = {}
    for bucket in FORBIDDEN[kind]:
        stream, key = f"KV_{bucket}", f"$KV.{bucket}.other.c1"
        consumer = ConsumerConfig(filter_subject=f"$KV.{bucket}.>", deliver_subject=f"_INBOX.{kind}-1.kv")
        attacks |= {
            f"{bucket}: direct get by key": unanswered(nc, f"$JS.API.DIRECT.GET.{stream}.{key}"),
            f"{bucket}: direct get by seq": unanswered(nc, f"$JS.API.DIRECT.GET.{stream}", json.dumps({"seq": 1}).encode()),
            f"{bucket}: message get": refused(js.get_msg(stream, seq=1)),
            f"{bucket}: consumer": refused(js.add_consumer(stream, consumer)),
            f"{bucket}: info naming every key": refused(js.stream_info(stream, subjects_filter=">")),
            f"{bucket}: bind": refused(js.key_value(bucket)),
        }
    assert await let_through(attacks) == []


@pytest.mark.parametrize("kind", ("tracker", "solver"))
async def test_the_tracker_and_the_solver_ask_no_info_of_streams_they_do_not_use(world: World, kind: str) -> None:
    """A stream's info with a subject filter names every subject it holds: TASKS' every task of
    every tenant, the presence bucket's every provisioner (the tracker reads its records by one
    direct get, and nothing else of that bucket)."""
    await _buckets(world)
    await ensure_streams(world.system.jetstream(), tasks=True)
    nc = world.services[kind]
    js = nc.jetstream(timeout=2)
    consumer = ConsumerConfig(filter_subject="$KV.presence.>", deliver_subject=f"_INBOX.{kind}-1.kv")
    attacks = {
        "TASKS: info naming every subject": refused(js.stream_info(subjects.TASKS_STREAM, subjects_filter=">")),
        "presence: info naming every key": refused(js.stream_info("KV_presence", subjects_filter=">")),
        "presence: consumer": refused(js.add_consumer("KV_presence", consumer)),
        "presence: message get": refused(js.get_msg("KV_presence", seq=1)),
    }
    assert await let_through(attacks) == []


async def test_the_tracker_reads_its_buckets_and_the_live_provisioners(world: World) -> None:
    """The other side of the refusals above, as its code reads them."""
    await _buckets(world)
    nc = world.services["tracker"]
    js = nc.jetstream(timeout=5)
    for bucket in ("locations", "snapshots"):
        assert (await (await js.key_value(bucket)).get("other.c1")).value == b"{}"
    assert await SnapshotStore(nc).nearest("story", "other", "c1", None) is None  # (no story there: read, not refused)
    assert await live_provisioners(nc, timeout=5) == []  # (a record that is no presence: skipped)
    assert not any("permissions violation" in v for v in world.violations), world.violations


async def test_the_pool_governance_and_notifier_read_no_bucket_but_the_planner_its_own(world: World) -> None:
    """The other side of the refusals above: the planner still reads what it keeps."""
    await _buckets(world)
    js = world.services["planner"].jetstream(timeout=5)
    for bucket in set(BUCKETS) - set(FORBIDDEN["planner"]):
        assert (await (await js.key_value(bucket)).get("other.c1")).value == b"{}"
    assert not any("permissions violation" in v for v in world.violations), world.violations


@pytest.mark.parametrize("kind", SERVICES)
async def test_a_service_still_declares_the_log_it_uses(world: World, kind: str) -> None:
    """What every start does (muster.runtime.service): the log's streams, already there: nothing changes."""
    await ensure_streams(world.services[kind].jetstream(timeout=5), tasks=kind in TASK_QUEUE_SERVICES)
    assert not any("permissions violation" in v for v in world.violations), world.violations


@pytest.mark.parametrize("kind", sorted(set(SERVICES) - set(TASK_QUEUE_SERVICES)))
async def test_a_service_that_takes_no_task_cannot_declare_the_lost_task_queue(world: World, kind: str) -> None:
    """TASKS lives in memory: it is gone once nats-server restarts, until a planner or a
    provisioner declares it again. A service that uses no task may not declare it first, with
    subjects of its own (`muster.ops.>`: JetStream would acknowledge every tenant's request)
    that the planners could not change back; its own start declares the other two."""
    await world.system.jetstream().delete_stream(subjects.TASKS_STREAM)  # what a restart does to it
    js = world.services[kind].jetstream(timeout=2)
    capture = tasks_config()
    capture.subjects = [f"{subjects.TASK}.>", f"{subjects.OPS}.>"]
    assert await refused(js.add_stream(capture))
    with pytest.raises(NotFoundError):
        await world.system.jetstream().stream_info(subjects.TASKS_STREAM)
    world.violations.clear()  # (the attack's own)
    await ensure_streams(js, tasks=False)
    assert not any("permissions violation" in v for v in world.violations), world.violations


async def test_the_tracker_and_the_solver_still_declare_what_they_use(world: World) -> None:
    """The tracker's locations bucket (made here: it is missing) and replay's snapshots bucket."""
    tracker = world.services["tracker"].jetstream(timeout=5)
    index = await LocationIndex.open(tracker)
    await index.start()
    await SnapshotStore(world.services["tracker"]).bucket()
    await index.stop()
    assert not any("permissions violation" in v for v in world.violations), world.violations


async def test_a_planner_still_declares_and_reads_its_buckets(world: World) -> None:
    """A first planner's start on a new deployment: every bucket of its own is made by it."""
    nc = world.services["planner"]
    js = nc.jetstream(timeout=5)
    await (await nodemaps_bucket(js)).put("other.c1", b"{}")
    await (await leases_bucket(js)).put("member.p", b"{}")
    await SnapshotStore(nc).bucket()
    budgets, spend = NatsBudgets(js), NatsSpend(js)

    async def changed(_: str) -> None:
        return None

    await budgets.start(changed)
    await spend.start()
    await budgets.stop()
    await spend.stop()
    await watched_bucket(js)  # no provisioner yet: the planner makes the presence bucket
    assert await live_provisioners(nc, timeout=5) == []
    assert not any("permissions violation" in v for v in world.violations), world.violations


@pytest.mark.parametrize("kind", NARROWED)
async def test_a_service_uses_a_stream_another_version_declared_as_it_is(world: World, kind: str) -> None:
    """It may not update it (the auth service does at its start): its start goes on, not a crash."""
    other = events_config()
    other.description = "declared by another version"
    await world.system.jetstream().update_stream(other)
    with watching():  # (its refused update ends at the server's word: the same timeout error, without the wait)
        await ensure_streams(world.services[kind].jetstream(timeout=1), tasks=kind in TASK_QUEUE_SERVICES)
    info = await world.system.jetstream().stream_info(subjects.EVENTS_STREAM)
    assert info.config.description == "declared by another version"


async def test_the_auth_service_puts_back_a_lost_task_queue_declared_to_capture_requests(world: World) -> None:
    """TASKS lives in memory and a planner or a provisioner may declare it (its config, in the
    request's body, unseen by permissions): once a restart lost it, a compromised planner
    declared it first capturing `muster.ops.>` (JetStream acknowledged and kept every tenant's
    requests) and republishing every task to its inbox; the other planners and the provisioners
    used it as it was. The auth service looks at each creation of TASKS and puts it back."""
    js = world.system.jetstream()
    await js.delete_stream(subjects.TASKS_STREAM)  # what a restart does to it
    updated = asyncio.Event()

    async def on_update(msg: object) -> None:
        updated.set()

    sub = await world.system.subscribe(f"$JS.EVENT.ADVISORY.STREAM.UPDATED.{subjects.TASKS_STREAM}", cb=on_update)
    await flush(world.system)
    capture = tasks_config()
    capture.subjects = [f"{subjects.TASK}.>", f"{subjects.OPS}.>"]
    capture.republish = RePublish(src=">", dest="_INBOX.planner-1.tasks.>")
    await world.services["planner"].jetstream(timeout=5).add_stream(capture)  # (it may: it declares TASKS)
    await asyncio.wait_for(updated.wait(), 10)  # an event is what wakes it, never a sleep loop
    await sub.unsubscribe()
    config = (await js.stream_info(subjects.TASKS_STREAM)).config
    assert config.subjects == [f"{subjects.TASK}.>"] and config.republish is None
    with pytest.raises((NoStreamResponseError, NoRespondersError, NatsTimeout)):
        await js.publish(f"{subjects.OPS}.a.alice.create", b"{}", timeout=1)  # no stream takes it


async def test_a_task_queue_that_cannot_be_updated_back_is_declared_again(world: World) -> None:
    """A TASKS declared as a mirror of the log (every tenant's events, to any consumer of TASKS),
    which no update turns back into a queue of subjects: the auth service deletes it and
    declares it again."""
    js = world.system.jetstream()
    await js.delete_stream(subjects.TASKS_STREAM)
    deleted, again = asyncio.Event(), asyncio.Event()

    async def on_deleted(msg: object) -> None:
        deleted.set()

    async def on_created(msg: object) -> None:
        if deleted.is_set():
            again.set()

    advisory = "$JS.EVENT.ADVISORY.STREAM"
    subs = [await world.system.subscribe(f"{advisory}.DELETED.{subjects.TASKS_STREAM}", cb=on_deleted),
            await world.system.subscribe(f"{advisory}.CREATED.{subjects.TASKS_STREAM}", cb=on_created)]
    await flush(world.system)
    await js.add_stream(StreamConfig(name=subjects.TASKS_STREAM, mirror=StreamSource(name=subjects.EVENTS_STREAM)))
    await asyncio.wait_for(again.wait(), 10)
    for sub in subs:
        await sub.unsubscribe()
    config = (await js.stream_info(subjects.TASKS_STREAM)).config
    assert config.subjects == [f"{subjects.TASK}.>"] and config.mirror is None
    assert not await restore_tasks(js)  # as declared: left alone (what a reconnect's look finds)
