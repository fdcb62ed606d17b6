"""The pool service reads only its requests' and its pools' events, the solver only the layouts',
governance its entities and the clusters, and the notifier the jobs, clusters, catalogs,
subscriptions and its notifications, in forms nats-server scopes by the request's subject
(decision 0057; docs/security.md, "Services' JetStream rights"). Before, their rights had the log's batch direct get (`$JS.API.DIRECT.GET.EVENTS`, `next_by_subj` or
`multi_last` in the body), its message get (`$JS.API.STREAM.MSG.GET.EVENTS`, the filter in the
body) and `EVENTS`' info (a subject filter in the body names every subject of the log), so a
compromised pool service, solver or notifier read any tenant's events: a cluster's nodes and addresses, a
job's results. These are a raw nats-py client's attacks with each one's own credentials; and its
own reads (`ScopedEventStore`), as its code makes them, with no permission violation."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import pytest
import pytest_asyncio
from nats.aio.client import Client

from contracts import subjects
from contracts.events import ClusterRequested, JobRequested, JobSucceeded
from contracts.governance import GovernancePut
from contracts.records import Append
from muster.bus.eventstore import EventStore
from muster.bus.scopedlog import ScopedEventStore
from muster.catalog.store import catalog_filter
from services.notifier.entrypoint import start_notifier

from .conftest import Authed
from .refusals import let_through, raw_refused, refused
from .serviceworld import SCOPED, World, service_world

FOREIGN = f"{subjects.EVT}.other.plan.p1"
"""Another tenant's plan: an event none of them may read (governance reads clusters)."""
EVENTS = subjects.EVENTS_STREAM
OWN = {"pool": subjects.pool_events("p1"), "solver": subjects.layout_events("acme", "j1"),
       "governance": subjects.governance_filter("acme", "schedule").replace("*", "s1"),
       "notifier": subjects.job_events("acme", "j1")}
"""A subject of each one's own filters."""


@pytest_asyncio.fixture
async def world(authed: Authed) -> AsyncIterator[World]:
    async with service_world(authed, SCOPED) as made:
        yield made


def _requested(name: str) -> Append:
    event = ClusterRequested(tenant="other", cluster_id=name, name=name, template="t", provider="p", job_id="j")
    return Append(event, msg_id=f"requested/{name}")


@pytest.mark.parametrize("kind", SCOPED)
async def test_a_service_cannot_read_another_tenants_events(world: World, kind: str) -> None:
    await EventStore(world.system).append(FOREIGN, [_requested("c1")])
    nc = world.services[kind]
    js, own = nc.jetstream(timeout=2), OWN[kind]
    direct, message = f"$JS.API.DIRECT.GET.{EVENTS}", f"$JS.API.STREAM.MSG.GET.{EVENTS}"
    attacks = {
        "batch direct get, a filter in the body (EventStore.read's)": raw_refused(
            nc, direct, {"seq": 1, "batch": 10, "next_by_subj": f"{subjects.EVT}.other.>"}),
        "direct get of each subject's last (multi_last)": raw_refused(nc, direct, {"multi_last": [f"{subjects.EVT}.>"], "batch": 10}),
        "direct get, the last of a subject in the body": raw_refused(nc, direct, {"last_by_subj": FOREIGN}),
        "direct get of another tenant's subject in the API subject": refused(js.get_last_msg(EVENTS, FOREIGN, direct=True)),
        "direct get of its own subject, another's filter in the body": raw_refused(
            nc, f"{direct}.{own}", {"seq": 1, "next_by_subj": FOREIGN}),
        "message get, the next of a filter (ordered.leader_next's)": raw_refused(
            nc, message, {"seq": 1, "next_by_subj": f"{subjects.EVT}.other.>"}),
        "message get, the last of a subject": refused(js.get_last_msg(EVENTS, FOREIGN)),
        "message get by sequence": refused(js.get_msg(EVENTS, 1)),
        "EVENTS' info naming every subject": refused(js.stream_info(EVENTS, subjects_filter=">")),
    }
    assert await let_through(attacks) == []
    # The list of streams, which it asks for the log's replicas, names no subject of a stream: it
    # takes no subject filter (nats-server 2.15.1: "unknown field"), and its answer has none.
    listing = "$JS.API.STREAM.LIST"
    assert "error" in json.loads((await nc.request(listing, json.dumps({"subjects_filter": ">"}).encode(), timeout=2)).data)
    listed = await nc.request(listing, json.dumps({"subject": ">"}).encode(), timeout=2)
    assert b"other.cluster" not in listed.data and json.loads(listed.data)["streams"]


def _scoped(nc: Client, replicated: bool, **options: Any) -> ScopedEventStore:
    """`replicated`: its reads confirmed as on a replicated log (`fenced_last`: the probes a
    single server answers as a leader does), whatever the test's log is."""
    store = ScopedEventStore(nc, **options)
    store._replicated = replicated
    return store


@pytest.mark.parametrize("replicated", (False, True))
async def test_the_pool_service_reads_its_own_events_in_scoped_forms(world: World, replicated: bool) -> None:
    """Its store's every read (an aggregate's events whole and from a sequence, a subject's last
    event, the pools' names, a replay, a chain's append, a retried append's check) with its
    own credentials, and the same events as the unscoped store reads."""
    pool, request = subjects.pool_events("p1"), subjects.pool_request_events("acme", "p1", "r1")
    await EventStore(world.system).append(FOREIGN, [_requested("c1")])
    mine = _scoped(world.services["pool"], replicated)
    seqs = [await mine.append(pool, [_requested("p1-a")]), await mine.append(request, [_requested("r1-a")]),
            await mine.append(pool, [_requested("p1-b")])]
    [[chained]] = await mine.append_chain([(pool, [_requested("p1-c")], seqs[2][0])])
    # a retry of an append that landed: the subject's last event's key checked (a direct get)
    assert await mine.append(pool, [_requested("p1-c")], expect_last_seq=seqs[2][0]) == [chained]
    everyone = EventStore(world.system)
    assert [r.seq for r in await mine.read(pool)] == [r.seq for r in await everyone.read(pool)]
    assert [r.seq for r in await mine.read(pool, start_seq=seqs[2][0])] == [r.seq for r in await everyone.read(pool)][1:]
    assert await mine.read(pool, start_seq=10_000) == []
    assert [r.seq for r in await mine.read(request)] == seqs[1]
    assert await mine.last_seq(pool) == await everyone.last_seq(pool)
    assert await mine.subject_names(subjects.ALL_POOL_EVENTS) == {pool}
    replayed: list[str] = []
    assert await mine.replay(subjects.ALL_POOL_EVENTS, lambda r: replayed.append(r.subject)) == 3
    assert world.clean(), world.violations
    assert await EventStore(world.system).read(pool) == await mine.read(pool)  # (no probe was stored)


@pytest.mark.parametrize("replicated", (False, True))
async def test_the_solver_answers_a_layout_in_scoped_forms(world: World, replicated: bool) -> None:
    """Its one read: a fenced answer refused, the layout's last event tells whether it was a
    retry that landed (a direct get of the layout's subject)."""
    layout = OWN["solver"]
    first = await EventStore(world.system).append(layout, [_requested("asked")])
    mine = _scoped(world.services["solver"], replicated, deletes=False)
    [answered] = await mine.append(layout, [_requested("answer")], expect_last_seq=first[0])
    assert await mine.append(layout, [_requested("answer")], expect_last_seq=first[0]) == [answered]
    assert (await EventStore(world.system).read(layout))[-1].seq == answered  # (no probe was stored)
    assert world.clean(), world.violations


@pytest.mark.parametrize("replicated", (False, True))
async def test_the_governance_service_reads_its_entities_and_the_clusters_in_scoped_forms(world: World, replicated: bool) -> None:
    """Its store as services/governance/entrypoint.py makes it: a tenant's entities of a kind, one
    entity from a sequence, its last sequence, a fenced write's refused retry; any tenant's
    cluster (a schedule names one), confirmed with the leader by a probe on its own entities'
    subjects (it may not publish on clusters); no consumer deleted (its rights delete none)."""
    schedule = OWN["governance"]
    cluster = subjects.cluster_events("other", "c9")
    everyone = EventStore(world.system)
    [made] = await everyone.append(cluster, [_requested("c9")])
    mine = _scoped(world.services["governance"], replicated, confirm=(subjects.ALL_GOVERNANCE_EVENTS,), deletes=False)
    [first] = await mine.append(schedule, [_requested("s1-a")], expect_last_seq=0)
    [second] = await mine.append(schedule, [_requested("s1-b")], expect_last_seq=first)
    assert await mine.append(schedule, [_requested("s1-b")], expect_last_seq=first) == [second]
    assert [r.seq for r in await mine.read(subjects.governance_filter("acme", "schedule"))] == [first, second]
    assert [r.seq for r in await mine.read(schedule, start_seq=second)] == [second]
    assert await mine.last_seq(schedule) == second
    assert [r.seq for r in await mine.read(cluster)] == [made]
    assert world.clean(), world.violations


@pytest.mark.parametrize("replicated", (False, True))
async def test_the_notifier_reads_jobs_clusters_and_catalogs_in_scoped_forms(world: World, replicated: bool) -> None:
    """Its store as services/notifier/entrypoint.py makes it: any tenant's job and cluster read up
    to an event it was delivered, a cluster whole, a tenant's catalog up to an event, a
    subscription just made, its own notifications; on a replicated log each confirmed with the
    leader by a probe on its notifications' subjects, where it publishes; no consumer deleted
    (its rights delete none)."""
    everyone = EventStore(world.system)
    job, cluster = subjects.job_events("other", "j1"), subjects.cluster_events("other", "c1")
    ran = await everyone.append(job, [Append(JobRequested(tenant="other", job_id="j1", cluster_id="c1", operation="check",
                                                          request={}, requested_by="uma"), msg_id="j1-r"),
                                      Append(JobSucceeded(job_id="j1"), msg_id="j1-end")])
    [made] = await everyone.append(cluster, [_requested("c1")])
    [catalog] = await everyone.append(f"{subjects.EVT}.other.catalog.services", [_requested("catalog")])
    subscription = subjects.governance_events("other", "subscription", "s1")
    [subscribed] = await everyone.append(subscription, [Append(GovernancePut(
        kind="subscription", name="s1", entity={"name": "s1"}, version=1, by="ada"), msg_id="s1")])
    mine = _scoped(world.services["notifier"], replicated, confirm=(subjects.ALL_NOTIFICATION_EVENTS,), deletes=False)
    assert [r.seq for r in await mine.read_through(job, ran[-1])] == ran
    assert [r.seq for r in await mine.read_through(job, ran[0])] == ran[:1]
    assert [r.seq for r in await mine.read_through(cluster, made)] == [made]
    assert [r.seq for r in await mine.read(cluster)] == [made]
    assert [r.seq for r in await mine.read(catalog_filter("other"), up_to_seq=catalog)] == [catalog]
    assert [r.seq for r in await mine.read(subjects.governance_filter("other", "subscription"))] == [subscribed]
    [told] = await mine.append(subjects.notification_events("other", "s1"), [_requested("told")])
    assert [r.seq for r in await mine.read(subjects.ALL_NOTIFICATION_EVENTS)] == [told]
    assert await mine.last_seq(job) == ran[-1]
    assert world.clean(), world.violations


async def test_the_notifier_tells_a_jobs_end_under_its_own_rights(world: World) -> None:
    """The notifier as `muster notifier` starts it, on its own credentials: its mirror, its
    start's replay, its routes' consumers, a job's end read and told on the bus."""
    everyone = EventStore(world.system)
    entity = {"name": "bus", "events": ["job_succeeded"], "subject": "muster.cb.a.jobs"}
    await everyone.append(subjects.governance_events("a", "subscription", "bus"), [Append(GovernancePut(
        kind="subscription", name="bus", entity=entity, version=1, by="ada"), msg_id="bus")])
    told = await world.system.subscribe("muster.cb.a.jobs")
    async with AsyncExitStack() as stack:
        await start_notifier(world.services["notifier"], stack, {})
        await everyone.append(subjects.job_events("a", "j7"), [
            Append(JobRequested(tenant="a", job_id="j7", cluster_id="c7", operation="delete", request={}, requested_by="uma"),
                   msg_id="j7-r"),
            Append(JobSucceeded(job_id="j7"), msg_id="j7-end")])
        message = await told.next_msg(timeout=20)
    assert json.loads(message.data)["kind"] == "job_succeeded" and json.loads(message.data)["job_id"] == "j7"
    assert world.clean(), world.violations
