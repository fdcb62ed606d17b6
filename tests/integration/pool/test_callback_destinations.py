"""Where the pool service POSTs a callback, on a real nats-server with real HTTP on loopback
(decision 38, docs/pools.md "Where callbacks may go"): by default a tenant's callback to the
deployment's own addresses is refused when the request comes (the pool's `request`, and the
planner's create, which asks the pool service) with nothing recorded, and refused again at the
POST for one already in the log (recorded as a delivery that failed, with no connection made: at
once for an address, after the usual attempts, in the words of a name that does not resolve, for
a name); what the operator allows is delivered to; a redirect is not followed."""

from __future__ import annotations

from typing import Any

import pytest
from pool_env import Pipeline, PoolEnv, _env, hosts

from contracts import subjects
from contracts.commands import CreateCluster, PoolWait, Rejected
from contracts.pool_commands import AddHosts, RequestHosts
from contracts.pools import Callback, NodeNeed, PoolHostsRequested, PoolRequest
from muster.bus.connect import connect
from muster.bus.eventstore import Append, EventStore
from services.pool import client as pools
from tests.integration.conftest import Webhook

pytestmark = pytest.mark.nats

SETTING = "`muster pool serve --webhook-allow`, $MUSTER_WEBHOOK_ALLOW; docs/pools.md"


def req(rid: str, url: str, tenant: str = "acme") -> PoolRequest:
    return PoolRequest(request_id=rid, pool="lab", tenant=tenant, cluster_id=f"c-{rid}", job_id=rid,
                       nodes=[NodeNeed(node_id="n0", hardwaretype="small")], callback=Callback(url=url))


async def test_a_request_whose_callback_aims_inside_is_refused_and_nothing_is_recorded(strict_env: PoolEnv,
                                                                                       webhook: Webhook) -> None:
    env = strict_env
    await pools.send(env.nc, "lab", AddHosts(hosts=hosts(1)))
    port = webhook.url.split(":")[2].split("/")[0]
    for url, said in [(webhook.url, "127.0.0.1 is a loopback address"), (f"http://[::1]:{port}/hook", "::1 is a loopback address"),
                      ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a link-local address"),
                      # the address in characters aiohttp's URL parser maps to it (IDNA), a name to urlsplit
                      (webhook.url.replace("127.0.0.1", "\u2460\u2461\u2466.0.0.1"), "127.0.0.1 is a loopback address"),
                      ("http://\u2460\u2465\u2468\u3002\u2461\u2464\u2463\u3002\u2460\u2465\u2468\u3002\u2461\u2464\u2463/latest/",
                       "169.254.169.254 is a link-local address")]:
        with pytest.raises(pools.PoolRejected) as refused:
            await pools.send(env.nc, "lab", RequestHosts(request=req("r1", url)))
        assert str(refused.value).startswith(f"callback: {said}") and SETTING in str(refused.value)
    assert await env.store.read(subjects.pool_request_events("acme", "lab", "r1")) == []
    assert webhook.got.empty()


async def test_a_callback_already_in_the_log_is_refused_at_the_post_once(strict_env: PoolEnv, webhook: Webhook) -> None:
    """As a request recorded before the rule (or by a planner that could not ask): the POST
    itself is refused, the delivery recorded as failed after one attempt, no connection made."""
    env = strict_env
    await pools.send(env.nc, "lab", AddHosts(hosts=hosts(3)))
    watch = await env.watch(subjects.pool_events("lab"))
    port = webhook.url.split(":")[2].split("/")[0]
    for rid, host in (("j1", "127.0.0.1"), ("j2", "localhost"), ("j3", "\u2460\u2461\u2466.0.0.1")):
        await env.store.append(subjects.pool_request_events("acme", "lab", rid),
                               [Append(event=PoolHostsRequested(request=req(rid, f"http://{host}:{port}/hook")), msg_id=rid)])
    done = await watch.wait(lambda r: r.type == "CallbackDelivered" and r.event.on == "grant" and r.event.request_id == "j1")
    assert not done.event.ok and done.event.attempts == 1
    assert done.event.error.startswith("refused: 127.0.0.1 is a loopback address") and SETTING in done.event.error
    by_name = await watch.wait(lambda r: r.type == "CallbackDelivered" and r.event.on == "grant" and r.event.request_id == "j2")
    assert not by_name.event.ok and by_name.event.attempts == 5  # tried as any failure: a name's DNS may change
    assert by_name.event.error.startswith("localhost does not resolve to a public address now") and SETTING in by_name.event.error
    written = await watch.wait(lambda r: r.type == "CallbackDelivered" and r.event.on == "grant" and r.event.request_id == "j3")
    assert not written.event.ok and written.event.attempts == 1, written.event  # the address aiohttp reads in it, not a name
    assert written.event.error.startswith("refused: 127.0.0.1 is a loopback address"), written.event.error
    assert webhook.got.empty()


async def test_what_the_operator_allows_is_delivered_and_a_redirect_is_not_followed(env: PoolEnv, webhook: Webhook,
                                                                                     moved: str) -> None:
    await pools.send(env.nc, "lab", AddHosts(hosts=hosts(2)))
    watch = await env.watch(subjects.pool_events("lab"))
    await pools.send(env.nc, "lab", RequestHosts(request=req("r1", moved)))
    redirected = await watch.wait(lambda r: r.type == "CallbackDelivered" and r.event.request_id == "r1")
    assert not redirected.event.ok and "HTTP 307: the pool service does not follow redirects" in redirected.event.error
    assert webhook.got.empty()
    await pools.send(env.nc, "lab", RequestHosts(request=req("r2", webhook.url)))  # 127.0.0.1: the operator's allow
    delivered = await watch.wait(lambda r: r.type == "CallbackDelivered" and r.event.request_id == "r2")
    assert delivered.event.ok and delivered.event.attempts == 1
    body: dict[str, Any] = (await webhook.got.get())[0]
    assert body["type"] == "granted" and body["request_id"] == "r2"


async def test_an_entry_of_one_tenants_is_delivered_to_for_its_callbacks_and_refused_to_anothers(fresh_nats: str,
                                                                                                 webhook: Webhook) -> None:
    """`--webhook-allow acme=127.0.0.1:PORT`: acme's callback there was refused (the pool service
    read the entries of every tenant only) while the notifier sent acme's webhooks there. Now
    acme's is delivered; beta's is refused when it comes and, already in the log, at the POST."""
    from muster.destinations import Allowed

    port = webhook.url.split(":")[2].split("/")[0]
    async for env in _env(fresh_nats, Allowed.parse([f"acme=127.0.0.1:{port}"])):
        await pools.send(env.nc, "lab", AddHosts(hosts=hosts(2)))
        watch = await env.watch(subjects.pool_events("lab"))
        with pytest.raises(pools.PoolRejected) as refused:
            await pools.send(env.nc, "lab", RequestHosts(request=req("b1", webhook.url, tenant="beta")))
        assert str(refused.value).startswith("callback: 127.0.0.1 is a loopback address")
        await env.store.append(subjects.pool_request_events("beta", "lab", "b2"),
                               [Append(event=PoolHostsRequested(request=req("b2", webhook.url, tenant="beta")), msg_id="b2")])
        theirs = await watch.wait(lambda r: r.type == "CallbackDelivered" and r.event.request_id == "b2")
        assert not theirs.event.ok and theirs.event.attempts == 1
        assert theirs.event.error.startswith("refused: 127.0.0.1 is a loopback address")
        assert webhook.got.empty()
        await pools.send(env.nc, "lab", RequestHosts(request=req("a1", webhook.url)))
        mine = await watch.wait(lambda r: r.type == "CallbackDelivered" and r.event.request_id == "a1")
        assert mine.event.ok, mine.event
        assert (await webhook.got.get())[0]["request_id"] == "a1"


async def test_a_create_whose_callback_aims_inside_is_refused_by_the_planner_in_the_pool_services_words(
        pipeline: Pipeline, webhook: Webhook) -> None:
    wait = PoolWait(callback=Callback(url=webhook.url))
    reply = await pipeline.client.send(pipeline.tenant, CreateCluster(name="cb", template="app-on-pool", nodes=1, pool=wait))
    assert isinstance(reply, Rejected) and reply.field == "pool.callback", reply
    assert reply.reason.startswith("--callback: 127.0.0.1 is a loopback address: the pool service sends callbacks to public "
                                   "addresses only") and SETTING in reply.reason
    assert await pipeline.store.read(subjects.cluster_name_events(pipeline.tenant, "cb")) == []  # nothing written
    assert await pipeline.store.subjects(f"{subjects.EVT}.{pipeline.tenant}.poolreq.>") == {}


async def test_with_no_pool_service_the_planner_checks_what_needs_no_lookup_with_the_same_setting(fresh_nats: str) -> None:
    """No pool service answering, a callback aimed at an address the rule refuses, or malformed,
    was taken with a warning and refused only at the POST: the planner now checks the URL's form
    and the address it names with the operator's same setting (`muster up --webhook-allow` passes
    it to the planners too); a name is the pool service's to resolve, so it is only a warning."""
    from muster.destinations import Allowed
    from services.planner.adapters import NatsCallbackCheck

    nc = await connect(fresh_nats, name="planner")
    try:
        check = NatsCallbackCheck(nc, Allowed.parse(["10.0.0.0/8:8443"]), timeout=2.0)
        problem, warning = await check(Callback(url="http://127.0.0.1:8080/hook"), "acme")
        assert warning == "" and problem.startswith(
            "127.0.0.1 is a loopback address: the pool service sends callbacks to public addresses only, unless the operator "
            "allows others (`muster up --webhook-allow 127.0.0.1:8080`, or while it runs a line of its webhook-allow file and `muster reload`, or `muster planner --webhook-allow`"), problem
        assert (await check(Callback(url="https://10.1.2.3/x"), "acme"))[0].startswith("10.1.2.3 is a private address")
        assert await check(Callback(url="https://10.1.2.3:8443/x"), "acme") == ("", "")  # the operator's allow, on its port
        own = NatsCallbackCheck(nc, Allowed.parse(["acme=10.0.0.0/8:8443"]), timeout=2.0)  # one tenant's entry: its own
        assert await own(Callback(url="https://10.1.2.3:8443/x"), "acme") == ("", "")
        assert (await own(Callback(url="https://10.1.2.3:8443/x"), "beta"))[0].startswith("10.1.2.3 is a private address")
        assert await check(Callback(url="http://ci.example:http/x?token=t"), "acme") == (
            "http://ci.example:http/x: its port is not a number from 1 to 65535", "")
        problem, warning = await check(Callback(url="https://ci.example/x"), "acme")
        assert problem == "" and warning.startswith("--callback: not checked whether its host resolves to a public address: "
                                                    "no pool service answered")
    finally:
        await nc.close()


async def test_with_no_pool_service_a_create_whose_callback_names_an_address_inside_is_refused(fresh_nats: str) -> None:
    from contextlib import AsyncExitStack

    from muster.bus.streams import ensure_streams
    from muster.client import MusterClient
    from services.planner.app import PlannerConfig
    from services.planner.entrypoint import start_planner

    async with AsyncExitStack() as stack:
        ncs = [await connect(fresh_nats, name=name) for name in ("planner", "client")]
        for nc in ncs:
            stack.push_async_callback(nc.close)
        await ensure_streams(ncs[0].jetstream())
        await start_planner(ncs[0], stack, PlannerConfig(instance="planner-test"))
        store = EventStore(ncs[1])
        wait = PoolWait(callback=Callback(url="http://169.254.169.254/latest/meta-data/"))
        reply = await MusterClient(ncs[1]).send("default", CreateCluster(name="cb", template="app-on-pool", nodes=1, pool=wait))
        assert isinstance(reply, Rejected) and reply.field == "pool.callback", reply
        assert reply.reason.startswith("--callback: 169.254.169.254 is a link-local address (a cloud's metadata service")
        assert "`muster planner --webhook-allow`" in reply.reason
        assert await store.subjects(f"{subjects.EVT}.default.>") == {}  # nothing written


async def test_a_create_whose_callback_subject_is_another_tenants_is_refused_by_the_planner(pipeline: Pipeline) -> None:
    """Attack (tenant beta, a create on a pool provider with `--callback muster.cb.acme.x`): the
    planner took it, wrote the cluster and the job, and the pool request it then built refused
    the subject (its tenant is the job's) on every redelivery: the job waited without a word. Refused at the request,
    nothing written, in the words of a subscription's subject."""
    await pools.send(pipeline.nc, "lab", AddHosts(hosts=hosts(2)))
    wait = PoolWait(callback=Callback(subject="muster.cb.acme.hosts"))
    reply = await pipeline.client.send(pipeline.tenant, CreateCluster(name="cbs", template="app-on-pool", nodes=2, pool=wait))
    assert isinstance(reply, Rejected) and reply.field == "pool.callback" and reply.code == "invalid", reply
    assert reply.reason == f"--callback: its subject must be one of the tenant's, muster.cb.{pipeline.tenant}.…", reply
    assert await pipeline.store.read(subjects.cluster_name_events(pipeline.tenant, "cbs")) == []  # nothing written
