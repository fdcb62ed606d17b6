"""The isolation matrix on the bus, with raw nats-py connections (any client in any language):
tenant B's principal is denied every operation verb, query, event subject, stream, KV bucket and
task queue of tenant A, which A's principal gets; provisioners publish only under their own id."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import pytest
import pytest_asyncio
from nats.aio.client import Client

from contracts import subjects
from contracts.catalog_requests import CATALOG_VERBS
from contracts.events import StepOpened, TaskClaimed, TaskSucceeded
from contracts.pool_commands import ANY_POOL, AddHosts
from contracts.pools import HostSpec, PoolCreated
from muster.bus.eventstore import Append, EventStore
from muster.bus.wire import flush
from services.pool.entrypoint import start_pool_service

from .conftest import Authed

DENY_WAIT_S = 30.0
"""A deadline for a violation that comes (the error callback wakes the wait, so it costs nothing
when it does): 3 s ran out at load 20 in test_service_answers.py, where a service is first to get
the request, then to answer it on a subject it may not publish to."""
ANSWER_S = 30.0
"""A deadline for an answer or a message that comes (from the stand-in responder, or the system
connection's publish): it costs nothing when it does. 2 s was a bet on a loaded machine."""
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIP9DiqvhZyeLipjDVoIHhA2p8Eu/ozCrJdp0qXEeYYyF"


@dataclass
class Raw:
    """A raw connection that records the server's permission violations."""

    name: str
    nc: Client = field(init=False)
    violations: list[str] = field(default_factory=list)
    seen: asyncio.Event = field(default_factory=asyncio.Event)

    async def on_error(self, err: Exception) -> None:
        self.violations.append(str(err).lower())
        self.seen.set()

    async def until_violation(self, what: str, subject: str) -> None:
        needle = f'permissions violation for {what} to "{subject.lower()}"'

        async def found() -> None:
            while not any(needle in v for v in self.violations):
                self.seen.clear()
                await self.seen.wait()  # woken by the error callback, never a sleep

        await asyncio.wait_for(found(), DENY_WAIT_S)

    async def denied_publish(self, subject: str, data: bytes = b"{}") -> None:
        await self.nc.publish(subject, data, reply=f"_INBOX.{self.name}.x")
        await flush(self.nc)
        await self.until_violation("publish", subject)

    async def denied_subscribe(self, subject: str) -> None:
        sub = await self.nc.subscribe(subject)
        await flush(self.nc)
        await self.until_violation("subscription", subject)
        await sub.unsubscribe()


async def raw(authed: Authed, token: str, name: str) -> Raw:
    r = Raw(name)
    r.nc = await authed.raw(token, name, error_cb=r.on_error)
    return r


@dataclass
class World:
    authed: Authed
    alice: Raw
    bob: Raw
    p1: Raw
    root: Raw
    system: Client
    tokens: dict[str, str] = field(repr=False)


@pytest_asyncio.fixture
async def world(authed: Authed) -> AsyncIterator[World]:
    root = await raw(authed, authed.admin_token, "root")
    tokens: dict[str, str] = {}
    for pid, fields in {"alice": {"tenant": "a"}, "bob": {"tenant": "b"},
                        "p1": {"role": "service", "service": "provisioner"}, "p2": {"role": "service", "service": "provisioner"},
                        "pl": {"role": "service", "service": "pool"}}.items():
        made = await authed.ask(root.nc, "root", "user-create", principal=pid, **fields)
        assert made["ok"], made
        tokens[pid] = made["data"]["token"]
    for pid, tenant in (("p1", "a"), ("p2", "b")):
        assert (await authed.ask(root.nc, "root", "grant", principal=pid, permission="execute", tenant=tenant, scope="queue:default"))["ok"]
    system = await authed.raw(authed.system_token, "sys")
    responder = await system.subscribe("muster.>", cb=_echo)  # a stand-in for the services
    world = World(authed, await raw(authed, tokens["alice"], "alice"), await raw(authed, tokens["bob"], "bob"),
                  await raw(authed, tokens["p1"], "p1"), root, system, tokens)
    yield world
    await responder.unsubscribe()
    for r in (world.alice, world.bob, world.p1, world.root):
        await r.nc.close()
    await system.close()


async def _echo(msg: Any) -> None:
    if msg.reply and not msg.subject.startswith(("muster.auth.", "muster.evt.")):
        await msg.respond(msg.subject.encode())


async def test_every_operation_verb_and_query_is_the_own_tenants_only(world: World) -> None:
    for verb in (*subjects.OPERATION_VERBS, *CATALOG_VERBS):
        own = subjects.operation("a", "alice", verb)
        assert (await world.alice.nc.request(own, b"{}", timeout=ANSWER_S)).data == own.encode()
        await world.bob.denied_publish(subjects.operation("a", "bob", verb))
        await world.bob.denied_publish(own)  # nor in A's principal's name
        await world.alice.denied_publish(subjects.operation("a", "bob", verb))
    for query in (subjects.job_query("a", "alice", "j1"), subjects.solve_request("a", "alice")):
        assert (await world.alice.nc.request(query, b"", timeout=ANSWER_S)).data == query.encode()
        await world.bob.denied_publish(query)
        await world.bob.denied_publish(query.replace(".alice.", ".bob."))


@pytest.mark.parametrize("who", ["alice", "bob"])
async def test_no_tenant_principal_reads_or_writes_the_log_streams_or_buckets(world: World, who: str) -> None:
    r: Raw = getattr(world, who)
    for aggregate in ("job.j1", "cluster.c1", "layout.j1", "task.j1.n1~create.p1", "catalog.services.base", "provisioner.p1",
                      "clustername.c1", "plan.p1", "poolreq.lab.r1"):
        await r.denied_publish(f"muster.evt.a.{aggregate}")
    await r.denied_publish(subjects.identity_events("token", "0123456789ab"))
    await r.denied_publish(subjects.pool_events("lab"))
    # Pools are shared: only operators command them (tenants see them through the tracker),
    # not even in their own name.
    await r.denied_publish(subjects.pool_command(who, "lab", "request"))
    await r.denied_publish(subjects.pool_list(who))
    # Requests forwarded between planners are the planners' own.
    await r.denied_publish(f"muster.shard.0.ops.a.{who}.create")
    other = "a" if who == "bob" else "b"
    for subject in ("muster.evt.a.>", "muster.evt.>", "muster.task.>", "$KV.>", ">", "_INBOX.alice.>" if who == "bob" else "_INBOX.bob.>",
                    "muster.shard.>", "muster.pool.>", f"muster.cb.{other}.>"):
        await r.denied_subscribe(subject)
    for api in ("$JS.API.INFO", "$JS.API.STREAM.INFO.EVENTS", "$JS.API.DIRECT.GET.EVENTS",
                "$JS.API.DIRECT.GET.EVENTS.muster.evt.a.job.j1", "$JS.API.STREAM.MSG.GET.EVENTS",
                "$JS.API.CONSUMER.CREATE.EVENTS.spy.muster.evt.a.>", "$JS.API.CONSUMER.CREATE.EVENTS",
                "$JS.API.STREAM.PURGE.EVENTS", "$JS.API.STREAM.DELETE.EVENTS",
                "$JS.API.DIRECT.GET.KV_locations", "$JS.API.STREAM.INFO.KV_presence", "$KV.locations.job.a.x",
                "$KV.presence.provisioner.p1", "$KV.snapshots.a.job.j1", "$JS.API.DIRECT.GET.KV_snapshots",
                "$KV.nodemaps.a.j1", "$KV.leases.shard.0", "muster.task.a.default", "$JS.API.CONSUMER.MSG.NEXT.TASKS.workers-a-default",
                subjects.provisioner_drain("p1"), subjects.provisioner_held("p1"), subjects.PLANNER_METRICS):
        await r.denied_publish(api)


@pytest.mark.parametrize("who", ["alice", "bob"])
async def test_no_tenant_principal_reaches_the_bodies_the_stream_names_or_another_tenants_requests(world: World, who: str) -> None:
    """What later waves added: offloaded event bodies, the planners' budgets and the tenants' spend, stream lists (names
    and counts of every tenant), the server's own requests, another tenant's governance, queries
    and operations in any name."""
    r: Raw = getattr(world, who)
    other = "a" if who == "bob" else "b"
    for api in ("$JS.API.STREAM.INFO.BODIES", "$JS.API.DIRECT.GET.BODIES", f"$JS.API.DIRECT.GET.BODIES.muster.body.{other}.>",
                "$JS.API.STREAM.MSG.GET.BODIES", f"$JS.API.CONSUMER.CREATE.BODIES.spy.muster.body.{other}.>",
                "$JS.API.CONSUMER.DURABLE.CREATE.BODIES.spy", f"muster.body.{other}.{'0' * 64}", "$KV.budgets.shard.0",
                "$JS.API.DIRECT.GET.KV_budgets", f"$KV.spend.{other}.0", "$JS.API.DIRECT.GET.KV_spend",
                f"$JS.API.DIRECT.GET.KV_spend.$KV.spend.{other}.0", "$JS.API.STREAM.NAMES", "$JS.API.STREAM.LIST", "$JS.API.CONSUMER.LIST.EVENTS",
                "$JS.API.CONSUMER.NAMES.EVENTS", "$JS.API.STREAM.SNAPSHOT.EVENTS", "$JS.API.STREAM.MSG.DELETE.EVENTS",
                f"$JS.API.DIRECT.GET.KV_snapshots.$KV.snapshots.{other}.>", "$SYS.REQ.SERVER.PING.CONNZ", "$SYS.REQ.ACCOUNT.PING.CONNZ",
                "$SYS.REQ.USER.INFO", subjects.governance_request(other, who, "list"), subjects.governance_request(other, "root", "put"),
                subjects.job_query(other, who, "j1"), f"muster.ops.*.{who}.create", f"muster.shard.0.ops.{other}.root.create"):
        await r.denied_publish(api)
    for subject in ("muster.body.>", "$JS.>", "$SYS.>", "muster.gov.>", "_INBOX.*.>", "muster.q.>", "muster.auth.>"):
        await r.denied_subscribe(subject)


async def test_refusals_tell_a_tenants_people_nothing_of_another_tenants_people(world: World) -> None:
    """Tenants do not see each other (`tenant-list`): asking about another tenant's person is
    refused without its role or its tenant."""
    for verb, body in (("token-list", {}), ("token-create", {}), ("user-disable", {}), ("token-revoke", {"token_id": "jwt-x"}),
                       ("grant", {"permission": "read", "scope": "tenant"}), ("revoke", {"permission": "read", "scope": "tenant"})):
        reply = await world.authed.ask(world.alice.nc, "alice", verb, principal="bob", **body)
        assert not reply["ok"] and reply["code"] == "forbidden", (verb, reply)
        assert "bob" in reply["reason"] and "tenant a" in reply["reason"], (verb, reply)
        assert " b" not in reply["reason"].replace("bob", "") and "user" not in reply["reason"], (verb, reply)
        # Nobody of that name answers the same: whether bob exists is tenant b's business.
        ghost = await world.authed.ask(world.alice.nc, "alice", verb, principal="ghost", **body)
        assert ghost["code"] == reply["code"] and ghost["reason"] == reply["reason"].replace("bob", "ghost"), (verb, ghost, reply)


async def test_operators_command_pools_in_their_own_name_and_tenants_take_their_own_callbacks(world: World) -> None:
    own = subjects.pool_command("root", "lab", "show")
    assert (await world.root.nc.request(own, b"{}", timeout=ANSWER_S)).data == own.encode()  # delivered (the stand-in answers)
    assert (await world.root.nc.request(subjects.pool_list("root"), b"", timeout=ANSWER_S)).data == subjects.pool_list("root").encode()
    # Nobody sends a pool command in another's name: the pool takes the subject's as `by`.
    await world.root.denied_publish(subjects.pool_command("alice", "lab", "reset"))
    await world.root.denied_publish(subjects.pool_list("alice"))
    await world.alice.denied_publish(subjects.pool_command("root", "lab", "reset"))
    # A tenant's people take their tenant's bus callbacks (the pool sends there only for its
    # requests), never another tenant's.
    await world.bob.denied_subscribe("muster.cb.a.>")
    await world.alice.denied_subscribe("muster.cb.b.>")
    await world.alice.denied_subscribe("muster.cb.>")
    mine = await world.alice.nc.subscribe("muster.cb.a.>")
    await flush(world.alice.nc)  # (not nats-py's flush: its PING may overtake the SUB, muster.bus.wire.flush)
    await world.system.publish("muster.cb.a.hosts", b'{"type": "granted"}')  # what the pool service sends
    assert (await mine.next_msg(timeout=ANSWER_S)).data == b'{"type": "granted"}'
    await mine.unsubscribe()


async def test_a_planner_asks_the_pool_service_to_check_a_callback_and_sends_no_other_pool_command(world: World) -> None:
    """Before it accepts a create with a callback URL (decision 38), in its own name only."""
    made = await world.authed.ask(world.root.nc, "root", "user-create", principal="pln", role="service", service="planner")
    assert made["ok"], made
    planner = await raw(world.authed, made["data"]["token"], "pln")
    try:
        check = subjects.pool_command("pln", ANY_POOL, "check-callback")
        assert (await planner.nc.request(check, b"{}", timeout=ANSWER_S)).data == check.encode()  # delivered (the stand-in answers)
        await planner.denied_publish(subjects.pool_command("pln", "lab", "reset"))
        await planner.denied_publish(subjects.pool_command("root", ANY_POOL, "check-callback"))
        await world.alice.denied_publish(subjects.pool_command("alice", ANY_POOL, "check-callback"))
    finally:
        await planner.nc.close()


async def test_the_pool_service_writes_only_pools(world: World) -> None:
    pool = await raw(world.authed, world.tokens["pl"], "pl")
    try:
        seqs = await EventStore(pool.nc).append(subjects.pool_events("iso"), [Append(PoolCreated(pool="iso"), msg_id="iso-pool")])
        assert seqs and seqs[0] > 0
        for subject in ("muster.evt.a.job.j1", "muster.evt.a.cluster.c1", "muster.task.a.default", subjects.operation("a", "pl", "create")):
            await pool.denied_publish(subject)
    finally:
        await pool.nc.close()


async def test_a_pool_event_from_an_operators_command_is_by_the_sender_whatever_the_command_says(authed: Authed) -> None:
    # No stand-in here: the real pool service under its own identity answers.
    made = await authed.ask(root := await authed.raw(authed.admin_token, "root"), "root", "user-create",
                            principal="pl", role="service", service="pool")
    assert made["ok"], made
    pool = await authed.raw(made["data"]["token"], "pl")
    try:
        async with AsyncExitStack() as stack:
            await start_pool_service(pool, stack, "pool-iso")
            command = AddHosts(hosts=[HostSpec(id="h1", address="10.9.0.1", host_keys=[KEY])], requested_by="mallory")
            answer = await root.request(subjects.pool_command("root", "lab", "add-hosts"), command.model_dump_json().encode(), timeout=5)
            assert json.loads(answer.data)["type"] == "PoolAnswer", answer.data
        recorded = [r.event for r in await EventStore(root).read(subjects.pool_events("lab"))]
        assert [type(e).__name__ for e in recorded] == ["PoolCreated", "HostsAdded"]
        assert {e.by for e in recorded} == {"root"}
    finally:
        await pool.close()
        await root.close()


async def test_forged_claims_and_outcomes_never_reach_the_log(world: World) -> None:
    """Attack 1: a tenant's client publishing TaskClaimed / TaskSucceeded straight into the log."""
    store = EventStore(world.system)
    before = (await store.js.stream_info(subjects.EVENTS_STREAM)).state.last_seq
    subject = subjects.task_events("a", "j1", "n1.create", "p1")
    claim = TaskClaimed(job_id="j1", task_id="n1.create", attempt=1, provisioner="p1", worker="w")
    forged = TaskSucceeded(job_id="j1", task_id="n1.create", attempt=1, provisioner="p1", worker="w", ipaddresses={"access_v4": "6.6.6.6"})
    for event in (claim, forged):
        await world.alice.denied_publish(subject, event.model_dump_json().encode())
    # Another provisioner may not write in p1's name, nor in a tenant it does not serve.
    await world.p1.denied_publish(subjects.task_events("a", "j1", "n1.create", "p2"), forged.model_dump_json().encode())
    await world.p1.denied_publish(subjects.task_events("b", "j1", "n1.create", "p1"), forged.model_dump_json().encode())
    assert (await store.js.stream_info(subjects.EVENTS_STREAM)).state.last_seq == before


async def test_a_provisioner_writes_only_its_own_task_events_and_reads_only_its_queues(world: World) -> None:
    own = subjects.task_events("a", "j1", "n1.create", "p1")
    seqs = await EventStore(world.p1.nc).append(own, [Append(TaskClaimed(job_id="j1", task_id="n1.create", attempt=1,
                                                                         provisioner="p1", worker="w"), msg_id="iso-1")])
    assert seqs and seqs[0] > 0
    # Its claims' markers (decision 59) under its own id; never an attempt's close (the planner's), another's marker,
    # nor a tenant it does not serve.
    marker = StepOpened(job_id="j1", task_id="n1.create", attempt=1, provisioner="p1")
    seqs = await EventStore(world.p1.nc).append(subjects.step_opened("a", "j1", "n1.create", 1, "p1"),
                                                [Append(marker, msg_id="iso-2")])
    assert seqs and seqs[0] > 0
    for subject in (subjects.step_closed("a", "j1", "n1.create", 1), subjects.step_opened("a", "j1", "n1.create", 1, "p2"),
                    subjects.step_opened("b", "j1", "n1.create", 1, "p1")):
        await world.p1.denied_publish(subject, marker.model_dump_json().encode())
    for subject in ("muster.evt.a.job.j1", "muster.evt.a.cluster.c1", "muster.task.a.default", subjects.provisioner_drain("p2"),
                    subjects.provisioner_held("p2"),
                    "$JS.API.CONSUMER.MSG.NEXT.TASKS.workers-b-default", "$JS.API.STREAM.PURGE.TASKS",
                    "$KV.presence.provisioner.p2", "muster.evt.b.provisioner.p1", "muster.ops.a.p1.create"):
        await world.p1.denied_publish(subject)
    await world.p1.denied_subscribe(subjects.provisioner_drain("p2"))
    await world.p1.denied_subscribe(subjects.provisioner_held("p2"))
    await world.p1.denied_subscribe("muster.evt.>")


async def test_only_super_admins_drain_provisioners(world: World) -> None:
    """Attack 2: draining a provisioner through muster.q.provisioner.<id>.drain."""
    drain = subjects.provisioner_drain("p1")
    await world.alice.denied_publish(drain, b"garbage")
    await world.bob.denied_publish(drain, b"garbage")
    assert (await world.root.nc.request(drain, b"{}", timeout=ANSWER_S)).data == drain.encode()  # delivered (the stand-in answers)


async def test_identity_requests_carry_their_senders_name(world: World) -> None:
    await world.alice.denied_publish(subjects.auth_request("root", "tenant-create"))
    reply = json.loads((await world.alice.nc.request(subjects.auth_request("alice", "tenant-create"),
                                                     b'{"tenant": "c"}', timeout=5)).data)
    assert not reply["ok"] and "only a super admin" in reply["reason"]
