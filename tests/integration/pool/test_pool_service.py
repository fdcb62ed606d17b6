"""The pool service on a real nats-server: commands answered at once, requests from the log,
grants by event, deadlines and callbacks, two services deciding on one pool."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiohttp import web
from pool_env import PoolEnv, hosts

from contracts import subjects
from contracts.pool_commands import (
    AddHosts,
    CancelRequest,
    ConfigurePool,
    RemoveHost,
    ReportNodes,
    RequestHosts,
    ResetHost,
    ShowPool,
)
from contracts.pools import (
    Callback,
    NodeNeed,
    PoolHostsRequested,
    PoolNodesReported,
    PoolRequest,
    PoolRequestCancelled,
    PoolTerms,
    grants_in,
)
from muster.bus.connect import principal_of
from muster.bus.eventstore import Append
from muster.bus.repository import rebuild
from muster.bus.wire import flush
from services.pool import client as pools
from services.pool.domain.pool import Pool

pytestmark = pytest.mark.nats


def req(rid: str, n: int, tenant: str = "acme", pool: str = "lab", **kw: Any) -> PoolRequest:
    return PoolRequest(request_id=rid, pool=pool, tenant=tenant, cluster_id=f"c-{rid}", job_id=rid,
                       nodes=[NodeNeed(node_id=f"n{i}", hardwaretype="small") for i in range(n)], **kw)


async def test_administrators_commands_are_answered_at_once_and_bad_ones_refused_with_reasons(env: PoolEnv) -> None:
    three = hosts(3)
    answer = await pools.send(env.nc, "lab", AddHosts(hosts=three, requested_by="alice"))
    assert answer.message == "3 hosts registered in pool lab"
    recorded = len(await env.log("lab"))
    bad = [
        (AddHosts(hosts=three[:1], requested_by="alice"), "already in pool lab: h0"),
        (RemoveHost(host_id="nope"), "no host 'nope' in pool lab"),
        (ResetHost(host_id="h1"), "h1 is unassigned; only a host in error can be reset"),
    ]
    for command, reason in bad:
        with pytest.raises(pools.PoolRejected, match=reason):
            await pools.send(env.nc, "lab", command)
    raw = await env.nc.request(subjects.pool_command(principal_of(env.nc), "lab", "add-hosts"),
                               json.dumps({"type": "AddHosts", "hosts": [{"id": "x", "address": "a", "host_keys": ["ssh-ed25519 AAAA"],
                                                                           "properties": {"memory": "lots"}}]}).encode())
    assert "memory 'lots' is not a size" in json.loads(raw.data)["reason"]
    raw = await env.nc.request(subjects.pool_command(principal_of(env.nc), "lab", "reset"), b"{not json")
    assert json.loads(raw.data)["reason"] == "the body is not valid JSON: key must be a string at line 1 column 2", raw.data
    # A verb no command has is named, with those there are (it was "Unable to extract tag using discriminator 'type'").
    raw = await env.nc.request(subjects.pool_command(principal_of(env.nc), "lab", "rest"), b"{}")
    assert json.loads(raw.data)["reason"].startswith("no pool command 'rest': the verbs are add-hosts, cancel, ")
    raw = await env.nc.request(subjects.pool_command(principal_of(env.nc), "lab", "reset"), b'{"host_id": "h1"}')
    assert json.loads(raw.data)["reason"] == "host h1 is unassigned; only a host in error can be reset"  # the verb named the command
    assert len(await env.log("lab")) == recorded  # nothing refused reached the log
    view = (await pools.send(env.nc, "lab", ShowPool())).view
    assert view is not None and view["states"] == {"unassigned": 3} and [h["id"] for h in view["hosts_detail"]] == ["h0", "h1", "h2"]
    assert [p["pool"] for p in await pools.list_pools(env.nc)] == ["lab"]
    # `configure` of a pool nobody made makes it (a dynamic pool begins so), and says so: a typo
    # (`lba`) read "pool lba configured (policy fifo)", as if lab had been.
    answer = await pools.send(env.nc, "lba", ConfigurePool(terms=PoolTerms(policy="fifo")))
    assert answer.message == ("pool lba is new: made with policy fifo; it has no hosts yet (`muster pool add-hosts lba FILE`); "
                              "the other pools: lab"), answer.message
    answer = await pools.send(env.nc, "lba", ConfigurePool(terms=PoolTerms(policy="priority")))
    assert answer.message == "pool lba configured (policy priority)"


async def test_removing_a_host_a_waiting_request_cannot_do_without_ends_it_and_says_so(env: PoolEnv) -> None:
    await pools.send(env.nc, "lab", AddHosts(hosts=hosts(3)))
    await pools.send(env.nc, "lab", RequestHosts(request=req("held", 1)))
    waiting = await pools.send(env.nc, "lab", RequestHosts(request=req("big", 3)))
    assert waiting.state == "waiting"
    answer = await pools.send(env.nc, "lab", RemoveHost(host_id="h2", reason="retired", requested_by="alice"))
    # (before session 33: "host h2 removed from pool lab", and big waited for ever, 1st in line)
    assert answer.message == ("host h2 removed from pool lab; pool lab can never serve this waiting request now, ended "
                              "with the reason: big (tenant acme, 3 hosts)")
    [ended] = [r.event for r in await env.log("lab") if r.type == "RequestCancelled"]
    assert ended.request_id == "big" and "pool lab has 2 hosts that fit 'any host'; the request needs 3" in ended.reason
    view = (await pools.send(env.nc, "lab", ShowPool(hosts=False))).view
    assert view is not None and view["queue"] == []


async def test_terms_that_refuse_a_waiting_request_end_it_and_say_so(env: PoolEnv) -> None:
    await pools.send(env.nc, "lab", AddHosts(hosts=hosts(3)))
    await pools.send(env.nc, "lab", RequestHosts(request=req("held", 3, tenant="other")))
    assert (await pools.send(env.nc, "lab", RequestHosts(request=req("big", 3)))).state == "waiting"
    answer = await pools.send(env.nc, "lab", ConfigurePool(terms=PoolTerms(job_limit=2)))
    # (before session 33: "pool lab configured (policy urgency-x-priority)", and big got 3 hosts once they were free)
    assert answer.message == ("pool lab configured (policy urgency-x-priority); its terms refuse this waiting request now, "
                              "ended with the reason: big (tenant acme, 3 hosts)")
    [ended] = [r.event for r in await env.log("lab") if r.type == "RequestCancelled"]
    assert ended.reason == "the request needs 3 hosts; pool lab lends at most 2 to one job (the pool's terms changed while it waited)"


async def test_a_request_is_granted_at_once_or_waits_in_line_and_is_granted_by_event(env: PoolEnv) -> None:
    await pools.send(env.nc, "lab", AddHosts(hosts=hosts(2)))
    watch = await env.watch(subjects.pool_events("lab"))
    first = await pools.send(env.nc, "lab", RequestHosts(request=req("r1", 2), requested_by="bob"))
    assert first.state == "granted" and [h["id"] for h in first.hosts] == ["h0", "h1"]
    assert first.hosts[0]["host_keys"][0].startswith("ssh-ed25519 ")
    second = await pools.send(env.nc, "lab", RequestHosts(request=req("r2", 1), requested_by="carol"))
    assert (second.state, second.position) == ("waiting", 1)
    again = await pools.send(env.nc, "lab", RequestHosts(request=req("r2", 1), requested_by="carol"))
    assert (again.state, again.position) == ("waiting", 1)  # asked twice: the same place
    await pools.send(env.nc, "lab", ReportNodes(tenant="acme", request_id="r1", cluster_id="c-r1", status="released",
                                                node_ids=["n1"], requested_by="bob"))
    grant = await watch.wait(lambda r: any(g.request_id == "r2" for g in grants_in(r.event)))
    assert grant.type == "HostsReleased" and [a.host_id for g in grants_in(grant.event) for a in g.assignments] == ["h1"]
    accepted = next(r for r in await env.log("lab") if r.type == "RequestAccepted" and r.event.request.request_id == "r2")
    # The principal rides with the decision: the sender the bus authenticated, not what the command says.
    assert accepted.event.request.by == principal_of(env.nc) != "carol"


async def test_requests_written_to_the_log_are_taken_by_the_service_and_answered_by_event(env: PoolEnv) -> None:
    await pools.send(env.nc, "lab", AddHosts(hosts=hosts(1)))
    watch = await env.watch(subjects.pool_events("lab"))
    for rid in ("j1", "j2"):
        await env.store.append(subjects.pool_request_events("acme", "lab", rid),
                               [Append(event=PoolHostsRequested(request=req(rid, 1)), msg_id=f"{rid}-req")], expect_last_seq=0)
    await watch.wait(lambda r: r.type == "HostsGranted" and r.event.request_id == "j1")
    await watch.wait(lambda r: r.type == "RequestAccepted" and r.event.request.request_id == "j2")
    await env.store.append(subjects.pool_request_events("acme", "lab", "j1"), [Append(
        event=PoolNodesReported(request_id="j1", cluster_id="c-j1", status="released", node_ids=["n0"]), msg_id="j1-rel")])
    await watch.wait(lambda r: any(g.request_id == "j2" for g in grants_in(r.event)))
    # A request to a pool that does not exist is refused where the requester looks for it.
    ghost = await env.watch(subjects.pool_events("ghost"))
    await env.store.append(subjects.pool_request_events("acme", "ghost", "j3"),
                           [Append(event=PoolHostsRequested(request=req("j3", 1, pool="ghost")), msg_id="j3-req")])
    refused = await ghost.wait(lambda r: r.type == "RequestRefused")
    assert refused.event.reason == "pool ghost has 0 hosts that fit 'any host'; the request needs 1"


async def test_a_request_and_its_cancel_are_taken_in_order_whoever_sees_which_first(env: PoolEnv) -> None:
    await pools.send(env.nc, "lab", AddHosts(hosts=hosts(1)))
    await pools.send(env.nc, "lab", RequestHosts(request=req("hold", 1)))
    watch = await env.watch(subjects.pool_events("lab"))
    subject = subjects.pool_request_events("acme", "lab", "j1")
    await env.store.append(subject, [Append(event=PoolHostsRequested(request=req("j1", 1)), msg_id="a"),
                                     Append(event=PoolRequestCancelled(request_id="j1", reason="user gave up", by="dan"), msg_id="b")])
    cancelled = await watch.wait(lambda r: r.type == "RequestCancelled")
    assert cancelled.event.by == "dan"
    pool = rebuild(Pool, await env.log("lab"))
    assert pool is not None and pool.requests.finished["j1"] == "cancelled"


async def test_a_deadline_fails_a_waiting_request_and_its_timer_is_rebuilt_by_a_new_service(env: PoolEnv) -> None:
    await pools.send(env.nc, "lab", AddHosts(hosts=hosts(1)))
    await pools.send(env.nc, "lab", RequestHosts(request=req("hold", 1)))
    watch = await env.watch(subjects.pool_events("lab"))
    # 3 s from here to the new service's timer (0.02-0.13 s measured at load 8): a deadline
    # passed before, the first service expires the request, or the second's timer fires at once.
    soon = datetime.now(UTC) + timedelta(seconds=3)
    await pools.send(env.nc, "lab", RequestHosts(request=req("late", 1, deadline=soon)))
    await env.service.close()  # its timer dies with it ...
    other = await env.start_another("pool-2")  # ... and the new one rebuilds it from the log
    assert ("lab", "late") in other.timers
    expired = await watch.wait(lambda r: r.type == "RequestExpired", timeout=15)
    assert "by the deadline" in expired.event.reason and "1st in line" in expired.event.reason


async def test_callbacks_fire_on_grant_and_on_end_with_retries_and_are_recorded(env: PoolEnv) -> None:
    await pools.send(env.nc, "lab", AddHosts(hosts=hosts(1)))
    calls: list[dict[str, Any]] = []

    async def hook(request: web.Request) -> web.Response:
        calls.append(await request.json())
        return web.Response(status=503 if len(calls) < 3 else 200)

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        watch = await env.watch(subjects.pool_events("lab"))
        bus_calls = await env.nc.subscribe("muster.cb.acme.>")
        await flush(env.nc)  # the server knows the subscription before anything is sent to it
        await pools.send(env.nc, "lab", RequestHosts(request=req("r1", 1, callback=Callback(url=f"http://127.0.0.1:{port}/hook?token=s3cret"))))
        done = await watch.wait(lambda r: r.type == "CallbackDelivered" and r.event.on == "grant")
        assert done.event.attempts == 3 and done.event.ok and "s3cret" not in done.event.target
        assert calls[-1]["type"] == "granted" and calls[-1]["hosts"][0]["host_id"] == "h0"
        await pools.send(env.nc, "lab", RequestHosts(request=req("r2", 1, callback=Callback(subject="muster.cb.acme.r2"))))
        await pools.send(env.nc, "lab", CancelRequest(tenant="acme", request_id="r2", reason="no longer needed"))
        msg = await bus_calls.next_msg(timeout=10)
        assert json.loads(msg.data)["how"] == "cancelled" and json.loads(msg.data)["request_id"] == "r2"
    finally:
        await runner.cleanup()


async def test_two_pool_services_never_lend_a_host_twice(env: PoolEnv) -> None:
    await pools.send(env.nc, "lab", AddHosts(hosts=hosts(6)))
    other = await env.start_another("pool-2")
    watch = await env.watch(subjects.pool_events("lab"))
    n = 24
    await asyncio.gather(*(env.store.append(subjects.pool_request_events("acme", "lab", f"j{i}"), [Append(
        event=PoolHostsRequested(request=req(f"j{i}", 1 + i % 2)), msg_id=f"j{i}")]) for i in range(n)))
    await asyncio.gather(*(watch.wait(lambda r, i=i: r.type in ("RequestAccepted", "RequestRefused")
                                      and getattr(getattr(r.event, "request", r.event), "request_id", "") == f"j{i}")
                           for i in range(n)))
    held: dict[str, str] = {}
    for r in await env.log("lab"):  # the whole log: a host goes out again only after it came back
        for grant in grants_in(r.event):
            for a in grant.assignments:
                assert a.host_id not in held, f"{a.host_id} granted to {grant.request_id} while {held[a.host_id]} holds it"
                held[a.host_id] = grant.request_id
    assert len(held) >= 5  # one may stay free: the first in line may need two
    assert env.service.decisions and other.decisions  # both wrote to the one pool subject
    pool = rebuild(Pool, await env.log("lab"))
    live = await env.service.catch_up("lab")
    assert pool is not None and live is not None and pool.state() == live.state()
    assert pool.serve() == []  # nobody waits while hosts fit them
