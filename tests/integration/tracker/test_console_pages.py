"""The console's pages and streams over HTTP, without a browser (tests/browser drives one):
tenant scoping, 404 pages, the job page's data, the live stream's `task` field, job control."""

from __future__ import annotations

import html
import json
import os
import re
import uuid
from typing import Any

import pytest

from contracts import subjects
from contracts.events import CatalogEntityPut, JobSucceeded
from muster.bus.eventstore import Append
from services.tracker import csrf
from services.tracker.ui.live import VERBS

from .conftest import Tracked

OTHER = {"Cookie": "muster_tenant=someone-else"}


async def _finished(tracked: Tracked) -> tuple[str, str]:
    reply = await tracked.create(nodes=2)
    assert isinstance(await tracked.client.wait(reply.job_id, timeout=60), JobSucceeded)
    await tracked.indexed_final(reply.job_id)
    return reply.job_id, reply.cluster_id


def _job_data(html: str) -> dict:
    found = re.search(r'<script type="application/json" id="job-data">(.*?)</script>', html, re.S)
    assert found, "the job page carries its data"
    return json.loads(found.group(1))


async def test_pages_show_the_tenants_clusters_and_jobs(tracked: Tracked) -> None:
    job_id, cluster_id = await _finished(tracked)
    clusters = await tracked.http.get("/ui/clusters")
    assert clusters.status == 200 and clusters.content_type == "text/html"
    assert cluster_id in await clusters.text()
    page = await tracked.http.get(f"/ui/jobs/{job_id}")
    html = await page.text()
    assert page.status == 200 and "succeeded" in html
    data = _job_data(html)
    status = await (await tracked.http.get(f"/v1/jobs/{job_id}")).json()
    assert len(data["graph"]["tasks"]) == status["tasks_total"] and data["graph"]["links"]
    assert {t["id"]: t["state"] for t in data["graph"]["tasks"]} == {t["id"]: t["state"] for t in status["tasks"]}
    cluster = await tracked.http.get(f"/ui/clusters/{cluster_id}")
    cluster_html = await cluster.text()
    assert cluster.status == 200 and "JobSucceeded" in cluster_html
    assert 'data-testid="replay-version"' in cluster_html and "expires never (no lease)" in cluster_html  # version and lease shown, as the CLI says it
    first = await tracked.http.get(f"/ui/clusters/{cluster_id}/at", params={"seq": "1"})
    assert first.status == 404 and "did not exist yet" in await first.text()  # no events yet at sequence 1
    before = await tracked.http.get(f"/ui/clusters/{cluster_id}", params={"seq": "1"})  # a link to a point before it
    assert before.status == 404 and f"Cluster {cluster_id} did not exist yet at log sequence 1." in await before.text()
    # A link to a point the log has not reached, and the slider's read without a point, say so.
    end = (await tracked.store.js.stream_info(subjects.EVENTS_STREAM)).state.last_seq
    ahead = await tracked.http.get(f"/ui/clusters/{cluster_id}", params={"seq": str(end + 1000)})
    assert ahead.status == 404 and f"Seq {end + 1000} is past the end of the log" in await ahead.text()
    bare = await tracked.http.get(f"/ui/clusters/{cluster_id}/at")
    assert bare.status == 404 and "history to show: ?seq=N, a log sequence." in await bare.text()
    for path in ("/ui/catalog", "/ui/provisioners", "/ui/pools", "/ui/jobs", f"/ui/jobs/{job_id}/tasks/n1000.create"):
        assert (await tracked.http.get(path)).status == 200, path
    # Each node's machine (provider id) on the cluster page, and what the create returned on its task.
    assert re.search(r'data-testid="node-machine">sim-', cluster_html), "the cluster page names each node's machine"
    task_html = await (await tracked.http.get(f"/ui/jobs/{job_id}/tasks/n1000.create")).text()
    assert re.search(r'data-testid="attempt-result"><dt>Results</dt><dd class="mono">providerid sim-', task_html)


def _form(action: str, tenant: str = "default") -> dict[str, str]:
    """A job-control form as the page renders it: the action and the session's CSRF token."""
    return {"action": action, "csrf": csrf.token_for(os.environ["MUSTER_TOKEN"], tenant)}


async def test_another_tenant_sees_nothing_of_them(tracked: Tracked) -> None:
    job_id, cluster_id = await _finished(tracked)
    for path in (f"/ui/jobs/{job_id}", f"/ui/clusters/{cluster_id}", f"/ui/jobs/{job_id}/graph", f"/ui/jobs/{job_id}/stream"):
        resp = await tracked.http.get(path, headers=OTHER)
        assert resp.status == 404, path
        assert job_id not in (await resp.text()).replace(f"no job {job_id}", "")
    listed = await (await tracked.http.get("/ui/clusters", headers=OTHER)).text()
    assert cluster_id not in listed
    # A tenant without jobs, and a filter nothing matches, are pages saying so (they were 500s).
    for path, says in (("/ui/jobs", "No jobs in tenant someone-else."), ("/ui/jobs?state=failed", "No jobs failed in tenant someone-else."),
                       ("/ui/jobs?state=rolled_back", "No jobs rolled back in tenant someone-else.")):
        page = await tracked.http.get(path, headers=OTHER)
        assert page.status == 200 and says in await page.text(), path
    own = await tracked.http.get("/ui/jobs?state=failed")
    assert own.status == 200 and "No jobs failed in tenant default." in await own.text()
    assert job_id in await (await tracked.http.get("/ui/jobs?state=succeeded")).text()
    said = await tracked.http.post(f"/ui/jobs/{job_id}/control", data=_form("retry", "someone-else"),
                                   headers={**OTHER, "Accept": "application/json"})
    assert (await said.json())["said"] == f"rejected: there is no job {job_id} in tenant someone-else"


async def test_unknown_and_malformed_ids_are_404_pages(tracked: Tracked) -> None:
    unknown = str(uuid.uuid4())
    for path, text in ((f"/ui/jobs/{unknown}", f"There is no job {unknown} in tenant default."),
                       ("/ui/jobs/../etc", "The console has no page"), ("/ui/clusters/x", "There is no cluster named 'x' in tenant default."),
                       ("/ui/clusters/" + unknown + "?seq=abc", "is not a log sequence")):
        resp = await tracked.http.get(path)
        assert resp.status == 404 and resp.content_type == "text/html", path
        assert text in html.unescape(await resp.text()), path
    # A cluster's name, as every command takes it, opens its page (it was "not a cluster id").
    _, cluster_id = await _finished(tracked)
    resp = await tracked.http.get(f"/ui/clusters/c{tracked.created}?seq=3", allow_redirects=False)
    assert resp.status in (302, 303) and resp.headers["Location"] == f"/ui/clusters/{cluster_id}?seq=3", resp.headers
    # And the tracker's own address, as `muster up` prints it, opens the console (it was a JSON 404).
    resp = await tracked.http.get("/", allow_redirects=False)
    assert resp.status in (302, 303) and resp.headers["Location"] == "/ui/", resp.headers


async def test_pages_allow_the_trackers_own_scripts_only_and_no_framing(tracked: Tracked) -> None:
    """Every page, a 404 page too, says so in its Content-Security-Policy, and none has an inline
    script or event handler that the policy would stop (the job page started its layout worker
    inline, the job list filtered on an `onchange`); the browser tests fail on the violation the
    browser would report (conftest.py)."""
    job_id, _ = await _finished(tracked)
    for path in ("/ui/clusters", "/ui/jobs", f"/ui/jobs/{job_id}", "/ui/catalog", f"/ui/jobs/{uuid.uuid4()}"):
        resp = await tracked.http.get(path)
        policy = resp.headers.get("Content-Security-Policy", "")
        assert "script-src 'self';" in policy and "frame-ancestors 'none'" in policy, (path, policy)
        page = await resp.text()
        inline = re.findall(r'<script(?![^>]*\b(?:src=|type="application/json"))[^>]*>|\son[a-z]+="', page)
        assert not inline, (path, inline)
    resp = await tracked.http.get(f"/ui/jobs/{job_id}/graph")  # JSON: not a page
    assert "Content-Security-Policy" not in resp.headers


async def test_the_stream_says_each_tasks_state_and_resumes_after_a_sequence(tracked: Tracked) -> None:
    job_id, _ = await _finished(tracked)
    body = await (await tracked.http.get(f"/ui/jobs/{job_id}/stream")).text()
    events = [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: ")]
    progress = [e for e in events if "seq" in e]
    claimed = next(e for e in progress if e["type"] == "TaskClaimed")
    assert claimed["task"]["id"] == claimed["task_id"] and claimed["task"]["state"] == "claimed"
    assert claimed["task"]["provisioner"] == "prov-test"
    middle = progress[len(progress) // 2]["seq"]
    rest = await (await tracked.http.get(f"/ui/jobs/{job_id}/stream", params={"after": str(middle)})).text()
    seqs = [int(x) for x in re.findall(r"^id: (\d+)$", rest, re.M)]
    assert seqs and min(seqs) > middle and "event: end" in rest


async def test_job_control_answers_as_the_planner_does_and_refuses_other_sites(tracked: Tracked) -> None:
    job_id, _ = await _finished(tracked)
    said = await tracked.http.post(f"/ui/jobs/{job_id}/control", data=_form("pause"), headers={"Accept": "application/json"})
    answer = await said.json()
    assert answer["accepted"] is False and answer["said"].startswith("rejected: ")
    forged = await tracked.http.post(f"/ui/jobs/{job_id}/control", data=_form("retry"),
                                     headers={"Origin": "http://evil.example", "Accept": "application/json"})
    assert forged.status == 403
    for token in (None, "", _form("retry", "someone-else")["csrf"]):  # no CSRF token, or another session's
        stale = await tracked.http.post(f"/ui/jobs/{job_id}/control", data={"action": "retry", **({"csrf": token} if token is not None else {})},
                                        headers={"Accept": "application/json"})
        assert stale.status == 403 and "CSRF" in (await stale.json())["error"]["message"]
    plain = await tracked.http.post(f"/ui/jobs/{job_id}/control", data=_form("nope"), allow_redirects=False)
    assert plain.status == 303 and "said=rejected" in plain.headers["Location"]


def _said(page: str) -> str:
    found = re.search(r'data-testid="control-said">([^<]*)</output>', page)
    assert found, "the page offers job control"
    return html.unescape(found.group(1))


async def test_a_job_page_says_only_what_the_console_said(tracked: Tracked) -> None:
    """A link to `/ui/jobs/<id>?said=approved` made the page say "approved" when nothing was
    (docs/security.md): the page shows a `said` only under the seal its own redirect made."""
    job_id, _ = await _finished(tracked)
    other, _ = await _finished(tracked)
    back = (await tracked.http.post(f"/ui/jobs/{job_id}/control", data=_form("nope"), allow_redirects=False)).headers["Location"]
    assert _said(await (await tracked.http.get(back)).text()) == "rejected: 'nope' is not one of " + ", ".join(VERBS)
    query = back.partition("?")[2]
    for crafted in (f"/ui/jobs/{job_id}?said=approved", f"/ui/jobs/{job_id}?said=approved&seal=",
                    f"/ui/jobs/{other}?{query}",  # another job's seal
                    f"/ui/jobs/{job_id}?{query.replace('said=rejected', 'said=approved')}"):  # another text under the seal
        page = await tracked.http.get(crafted)
        assert page.status == 200 and _said(await page.text()) == "", crafted


async def test_the_catalog_page_masks_sensitive_provider_fields(tracked: Tracked) -> None:
    # `muster catalog apply` refuses secrets; an entity written before that rule (or by hand)
    # may still hold one in the log: the page must not show it.
    secret = "hunter2-not-for-your-eyes"
    put = CatalogEntityPut(kind="providers", name="legacy", by="someone",
                           entity={"name": "legacy", "providertype": "simulated", "provisioner": {"api_password": secret, "region": "eu"}})
    await tracked.store.append(subjects.catalog_events("default", "providers", "legacy"), [Append(put, f"legacy-{uuid.uuid4()}")])
    page = await (await tracked.http.get("/ui/catalog")).text()
    assert "legacy" in page and "eu" in page
    assert secret not in page and "********" in page


async def test_a_traced_jobs_page_links_its_trace(tracked: Tracked, spans: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/tracing.md: with MUSTER_TRACE_URL set, the job's page links to its trace in that UI."""
    monkeypatch.setenv("MUSTER_TRACE_URL", "http://127.0.0.1:16686/trace/{trace_id}")
    job_id, _ = await _finished(tracked)
    [requested] = [r.event for r in await tracked.store.read(subjects.job_events("default", job_id)) if r.type == "JobRequested"]
    assert requested.trace is not None
    page = await (await tracked.http.get(f"/ui/jobs/{job_id}")).text()
    found = re.search(r'<a href="([^"]+)" data-testid="trace-link"', page)
    assert found and found.group(1) == f"http://127.0.0.1:16686/trace/{requested.trace.split('-')[1]}"
    monkeypatch.delenv("MUSTER_TRACE_URL")
    assert 'data-testid="trace-link"' not in await (await tracked.http.get(f"/ui/jobs/{job_id}")).text()
