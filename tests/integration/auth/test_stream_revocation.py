"""An open HTTP stream ends when its reader loses the right to it: a revoked token, or a grant
taken back. Before, `/v1/events?follow=true`, a job's stream and the console's went on sending the tenant's
new events to a revoked (even disabled) token for as long as the client kept them open, while
the same token's bus connections were closed within half a second."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest_asyncio
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient, TestServer
from nats.aio.client import Client

from contracts import subjects
from contracts.events import ClusterRequested, JobPaused, JobRequested
from muster.bus.connect import connect
from muster.bus.eventstore import Append, EventStore
from services.auth.backends import identity_backends
from services.auth.view import IdentityView
from services.tracker.auth import HttpAuth
from services.tracker.http import make_app

from .conftest import Authed

JOB, CLUSTER = str(uuid.uuid4()), str(uuid.uuid4())
DEADLINE_S = 10.0


@dataclass
class Served:
    authed: Authed
    http: TestClient
    view: IdentityView
    system: Client
    tokens: dict[str, dict[str, Any]] = field(repr=False)  # never in test output

    async def admin(self, verb: str, aggregate: str, ident: str, **body: Any) -> None:
        """An identity change, once the tracker's identities have folded it (its event on `aggregate`/`ident`)."""
        root = await self.authed.raw(self.authed.admin_token, "root")
        try:
            assert (await self.authed.ask(root, "root", verb, **body))["ok"]
        finally:
            await root.close()
        written = await self.system.jetstream().get_last_msg(subjects.EVENTS_STREAM, subjects.identity_events(aggregate, ident))
        assert written.seq is not None
        await self.view.wait_for(written.seq)


@pytest_asyncio.fixture
async def served(authed: Authed) -> AsyncIterator[Served]:
    root = await authed.raw(authed.admin_token, "root")
    tokens: dict[str, dict[str, Any]] = {}
    for pid in ("rita", "jo", "tracker"):
        fields = {"role": "service", "service": "tracker"} if pid == "tracker" else {"tenant": "a"}
        made = await authed.ask(root, "root", "user-create", principal=pid, **fields)
        assert made["ok"], made
        tokens[pid] = made["data"]
    for pid, scope in (("rita", "tenant"), ("jo", f"cluster:{CLUSTER}")):
        assert (await authed.ask(root, "root", "grant", principal=pid, permission="read", scope=scope, tenant="a"))["ok"]
    await root.close()
    system = await authed.raw(authed.system_token, "sys")
    store = EventStore(system)
    await store.append(subjects.cluster_events("a", CLUSTER), [Append(ClusterRequested(
        tenant="a", cluster_id=CLUSTER, name="c", template="t", provider="p", job_id=JOB), msg_id="rv-c")], expect_last_seq=0)
    await store.append(subjects.job_events("a", JOB), [Append(JobRequested(
        tenant="a", job_id=JOB, cluster_id=CLUSTER, operation="create", request={}), msg_id="rv-j")], expect_last_seq=0)
    nc = await connect(authed.url, name="tracker", token=tokens["tracker"]["token"])
    view = await IdentityView(nc).start()
    http = TestClient(TestServer(make_app(EventStore(nc), auth=HttpAuth(view.state, identity_backends(view.state)))))
    await http.start_server()
    yield Served(authed, http, view, system, tokens)
    await http.close()
    await view.stop()
    await nc.close()
    await system.close()


async def _open(s: Served, who: str, path: str) -> ClientResponse:
    resp = await s.http.get(path, headers={"Authorization": f"Bearer {s.tokens[who]['token']}"})
    assert resp.status == 200, await resp.text()
    return resp


async def _next_message(resp: ClientResponse) -> tuple[str, dict[str, Any]]:
    """The stream's next SSE message (its event name and data), keep-alives skipped."""
    event, data = "message", ""
    while True:
        line = (await resp.content.readline()).decode()
        if line == "":
            return "closed", {}
        line = line.rstrip("\n")
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data = line[6:]
        elif line == "" and data:
            return event, json.loads(data)


async def _until(resp: ClientResponse, wanted: str) -> dict[str, Any]:
    async def read() -> dict[str, Any]:
        while True:
            event, data = await _next_message(resp)
            if event == wanted or event in ("error", "closed"):
                return {**data, "sse": event}

    return await asyncio.wait_for(read(), DEADLINE_S)


async def _job_event(s: Served) -> None:
    await EventStore(s.system).append(subjects.job_events("a", JOB), [Append(JobPaused(job_id=JOB), msg_id=str(uuid.uuid4()))])


async def test_a_revoked_tokens_event_stream_ends_before_the_next_event(served: Served) -> None:
    last = (await served.system.jetstream().stream_info(subjects.EVENTS_STREAM)).state.last_seq
    resp = await _open(served, "rita", f"/v1/events?follow=true&after={last}")
    await _job_event(served)
    seen = await _until(resp, "event")
    assert seen["sse"] == "event" and seen["type"] == "JobPaused", seen  # it streams while the token is good
    token_id = served.tokens["rita"]["token_id"]
    await served.admin("token-revoke", "token", token_id, token_id=token_id)
    await _job_event(served)
    ended = await _until(resp, "event")
    assert ended["sse"] == "error" and "the stream ends" in ended["message"] and "revoked" in ended["message"], ended
    resp.close()


async def test_a_job_stream_ends_when_the_grant_that_let_it_be_read_is_revoked(served: Served) -> None:
    resp = await _open(served, "jo", f"/v1/jobs/{JOB}/stream")
    first = await _until(resp, "progress")
    assert first["sse"] == "progress", first
    await served.admin("revoke", "principal", "jo", principal="jo", permission="read", scope=f"cluster:{CLUSTER}", tenant="a")
    await _job_event(served)
    ended = await _until(resp, "progress")
    assert ended["sse"] == "error" and "jo has no read permission" in ended["message"], ended
    resp.close()


async def test_the_consoles_batched_job_stream_ends_when_its_readers_grant_or_token_is_taken_back(served: Served) -> None:
    """The job page's stream (`/ui/jobs/<id>/stream?batch=1`, services/tracker/ui/batches.py)
    asks still.py before each event, as the API's streams do."""
    jo = await _open(served, "jo", f"/ui/jobs/{JOB}/stream?batch=1")
    rita = await _open(served, "rita", f"/ui/jobs/{JOB}/stream?batch=1")
    for resp in (jo, rita):
        first = await _until(resp, "batch")
        assert first["sse"] == "batch" and first["state"], first  # it streams while the reader may read
    await served.admin("revoke", "principal", "jo", principal="jo", permission="read", scope=f"cluster:{CLUSTER}", tenant="a")
    token_id = served.tokens["rita"]["token_id"]
    await served.admin("token-revoke", "token", token_id, token_id=token_id)
    await _job_event(served)
    ended = await _until(jo, "batch")
    assert ended == {"sse": "error", "message": f"the stream ends: jo may no longer read job {JOB}"}, ended
    ended = await _until(rita, "batch")
    assert ended["sse"] == "error" and "the stream ends" in ended["message"] and "revoked" in ended["message"], ended
    jo.close()
    rita.close()


async def test_a_revoked_token_in_the_browser_gets_the_consoles_sign_in_page_and_api_clients_json(served: Served) -> None:
    """Walk of session 22: a form posted from the console with a revoked token (job control, an
    approval, an operation's preview) was answered with the API's JSON 401, shown raw in the
    browser. A browser (it asks for HTML) gets the console's sign-in page saying the token is no
    longer valid and why, back to the page it was on; a script asking for JSON still gets JSON."""
    cookie, origin = {"muster_session": served.tokens["rita"]["token"]}, str(served.http.make_url("")).rstrip("/")
    assert (await served.http.get("/ui/clusters", cookies=cookie, allow_redirects=False)).status == 200
    token_id = served.tokens["rita"]["token_id"]
    await served.admin("token-revoke", "token", token_id, token_id=token_id)
    browser = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"

    page = await served.http.get("/ui/clusters", cookies=cookie, headers={"Accept": browser}, allow_redirects=False)
    where = page.headers["Location"]
    assert page.status == 303 and where.startswith("/ui/sign-in?next=/ui/clusters&why=Your%20token%20is%20no%20longer%20valid"), where
    assert "revoked" in where and "sign%20in%20again" in where, where
    bearer = await served.http.get("/ui/clusters", headers={"Authorization": f"Bearer {served.tokens['rita']['token']}",
                                                             "Accept": browser}, allow_redirects=False)
    assert bearer.status == 303 and bearer.headers["Location"] == where

    form = await served.http.post(f"/ui/jobs/{JOB}/control", data={"action": "pause", "csrf": "x"}, cookies=cookie,
                                  headers={"Origin": origin, "Accept": browser, "Referer": f"{origin}/ui/jobs/{JOB}"})
    html = await form.text()
    assert form.status == 401 and form.content_type == "text/html", html
    assert "<h1>Sign in</h1>" in html and "Your token is no longer valid (token" in html and "revoked" in html, html
    assert f'name="next" value="/ui/jobs/{JOB}"' in html, html  # back to the job's page once signed in again

    script = await served.http.post(f"/ui/jobs/{JOB}/control", data={"action": "pause", "csrf": "x"}, cookies=cookie,
                                    headers={"Origin": origin, "Accept": "application/json"})
    body = await script.json()
    assert script.status == 401 and "revoked" in body["error"]["message"], body
    assert body["sign_in"].startswith("/ui/sign-in?why=Your%20token%20is%20no%20longer%20valid"), body  # where job.js sends the browser
    api_read = await served.http.get("/v1/jobs", headers={"Authorization": f"Bearer {served.tokens['rita']['token']}"})
    assert api_read.status == 401 and "revoked" in (await api_read.json())["error"]["message"]
