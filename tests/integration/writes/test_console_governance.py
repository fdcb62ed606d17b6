"""The console's governance page acts (session 36's walk): a schedule's Pause, Resume and Delete,
a rule's and a policy's Delete, a subscription's Test and Delete, each the API's write route sent
as the signed-in person, its answer said at the page's top. Until then the page only listed them:
a user paused a nightly schedule from the CLI or over HTTP alone (docs/ui.md, docs/governance.md)."""

from __future__ import annotations

import re
from urllib.parse import unquote

import aiohttp
import pytest

from .conftest import Api, Served, job_end
from .test_console_forms import Console

pytestmark = [pytest.mark.nats, pytest.mark.timeout(180)]


def _said(location: str) -> str:
    found = re.search(r"[?&]said=([^&]+)", location)
    assert found, location
    return unquote(found.group(1))


async def _schedule(api: Api, session: aiohttp.ClientSession, served: Served, name: str) -> None:
    """A cluster of the writer's and its schedule (a check at 03:00), made over HTTP."""
    status, made, _ = await api.call("POST", "/v1/clusters", "writer", {"name": f"{name}-c", "template": "hadoop-small", "nodes": 2})
    assert status == 202, made
    assert (await job_end(session, served, made["job_id"]))["state"] == "succeeded"
    status, put, _ = await api.call("PUT", f"/v1/governance/schedules/{name}", "writer",
                                    {"cron": "0 3 * * *", "command": {"type": "CheckCluster", "cluster_id": made["cluster_id"]}})
    assert status == 200, put


async def _paused(api: Api, name: str) -> bool:
    status, item, _ = await api.call("GET", f"/v1/governance/schedules/{name}", "root")
    assert status == 200, item
    return bool(item["entity"]["paused"])


async def test_a_schedules_owner_pauses_resumes_and_deletes_it_from_the_page(api: Api, served: Served) -> None:
    session = api.session
    await _schedule(api, session, served, "nightly-ui")
    writer = Console(session, served, "writer")
    status, page = await writer.get("/ui/governance")
    assert status == 200 and 'data-testid="pause-nightly-ui"' in page and 'data-testid="delete-nightly-ui"' in page
    assert '<button type="submit" class="primary danger">Delete</button>' in page  # white on red (its text was dark on dark red)
    status, _, location = await writer.post("/ui/governance/schedules/nightly-ui/pause", [])
    assert status == 303 and location.startswith("/ui/governance?said=") and "&seal=" in location
    assert _said(location) == "schedule nightly-ui paused" and await _paused(api, "nightly-ui")
    status, page = await writer.get(location)  # the page says it, and now offers Resume
    assert 'data-testid="governance-said">schedule nightly-ui paused<' in page and 'data-testid="resume-nightly-ui"' in page
    status, page = await writer.get("/ui/governance?said=schedule%20deleted&seal=forged")  # a link cannot make it say things
    assert "governance-said" not in page
    status, _, location = await writer.post("/ui/governance/schedules/nightly-ui/resume", [])
    assert _said(location) == "schedule nightly-ui resumed" and not await _paused(api, "nightly-ui")
    # A Delete asks first, saying what it takes away; the page's own button then deletes.
    status, _, location = await writer.post("/ui/governance/schedules/nightly-ui/delete", [])
    assert status == 303 and location == "/ui/governance?confirm=schedules/nightly-ui#confirm", location
    assert not await _paused(api, "nightly-ui")  # (still there: nothing was sent)
    status, page = await writer.get(location)
    assert 'data-testid="confirm-delete"' in page and "Delete schedule nightly-ui?" in page and "will not run again" in page
    assert '<input type="hidden" name="confirm" value="nightly-ui">' in page
    status, _, location = await writer.post("/ui/governance/schedules/nightly-ui/delete", [("confirm", "another")])
    assert location.startswith("/ui/governance?confirm="), location  # (a confirm of another name asks again)
    status, _, location = await writer.post("/ui/governance/schedules/nightly-ui/delete", [("confirm", "nightly-ui")])
    assert _said(location) == "schedule nightly-ui deleted"
    assert (await api.call("GET", "/v1/governance/schedules/nightly-ui", "root"))[0] == 404


async def test_who_may_not_is_shown_no_button_and_told_why_when_posting_anyway(api: Api, served: Served) -> None:
    session = api.session
    await _schedule(api, session, served, "theirs-ui")
    before = served.log()
    reader = Console(session, served, "reader")  # read on the tenant: sees the schedule, may not run a check
    status, page = await reader.get("/ui/governance")
    assert status == 200 and "theirs-ui" in page and 'data-testid="pause-theirs-ui"' not in page
    status, _, location = await reader.post("/ui/governance/schedules/theirs-ui/pause", [])
    said = _said(location)
    assert said.startswith("pause of schedule 'theirs-ui' refused: ") and "reader has no execute permission" in said, said
    outsider = Console(session, served, "outsider")  # another tenant: no such schedule, and nothing of ours said
    status, _, location = await outsider.post("/ui/governance/schedules/theirs-ui/delete", [("confirm", "theirs-ui")])
    assert _said(location) == "delete of schedule 'theirs-ui' refused: no schedule 'theirs-ui' in tenant 'other'"
    status, page, _ = await reader.post("/ui/governance/schedules/theirs-ui/pause", [], csrf="not-the-token")
    assert status == 403 and "CSRF" in page
    status, page, _ = await reader.post("/ui/governance/schedules/theirs-ui/explode", [])
    assert status == 404 and "no button 'explode'" in page
    assert served.log() == before and not await _paused(api, "theirs-ui")
    # Rules are the administrators': no Delete for a writer, and the service's words for one posted anyway.
    status, put, _ = await api.call("PUT", "/v1/governance/rules/big-ui", "root", {"operations": ["create"], "min_nodes": 40})
    assert status == 200, put
    status, page = await reader.get("/ui/governance")
    assert "big-ui" in page and 'data-testid="delete-big-ui"' not in page
    status, _, location = await reader.post("/ui/governance/rules/big-ui/delete", [("confirm", "big-ui")])
    assert "only the tenant's administrators change its approval rules" in _said(location)
    root = Console(session, served, "root")
    status, page = await root.get("/ui/governance")
    assert 'data-testid="delete-big-ui"' in page
    status, page = await root.get("/ui/governance?confirm=rules/big-ui")  # what deleting a rule takes away
    assert "the operations it holds for approval will run without one" in page
    status, page = await root.get("/ui/governance?confirm=clusters/big-ui")  # no Delete of that kind here: nothing asked
    assert 'data-testid="confirm-delete"' not in page
    status, _, location = await root.post("/ui/governance/rules/big-ui/delete", [("confirm", "big-ui")])
    assert _said(location) == "rule big-ui deleted"
    assert (await api.call("GET", "/v1/governance/rules/big-ui", "root"))[0] == 404


async def test_a_subscription_is_tested_from_the_page_as_over_http(api: Api, served: Served) -> None:
    """Test (`muster notify test`) from the page and `POST /v1/governance/subscriptions/{name}/test`,
    new in session 36: this deployment runs no notifier, so the test says which service did not answer
(a test delivered is the live walk's: docs/governance.md)."""
    status, put, _ = await api.call("PUT", "/v1/governance/subscriptions/bus-ui", "root",
                                    {"events": ["job_failed"], "subject": "muster.cb.default.ui"})
    assert status == 200, put
    status, answer, _ = await api.call("POST", "/v1/governance/subscriptions/bus-ui/test", "reader")  # (at once: no responders)
    assert status == 503 and answer["error"]["message"] == "no notifier answered: is `muster up` (or `muster notifier`) running?", answer
    reader = Console(api.session, served, "reader")  # read on the tenant: Test and Delete (Test sends that same route)
    status, page = await reader.get("/ui/governance")
    assert 'data-testid="test-bus-ui"' in page and 'data-testid="delete-bus-ui"' in page
    writer = Console(api.session, served, "writer")  # no read on the tenant: neither
    status, page = await writer.get("/ui/governance")
    assert "bus-ui" not in page
    status, _, location = await reader.post("/ui/governance/subscriptions/bus-ui/delete", [("confirm", "bus-ui")])
    assert _said(location) == "subscription bus-ui deleted"
