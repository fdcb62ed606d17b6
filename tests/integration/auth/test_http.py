"""The tracker's half of the isolation and permission matrices: every /v1 route, with real
tokens; 401 and 403 with reasons; /healthz and the OpenAPI document open; /metrics operators."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer

from contracts import subjects
from contracts.events import ClusterRequested, JobRequested
from muster.bus.connect import connect
from muster.bus.eventstore import Append, EventStore
from services.tracker import api
from services.tracker.http import make_app

from .conftest import Authed

JOB, CLUSTER = str(uuid.uuid4()), str(uuid.uuid4())


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
    await system.close()
    nc = await connect(authed.url, name="tracker", token=tokens["tracker"])
    http = TestClient(TestServer(make_app(EventStore(nc))))
    await http.start_server()
    yield Served(http, tokens)
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
    for who, sees in (("alice", True), ("bob", False)):
        page = await served.http.get("/ui/clusters", cookies={"muster_session": served.tokens[who]})
        assert page.status == 200 and (sees or CLUSTER not in await page.text()), who
        job = await served.http.get(f"/ui/jobs/{JOB}", cookies={"muster_session": served.tokens[who]})
        assert job.status == (200 if sees else 404), who
