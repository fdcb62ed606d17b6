"""The tracker's half of the isolation and permission matrices: every /v1 route, with real
tokens; 401 and 403 with reasons; /healthz and the OpenAPI document open; /metrics operators."""

from __future__ import annotations

import html
import json
import os
import re
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer

from contracts import subjects
from contracts.events import ClusterNameClaimed, ClusterRequested, JobRequested
from muster.bus.connect import connect
from muster.bus.eventstore import Append, EventStore
from muster.readmodel.locations import cluster_key
from services.tracker import api
from services.tracker.http import make_app
from services.tracker.params import TRACKER
from tests import cli_in_process

from .conftest import Authed

JOB, CLUSTER, OTHER = str(uuid.uuid4()), str(uuid.uuid4()), str(uuid.uuid4())


@dataclass
class Served:
    http: TestClient
    tokens: dict[str, str] = field(repr=False)  # never in test output

    async def get(self, path: str, who: str | None, tenant: str | None = None) -> tuple[int, str]:
        headers = {} if who is None else {"Authorization": f"Bearer {self.tokens[who]}"}
        if tenant is not None:
            headers[api.TENANT_HEADER] = tenant
        resp = await self.http.get(path, headers=headers)
        body = await resp.json() if resp.content_type == "application/json" else {}
        error = body.get("error") if isinstance(body, dict) else None
        return resp.status, error.get("message", "") if isinstance(error, dict) else ""


@pytest_asyncio.fixture
async def served(authed: Authed) -> AsyncIterator[Served]:
    root = await authed.raw(authed.admin_token, "root")
    tokens = {"root": authed.admin_token}
    people = {"alice": {"tenant": "a"}, "reader": {"tenant": "a"}, "onec": {"tenant": "a"}, "bob": {"tenant": "b"},
              "ada": {"tenant": "a", "role": "tenant_admin"}, "tracker": {"role": "service", "service": "tracker"}}
    for pid, fields in people.items():
        made = await authed.ask(root, "root", "user-create", principal=pid, **fields)
        assert made["ok"], made
        tokens[pid] = made["data"]["token"]
    grants = [("alice", "read", "tenant"), ("reader", "read", "cluster:*"), ("onec", "read", f"cluster:{CLUSTER}")]
    for pid, permission, scope in grants:
        assert (await authed.ask(root, "root", "grant", principal=pid, permission=permission, scope=scope, tenant="a"))["ok"]
    assert (await authed.ask(root, "root", "grant", principal="bob", permission="read", tenant="b"))["ok"]
    await root.close()
    system = await authed.raw(authed.system_token, "sys")
    store = EventStore(system)
    await store.append(subjects.cluster_events("a", CLUSTER), [Append(ClusterRequested(
        tenant="a", cluster_id=CLUSTER, name="c", template="t", provider="p", job_id=JOB), msg_id="http-c")], expect_last_seq=0)
    await store.append(subjects.job_events("a", JOB), [Append(JobRequested(
        tenant="a", job_id=JOB, cluster_id=CLUSTER, operation="create", request={}), msg_id="http-j")], expect_last_seq=0)
    await store.append(subjects.cluster_name_events("a", "c"), [Append(ClusterNameClaimed(
        name="c", cluster_id=CLUSTER, job_id=JOB), msg_id="http-n")], expect_last_seq=0)
    await store.append(subjects.cluster_events("a", OTHER), [Append(ClusterRequested(
        tenant="a", cluster_id=OTHER, name="d", template="t", provider="p", job_id=str(uuid.uuid4())), msg_id="http-d")],
        expect_last_seq=0)
    await system.close()
    async with tracker_served(authed, tokens) as served:
        yield served


@asynccontextmanager
async def tracker_served(authed: Authed, tokens: dict[str, str]) -> AsyncIterator[Served]:
    """A tracker on a free port of 127.0.0.1, on the bus as the principal `tracker` of `tokens`."""
    nc = await connect(authed.url, name="tracker", token=tokens["tracker"])
    http = TestClient(TestServer(make_app(EventStore(nc))))
    await http.start_server()
    try:
        yield Served(http, tokens)
    finally:
        await http.close()
        await nc.close()


ROUTES = [f"/v1/jobs/{JOB}", f"/v1/jobs/{JOB}/location", f"/v1/jobs/{JOB}/events", f"/v1/clusters/{CLUSTER}",
          f"/v1/clusters/{CLUSTER}/jobs", "/v1/jobs", "/v1/clusters", f"/v1/jobs?cluster={CLUSTER}"]


async def test_every_route_needs_a_token_and_says_why(served: Served) -> None:
    for path in [*ROUTES, f"/v1/jobs/{JOB}/stream", "/v1/whoami", "/metrics"]:
        status, message = await served.get(path, None)
        assert status == 401 and "needs a token" in message, (path, status, message)
    served.tokens.update(garbage="not-a-token", fake="mst_alice_0123456789ab_" + "0" * 64, huge="x" * 5000)
    for who, reason in (("garbage", "malformed"), ("fake", "unknown token"), ("huge", "too long")):
        status, message = await served.get("/v1/jobs", who)
        assert status == 401 and reason in message and served.tokens[who] not in message
    assert (await served.get("/healthz", None))[0] in (200, 503)
    assert (await served.get("/v1/openapi.json", None))[0] == 200
    # the sign-in page is styled before anyone signs in: the console's static files are public
    page = await (await served.http.get("/ui/sign-in")).text()
    for asset in re.findall(r'(?:href|src)="(/ui/static/[^"]+)"', page):
        assert (await served.http.get(asset)).status == 200, asset
    assert "/ui/static/console.css" in page and '<link rel="icon" href="data:,">' in page  # nor asks for /favicon.ico (a 404)


async def test_tenant_a_gets_its_things_and_tenant_b_is_denied_them(served: Served) -> None:
    for path in ROUTES:
        status, message = await served.get(path, "alice")
        assert status == 200, (path, status, message)
        status, message = await served.get(path, "bob", tenant="a")  # naming A's tenant
        assert status == 403 and "belongs to tenant b" in message, (path, status, message)
        status, _ = await served.get(path, "bob")  # in its own tenant, A's ids are nothing
        if path in ("/v1/jobs", "/v1/clusters") or "cluster=" in path:
            resp = await served.http.get(path, headers={"Authorization": f"Bearer {served.tokens['bob']}"})
            assert resp.status == 200 and (await resp.json())["items"] == [], path
        else:
            assert status == 404, (path, status)
    status, message = await served.get("/v1/jobs", "root", tenant="a")
    assert status == 200


async def test_read_grants_decide_what_a_user_sees(served: Served) -> None:
    for path in ROUTES:
        assert (await served.get(path, "reader"))[0] == 200, path  # read on every cluster covers their jobs
    for path in (f"/v1/clusters/{CLUSTER}", f"/v1/clusters/{CLUSTER}/jobs", f"/v1/jobs/{JOB}", f"/v1/jobs?cluster={CLUSTER}"):
        assert (await served.get(path, "onec"))[0] == 200, path  # read on one cluster covers it and its jobs
    for path in ("/v1/jobs", "/v1/clusters", f"/v1/clusters/{uuid.uuid4()}"):
        status, message = await served.get(path, "onec")
        assert status == 403 and "no read permission" in message, (path, status, message)
    ghost = uuid.uuid4()
    for path in (f"/v1/jobs/{ghost}", f"/v1/jobs/{ghost}/events", f"/v1/events?job={ghost}"):
        status, message = await served.get(path, "reader")  # no such job: the same 404 as to anyone
        assert status == 404 and f"no job {ghost} in tenant a" in message, (path, status, message)


@pytest.mark.parametrize("who, status", [("alice", 403), ("ada", 403), ("root", 200), ("tracker", 200)])
async def test_metrics_are_for_operators_and_services(served: Served, who: str, status: int) -> None:
    assert (await served.get("/metrics", who))[0] == status


async def test_whoami_names_the_principal(served: Served) -> None:
    resp = await served.http.get("/v1/whoami", headers={"Authorization": f"Bearer {served.tokens['onec']}"})
    body = await resp.json()
    assert body["principal"] == "onec" and body["tenant"] == "a" and body["grants"] == [
        {"permission": "read", "scope": f"a:cluster:{CLUSTER}"}]


async def test_the_console_signs_in_with_a_token_and_shows_only_its_tenant(served: Served) -> None:
    page = await served.http.get("/ui/clusters", allow_redirects=False)
    assert page.status in (302, 303, 401) and CLUSTER not in await page.text()
    refused = await served.http.post("/ui/sign-in", data={"secret": "mst_alice_0123456789ab_" + "0" * 64},
                                     headers={"Origin": str(served.http.make_url("")).rstrip("/")}, allow_redirects=False)
    assert "unknown token" in (await refused.text()) + refused.headers.get("Location", "")
    # A new user pasted the whole file `muster user create --save` wrote (session 20's walk): it was
    # told its token "has characters a token never has"; the page now says where the token is.
    hint = html.unescape(await (await served.http.get("/ui/sign-in")).text())
    assert "jq -r .token FILE" in hint
    # and where `muster up`'s own is (walk of session 27: the newcomer who had just run it was
    # sent to an administrator, and to `muster token create`, for a token it already had)
    assert "jq -r .token .muster/credentials" in hint
    pasted = json.dumps({"token": served.tokens["alice"], "principal": "alice"})
    refused = await served.http.post("/ui/sign-in", data={"secret": pasted},
                                     headers={"Origin": str(served.http.make_url("")).rstrip("/")}, allow_redirects=False)
    said = html.unescape(await refused.text())
    assert 'that is a credentials file: paste the value of its "token"' in said and served.tokens["alice"] not in said
    for who, sees in (("alice", True), ("bob", False)):
        page = await served.http.get("/ui/clusters", cookies={"muster_session": served.tokens[who]})
        assert page.status == 200 and (sees or CLUSTER not in await page.text()), who
        job = await served.http.get(f"/ui/jobs/{JOB}", cookies={"muster_session": served.tokens[who]})
        assert job.status == (200 if sees else 404), who


# -- people's reads (decision 0016): the same matrix on the routes the CLI reads through ----------


def _events(text: str) -> list[str]:
    """The `event:` names of a server-sent events body."""
    return [line.split(": ", 1)[1] for line in text.splitlines() if line.startswith("event: ")]


async def _read(served: Served, path: str, who: str, tenant: str | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {served.tokens[who]}"}
    if tenant is not None:
        headers[api.TENANT_HEADER] = tenant
    resp = await served.http.get(path, headers=headers)
    return resp.status, await resp.text()


PEOPLE = {  # route -> who reads it (besides tenant admins and super admins)
    f"/v1/events?job={JOB}": ("alice", "reader", "onec"),
    "/v1/events?cluster=c": ("alice", "reader", "onec"),
    f"/v1/events?cluster={CLUSTER}&jobs=false": ("alice", "reader", "onec"),
    "/v1/events?cluster=*&jobs=false": ("alice", "reader"),
    "/v1/events": ("alice",),
    "/v1/events?subject=job.*": ("alice",),
    "/v1/replay?cluster=c": ("alice", "reader", "onec"),
    f"/v1/replay?cluster={CLUSTER}": ("alice", "reader", "onec"),
}


async def test_people_read_their_tenants_log_replays_and_catalog_by_their_grants(served: Served) -> None:
    for path, readers in PEOPLE.items():
        for who in ("alice", "reader", "onec", "ada", "root"):
            status, body = await _read(served, path, who, tenant="a" if who == "root" else None)
            if who in readers or who in ("ada", "root"):
                assert status == 200, (path, who, status, body)
                assert CLUSTER in body and (path.startswith("/v1/replay") or _events(body)[-1] == "end"), (path, who)
            else:
                assert status == 403 and "no read permission" in body and CLUSTER not in body, (path, who, status, body)
    # onec reads c only: d by its name is no cluster to it (a 403 named d's id), by its id
    # (which onec gave) a 403 naming only that id (it named d too).
    for path in ("/v1/replay?cluster=d", "/v1/events?cluster=d"):
        status, body = await _read(served, path, "onec")
        assert status == 404 and "no cluster named 'd' in tenant a" in body and OTHER not in body, (path, body)
    for path in (f"/v1/replay?cluster={OTHER}", f"/v1/events?cluster={OTHER}"):
        status, body = await _read(served, path, "onec")
        assert status == 403 and f"onec has no read permission on cluster {OTHER} of tenant a" in body, (path, body)
        assert "cluster d" not in body.replace(OTHER, "<id>"), (path, body)  # (an id may start with a d)
    status, body = await _read(served, "/v1/events?cluster=c&jobs=false", "alice")
    assert _events(body) == ["event", "end"] and "ClusterRequested" in body and "JobRequested" not in body
    status, body = await _read(served, "/v1/events?cluster=c", "alice")
    assert _events(body) == ["event", "event", "end"] and "JobRequested" in body  # its jobs' too


async def test_a_clusters_read_for_an_operation_is_refused_naming_the_operations_permission(served: Served) -> None:
    """`needs` (the CLI's lookup before `muster cluster expand d`): the 403 names the grant the
    operation needs. It named `read`, and once that was given the expand was refused for `write`
    (the CLI rewrote the tracker's words; an HTTP or NATS client got `read`). The cluster is
    named by its name only to one who may read it."""
    status, body = await _read(served, f"/v1/events?cluster={OTHER}&jobs=false&needs=write", "onec")
    assert status == 403 and f"onec has no write permission on cluster {OTHER} of tenant a" in body, body
    assert f"muster grant onec write --scope cluster:{OTHER}" in body, body
    assert "cluster d" not in body.replace(OTHER, "<id>"), body  # (an id may start with a d)
    status, body = await _read(served, "/v1/events?cluster=d&jobs=false&needs=write", "onec")
    assert status == 404 and "no cluster named 'd' in tenant a" in body and OTHER not in body, body  # (unreadable: no such name)
    for ref in ("c", CLUSTER):  # a reader is told the name it knows
        status, body = await _read(served, f"/v1/events?cluster={ref}&jobs=false&needs=execute", "onec")
        assert status == 403 and f"onec has no execute permission on cluster c ({CLUSTER}) of tenant a" in body, body
        assert f"muster grant onec execute --scope cluster:{CLUSTER}" in body, body
    status, body = await _read(served, "/v1/events?cluster=*&jobs=false&needs=write", "reader")
    assert status == 403 and "reader has no write permission on every cluster of tenant a" in body, body
    status, body = await _read(served, "/v1/events?cluster=c&jobs=false&needs=write", "ada")
    assert status == 200 and _events(body) == ["event", "end"], body
    status, body = await _read(served, "/v1/events?cluster=c&jobs=false&needs=grant", "alice")
    assert status == 400 and "needs 'grant' is not one of read, write, execute, approve" in body, body


async def test_another_tenants_user_sees_nothing_of_them(served: Served) -> None:
    for path in PEOPLE:
        status, body = await _read(served, path, "bob", tenant="a")
        assert status == 403 and "belongs to tenant b" in body, (path, status, body)
        status, body = await _read(served, path, "bob")  # in its own tenant, A's ids and names are nothing
        if status == 200:
            assert _events(body) == ["end"] and CLUSTER not in body and JOB not in body, (path, body)
        else:
            assert status == 404 and "in tenant b" in body and "ClusterRequested" not in body, (path, status, body)
    for path in ("/v1/catalog", "/v1/provisioners"):
        status, body = await _read(served, path, "bob")
        assert status == 200 and '"tenants": ["a"' not in body
    status, body = await _read(served, "/v1/provisioners?all=true", "bob")
    assert status == 403 and "its tenant only" in body
    assert (await _read(served, "/v1/provisioners?all=true", "root"))[0] == 200


async def test_bad_reads_are_400s_naming_the_parameter(served: Served) -> None:
    for path, parameter in (("/v1/events?subject=a..b", "subject"), ("/v1/events?job=nope&cluster=c", "job"),
                            ("/v1/events?since=soon", "since"), ("/v1/events?follow=maybe", "follow"), ("/v1/replay", "cluster"),
                            ("/v1/replay?cluster=c&seq=-1", "seq"), ("/v1/catalog/history", "name"),
                            ("/v1/catalog/history?name=x&kind=gadgets", "kind"), ("/v1/events?cluster=a.b", "cluster")):
        resp = await served.http.get(path, headers={"Authorization": f"Bearer {served.tokens['alice']}"})
        body = await resp.json()
        assert resp.status == 400 and body["error"]["parameter"] == parameter, (path, body)
    status, body = await _read(served, "/v1/replay?cluster=nosuch", "alice")
    assert status == 404 and "no cluster named 'nosuch' in tenant a" in body


async def test_the_provisioners_page_says_what_works_with_auth_on(served: Served) -> None:
    page = await served.http.get("/ui/provisioners", cookies={"muster_session": served.tokens["alice"]})
    text = await page.text()
    assert page.status == 200 and "No live provisioner serves tenant a" in text
    assert "muster grant PROVISIONER execute --scope queue:default --tenant a" in text and "--tenants" not in text


async def test_a_reader_of_one_cluster_lists_its_jobs(served: Served) -> None:
    """`muster job list --cluster c` read every cluster's name, which a reader of c alone may not (a 403)."""
    env = {**os.environ, "MUSTER_TOKEN": served.tokens["onec"], "MUSTER_TRACKER_URL": str(served.http.make_url("")).rstrip("/"),
           "MUSTER_CREDENTIALS": "", "COLUMNS": "200"}
    ran = await cli_in_process.ran(["job", "list", "--cluster", "c"], env, 60, catch_exceptions=False)
    assert ran.exit_code == 0, ran.output
    [row] = [line.split() for line in ran.output.splitlines() if line.startswith(JOB)]
    assert row[1:4] == ["c", "create", "running"]
    refused = await cli_in_process.ran(["job", "list"], env, 60, catch_exceptions=False)
    assert refused.exit_code == 4 and "onec has no read permission on every cluster of tenant a" in refused.output
    # what to do about it, as the planner's refusals say it
    assert "(a tenant admin can give it: muster grant onec read --scope 'cluster:*')" in " ".join(refused.output.split())


async def test_a_super_admin_naming_a_tenant_no_one_made_is_told_so(served: Served) -> None:
    """A mistyped tenant read as an empty one: `muster cluster list --tenant acmee` said "no
    clusters in tenant 'acmee'", exit 0; `muster status J --tenant acmee` "no job J"."""
    for path in (*ROUTES, "/v1/catalog", "/v1/provisioners", "/v1/events?cluster=c"):
        resp = await served.http.get(path, headers={"Authorization": f"Bearer {served.tokens['root']}", api.TENANT_HEADER: "acmee"})
        body = await resp.json()
        assert resp.status == 400 and body["error"] == {"status": 400, "parameter": api.TENANT_HEADER,
                                                        "message": "no tenant 'acmee' (`muster tenant list` lists them; `muster tenant create` makes one)"}, (path, body)
        assert (await served.get(path, "root", tenant="a"))[0] == 200, path
    assert (await served.get("/v1/clusters", "root", tenant="default"))[0] == 200  # muster up's, made or not
    assert (await served.get("/v1/whoami", "root", tenant="acmee"))[0] == 200  # about the token, not a tenant
    env = {**os.environ, "MUSTER_TOKEN": served.tokens["root"], "MUSTER_TRACKER_URL": str(served.http.make_url("")).rstrip("/"),
           "MUSTER_CREDENTIALS": "", "MUSTER_TENANT": "acmee"}
    for args in (["cluster", "list"], ["status", JOB], ["cluster", "show", "c"]):
        ran = await cli_in_process.ran(args, env, 60, catch_exceptions=False)
        assert (ran.exit_code, ran.output) == (2, "Error: no tenant 'acmee' (`muster tenant list` lists them; `muster tenant create` makes one)\n"), args


async def test_a_super_admin_reads_the_logs_own_scopes(served: Served) -> None:
    """docs/tracker.md: `muster events --tenant _system` (the pools) or `_auth` (the identities),
    for operators. The check for a tenant no one made (session 32) refused both, `no tenant
    '_system'`, exit 2: no one makes them, they are the log's. A tenant's user still may not."""
    for scope, shown in ((subjects.SYSTEM, None), (subjects.IDENTITY, "PrincipalCreated")):
        resp = await served.http.get("/v1/events?after=0", headers={"Authorization": f"Bearer {served.tokens['root']}",
                                                                    api.TENANT_HEADER: scope})
        text = await resp.text()
        assert resp.status == 200 and "event: end" in text, (scope, resp.status, text[:300])
        assert shown is None or shown in text, scope
        status, message = await served.get("/v1/events?after=0", "alice", tenant=scope)
        assert status == 403 and "belongs to tenant a" in message, (scope, status, message)
    env = {**os.environ, "MUSTER_TOKEN": served.tokens["root"], "MUSTER_TRACKER_URL": str(served.http.make_url("")).rstrip("/"),
           "MUSTER_CREDENTIALS": ""}
    ran = await cli_in_process.ran(["events", "--tenant", subjects.IDENTITY, "--since", "0"], env, 60, catch_exceptions=False)
    assert ran.exit_code == 0 and '"type": "PrincipalCreated"' in ran.output, ran.output[-500:]


async def test_a_name_where_an_id_goes_is_told_where_the_ids_are(served: Served) -> None:
    """The CLI takes a cluster's name anywhere; the API's paths take ids, and said only `cluster
    id 'c' is not a cluster id (a UUID)` to a user who typed the name the CLI takes (found walking
    a user's day): each now says where the id is."""
    for path, where in (("/v1/clusters/c", "GET /v1/clusters lists each cluster's id with its name"),
                        ("/v1/jobs?cluster=c", "GET /v1/clusters lists each cluster's id with its name"),
                        ("/v1/jobs/1c6b69ec-2266", "GET /v1/jobs lists them"), ("/v1/events?job=j1", "GET /v1/jobs lists them")):
        status, message = await served.get(path, "alice")
        assert status == 400 and f"(a UUID: {where})" in message, (path, status, message)
        assert message.startswith(("cluster 'c' is not a cluster id", "job '1c6b69ec-2266' is not a job id",
                                   "job 'j1' is not a job id")), message  # (not "cluster id 'c' is not a cluster id")
    resp = await served.http.post("/v1/clusters/c/stop", json={}, headers={"Authorization": f"Bearer {served.tokens['alice']}"})
    assert resp.status == 400 and "GET /v1/clusters lists each cluster's id" in (await resp.json())["error"]["message"]


async def test_a_cluster_s_name_where_its_id_goes_is_answered_with_its_id_to_who_may_read_it(served: Served) -> None:
    """The id of the cluster named, for one who may read it (found walking a user's day: the
    answer sent the user to a list to find what the tracker knew); never a cluster the caller
    may not read, nor another tenant's."""
    app = served.http.app
    assert app is not None
    index = app[TRACKER].index
    assert index is not None  # names are looked up in it: wait until it has both clusters
    await index.mirror.wait_for(lambda: all(index.mirror.get(cluster_key("a", c)) for c in (CLUSTER, OTHER)), 10)
    for path in ("/v1/clusters/c", "/v1/jobs?cluster=c", "/v1/clusters/c/jobs"):
        status, message = await served.get(path, "alice")
        assert status == 400 and message.endswith(f"; cluster 'c' is {CLUSTER}"), (path, message)
    resp = await served.http.post("/v1/clusters/c/stop", json={}, headers={"Authorization": f"Bearer {served.tokens['alice']}"})
    assert (await resp.json())["error"]["message"].endswith(f"; cluster 'c' is {CLUSTER}")
    assert (await served.get("/v1/clusters/c", "onec"))[1].endswith(CLUSTER)  # the one cluster it may read
    for path, who in (("/v1/clusters/d", "onec"), ("/v1/clusters/c", "bob"), ("/v1/clusters/nosuch", "alice")):
        status, message = await served.get(path, who)
        assert status == 400 and "; cluster" not in message and OTHER not in message and CLUSTER not in message, (path, who, message)


async def test_a_route_that_is_none_says_where_the_routes_are(served: Served) -> None:
    """`POST /v1/clusters/{id}/delete` (the CLI's and the console's verb) answered `Not Found`,
    as if the cluster were gone: a path no route takes now says so, and where the routes are."""
    headers = {"Authorization": f"Bearer {served.tokens['alice']}"}
    resp = await served.http.post(f"/v1/clusters/{CLUSTER}/delete", json={}, headers=headers)
    message = (await resp.json())["error"]["message"]
    assert resp.status == 404 and message == (f"no route POST /v1/clusters/{CLUSTER}/delete: GET /v1/openapi.json lists the "
                                              "routes (a cluster is deleted with DELETE /v1/clusters/{id})"), message
    resp = await served.http.get("/v1/nothing", headers=headers)
    assert resp.status == 404 and "no route GET /v1/nothing" in (await resp.json())["error"]["message"]
