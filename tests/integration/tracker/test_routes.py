"""Every route of the tracker against a real nats-server with the four services running."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest
from aiohttp import ClientResponse

from contracts import subjects
from contracts.commands import Accepted, DeleteCluster
from contracts.events import JobSucceeded
from services.tracker import api
from services.tracker.api import ROUTES

pytestmark = pytest.mark.nats

Tracked = Any
UNKNOWN = "00000000-0000-4000-8000-000000000000"


async def _finished_job(tracked: Tracked, nodes: int = 2) -> Accepted:
    reply = await tracked.create(nodes=nodes)
    assert isinstance(await tracked.client.wait(reply.job_id, timeout=60), JobSucceeded)
    await tracked.indexed_final(reply.job_id)
    return reply


async def _json(resp: ClientResponse, status: int = 200) -> Any:
    """The body, checked against the model the OpenAPI document gives for this route."""
    body = await resp.json()
    assert resp.status == status, body
    model = _model_of(resp.request_info.url.path) if status == 200 else api.Error
    if model is not None:
        model.model_validate(body)
    return body


def _model_of(path: str) -> Any:
    for r in ROUTES:
        if re.fullmatch(re.sub(r"\{[^}]+\}", "[^/]+", r.path), path):
            return r.response
    return None


async def test_a_jobs_status_comes_from_its_owner_with_every_task_located(tracked: Tracked) -> None:
    reply = await _finished_job(tracked)
    body = await _json(await tracked.http.get(f"/v1/jobs/{reply.job_id}"))
    assert body["source"] == "owner" and body["state"] == "succeeded" and body["owner"] == "planner-test"
    assert body["cluster_id"] == reply.cluster_id and body["operation"] == "create" and body["error"] is None
    assert body["counts"] == {"succeeded": body["tasks_total"]} and body["tasks_total"] > 5
    assert body["started_at"] and body["finished_at"] and body["stage"]["total"] > 0 and body["stage"]["current"] is None
    assert body["layout"]["nodes"] == 2
    assert all(t["provisioner"] == "prov-test" and t["worker"] and t["attempt"] == 1 for t in body["tasks"])


async def test_when_the_owner_is_gone_the_status_is_folded_from_the_log_and_says_so(tracked: Tracked) -> None:
    reply = await _finished_job(tracked)
    from_owner = await tracked.tracker.job_status("default", reply.job_id)
    await tracked.stop_planner()
    from_log = await _json(await tracked.http.get(f"/v1/jobs/{reply.job_id}"))
    assert from_log["source"] == "log" and from_owner is not None and from_owner["source"] == "owner"
    text = await (await tracked.http.get("/metrics")).text()
    assert 'muster_tracker_job_status_total{source="log"} 1.0' in text
    assert {**from_log, "source": None} == {**from_owner, "source": None}


async def test_the_location_of_a_job_names_its_owner_and_where_each_task_ran(tracked: Tracked) -> None:
    reply = await _finished_job(tracked)
    status = await _json(await tracked.http.get(f"/v1/jobs/{reply.job_id}"))
    body = await _json(await tracked.http.get(f"/v1/jobs/{reply.job_id}/location"))
    assert body["owner"] == "planner-test" and body["owner_seq"] > 0 and body["cluster_id"] == reply.cluster_id
    assert body["source"] == "index"
    assert sorted(t["task_id"] for t in body["tasks"]) == sorted(t["id"] for t in status["tasks"])
    for t in body["tasks"]:
        assert t["provisioner"] == "prov-test" and t["worker"] and t["node"] and t["state"] == "succeeded" and t["seq"] > 0


async def test_a_jobs_events_come_in_log_order_page_by_page(tracked: Tracked) -> None:
    reply = await _finished_job(tracked)
    seen: list[dict[str, Any]] = []
    after: int | None = 0
    while after is not None:
        page = await _json(await tracked.http.get(f"/v1/jobs/{reply.job_id}/events", params={"after": after, "limit": 7}))
        assert len(page["items"]) <= 7
        seen += page["items"]
        after = page["next_after"]
    log = await tracked.store.read_many(subjects.job_history_filters("default", reply.job_id))
    assert [e["seq"] for e in seen] == [r.seq for r in log]
    assert seen[0]["type"] == "JobRequested" and seen[-1]["type"] == "JobSucceeded"
    assert seen[0]["event"]["job_id"] == reply.job_id and seen[0]["time"]


async def _read_sse(resp: ClientResponse, timeout: float = 60) -> list[tuple[str, str | None, dict[str, Any]]]:
    events: list[tuple[str, str | None, dict[str, Any]]] = []
    fields: dict[str, str] = {}
    async with asyncio.timeout(timeout):
        async for raw in resp.content:
            line = raw.decode().rstrip("\n")
            if line.startswith(":"):
                continue
            if line:
                name, _, value = line.partition(": ")
                fields[name] = value
                continue
            if fields:
                events.append((fields["event"], fields.get("id"), json.loads(fields["data"])))
                fields = {}
    return events


async def test_the_stream_shows_live_progress_until_the_job_ends(tracked: Tracked) -> None:
    reply = await tracked.create(nodes=2)
    resp = await tracked.http.get(f"/v1/jobs/{reply.job_id}/stream")
    assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/event-stream")
    events = await _read_sse(resp)
    progress = [e for e in events if e[0] == "progress"]
    assert events[-1][0] == "end" and events[-1][2]["state"] == "succeeded" and events[-1][2]["type"] == "JobSucceeded"
    ids = [int(e[1]) for e in progress if e[1] is not None]
    assert ids == sorted(ids) and len(ids) == len(progress)
    assert progress[0][2]["type"] == "JobRequested" and progress[-1][2]["final"]
    done = [p[2]["counts"].get("succeeded", 0) for p in progress]
    assert done == sorted(done) and done[-1] == progress[-1][2]["tasks_total"]
    assert any(p[2]["type"] == "TaskClaimed" and "prov-test" in p[2]["who"] for p in progress)
    # The log's fence markers are not the story: the console's live timeline said `2 task records`
    # (the page's own story, `muster history` and `muster watch` leave them out).
    assert not any(p[2]["type"] == "TasksRecorded" for p in progress)

    # Reconnecting with Last-Event-ID resumes after it.
    middle = ids[len(ids) // 2]
    again = await _read_sse(await tracked.http.get(f"/v1/jobs/{reply.job_id}/stream", headers={"Last-Event-ID": str(middle)}))
    assert [int(str(e[1])) for e in again if e[0] == "progress"] == [i for i in ids if i > middle]
    assert again[-1][0] == "end"


async def test_a_cluster_its_jobs_and_its_current_job(tracked: Tracked) -> None:
    reply = await _finished_job(tracked)
    cluster = await _json(await tracked.http.get(f"/v1/clusters/{reply.cluster_id}"))
    assert cluster["status"] == "active" and cluster["job_id"] == reply.job_id and len(cluster["nodes"]) == 2
    assert sum(g["count"] for g in cluster["layout"]) == 2 and all(n["hostname"] for n in cluster["nodes"])
    # Each service on each node as its state machine: created, so running and current (base,
    # which has no start action, configured).
    lives = {s: (v["state"], v["outdated"]) for n in cluster["nodes"] for s, v in n["lifecycle"].items()}
    assert set(lives) == {s for n in cluster["nodes"] for s in n["services"]}
    assert {v for s, v in lives.items() if s != "base"} == {("running", False)} and lives["base"] == ("configured", False)

    deleted = await tracked.client.send("default", DeleteCluster(cluster_id=reply.cluster_id))
    assert isinstance(deleted, Accepted)
    assert isinstance(await tracked.client.wait(deleted.job_id, timeout=60), JobSucceeded)
    await tracked.indexed_final(deleted.job_id)

    cluster = await _json(await tracked.http.get(f"/v1/clusters/{reply.cluster_id}"))
    assert cluster["status"] == "deleted" and cluster["job_id"] == deleted.job_id
    jobs = await _json(await tracked.http.get(f"/v1/clusters/{reply.cluster_id}/jobs"))
    assert [(j["id"], j["operation"], j["state"]) for j in jobs["items"]] == [
        (reply.job_id, "create", "succeeded"), (deleted.job_id, "delete", "succeeded")]
    clusters = await _json(await tracked.http.get("/v1/clusters"))
    assert [c["id"] for c in clusters["items"]] == [reply.cluster_id] and clusters["items"][0]["status"] == "deleted"
    name = clusters["items"][0]["name"]
    assert [c["id"] for c in (await _json(await tracked.http.get("/v1/clusters", params={"name": name})))["items"]] == [reply.cluster_id]
    assert (await _json(await tracked.http.get("/v1/clusters", params={"name": name + "-other"})))["items"] == []


async def test_jobs_are_listed_by_cluster_and_state_page_by_page(tracked: Tracked) -> None:
    first = await _finished_job(tracked)
    second = await _finished_job(tracked)
    listed = await _json(await tracked.http.get("/v1/jobs", params={"limit": 1}))
    assert [j["id"] for j in listed["items"]] == [first.job_id] and listed["next_after"]
    rest = await _json(await tracked.http.get("/v1/jobs", params={"limit": 1, "after": listed["next_after"]}))
    assert [j["id"] for j in rest["items"]] == [second.job_id] and rest["next_after"] is None
    by_cluster = await _json(await tracked.http.get("/v1/jobs", params={"cluster": second.cluster_id}))
    assert [j["id"] for j in by_cluster["items"]] == [second.job_id]
    assert len((await _json(await tracked.http.get("/v1/jobs", params={"state": "succeeded"})))["items"]) == 2
    assert (await _json(await tracked.http.get("/v1/jobs", params={"state": "failed"})))["items"] == []


async def test_another_tenants_job_and_cluster_are_not_found(tracked: Tracked) -> None:
    reply = await _finished_job(tracked)
    other = {"X-Muster-Tenant": "someone-else"}
    for path in (f"/v1/jobs/{reply.job_id}", f"/v1/jobs/{reply.job_id}/location", f"/v1/jobs/{reply.job_id}/events",
                 f"/v1/jobs/{reply.job_id}/stream", f"/v1/clusters/{reply.cluster_id}", f"/v1/clusters/{reply.cluster_id}/jobs"):
        body = await _json(await tracked.http.get(path, headers=other), 404)
        assert body["error"]["status"] == 404 and "someone-else" in body["error"]["message"]
        await _json(await tracked.http.get(path), 200) if not path.endswith("/stream") else None
    assert (await _json(await tracked.http.get("/v1/jobs", headers=other)))["items"] == []
    assert (await _json(await tracked.http.get("/v1/clusters", headers=other)))["items"] == []


@pytest.mark.parametrize(
    ("path", "headers", "parameter"),
    [
        ("/v1/jobs/not-a-uuid", {}, "job_id"),
        ("/v1/jobs/not-a-uuid/location", {}, "job_id"),
        (f"/v1/jobs/{UNKNOWN}", {"X-Muster-Tenant": "a.b"}, "X-Muster-Tenant"),
        (f"/v1/jobs/{UNKNOWN}", {"X-Muster-Tenant": ""}, "X-Muster-Tenant"),
        (f"/v1/jobs/{UNKNOWN}/events?limit=0", {}, "limit"),
        (f"/v1/jobs/{UNKNOWN}/events?limit=many", {}, "limit"),
        (f"/v1/jobs/{UNKNOWN}/events?after=-1", {}, "after"),
        (f"/v1/jobs/{UNKNOWN}/stream", {"Last-Event-ID": "x"}, "Last-Event-ID"),
        ("/v1/jobs?state=bogus", {}, "state"),
        ("/v1/jobs?cluster=c1", {}, "cluster"),
        ("/v1/jobs?limit=501", {}, "limit"),
        ("/v1/clusters/zzz", {}, "cluster_id"),
        ("/v1/clusters?nme=web", {}, "nme"),
        ("/v1/clusters/zzz/jobs", {}, "cluster_id"),
        ("/v1/events?subject=muster.evt.other.job.%3E", {}, "subject"),  # another tenant's whole subject
        ("/v1/events?subject=muster.evt.default", {}, "subject"),  # the tenant, and no pattern
        ("/v1/events?subject=muster.task.default.default", {}, "subject"),  # not the log
    ],
)
async def test_a_malformed_parameter_is_a_400_naming_it(lone: Any, path: str, headers: dict[str, str], parameter: str) -> None:
    body = await _json(await lone.get(path, headers=headers), 400)
    assert body["error"]["parameter"] == parameter and body["error"]["message"]


async def test_a_whole_subject_of_the_tenants_log_reads_as_its_pattern_under_the_tenant(tracked: Tracked) -> None:
    """`subject=muster.evt.default.job.<id>` (what every event's `subject` says) was read as a
    pattern under the tenant, `muster.evt.default.muster.evt.default.job.<id>`: an empty stream,
    as of a quiet log, where `muster events --subject` takes a whole subject."""
    from .test_undecodable import _sse

    reply = await _finished_job(tracked)
    relative = await _sse(await tracked.http.get("/v1/events", params={"subject": f"job.{reply.job_id}"}))
    whole = await _sse(await tracked.http.get("/v1/events", params={"subject": f"muster.evt.default.job.{reply.job_id}"}))
    assert [d["seq"] for k, d in whole if k == "event"] == [d["seq"] for k, d in relative if k == "event"] != []
    other = await _json(await tracked.http.get("/v1/events", params={"subject": "muster.evt.acme.>"}), 400)
    assert other["error"]["message"].startswith("subject 'muster.evt.acme.>' is in tenant 'acme', not default: give a "
                                                "pattern under muster.evt.default."), other


@pytest.mark.parametrize("path", [f"/v1/jobs/{UNKNOWN}", f"/v1/jobs/{UNKNOWN}/location", f"/v1/jobs/{UNKNOWN}/events",
                                  f"/v1/jobs/{UNKNOWN}/stream", f"/v1/clusters/{UNKNOWN}", f"/v1/clusters/{UNKNOWN}/jobs",
                                  "/v1/nothing-here"])
async def test_an_unknown_id_or_path_is_a_404_in_json(lone: Any, path: str) -> None:
    body = await _json(await lone.get(path), 404)
    assert body["error"]["status"] == 404


async def test_a_wrong_method_is_a_405_in_json(lone: Any) -> None:
    resp = await lone.post("/v1/jobs", data=b"{")
    body = await _json(resp, 405)
    assert body["error"]["status"] == 405 and "GET" in resp.headers["Allow"]
    # what the route takes, in the answer as in the header (it said only "Method Not Allowed")
    assert body["error"]["message"] == ("POST /v1/jobs: this route takes GET, HEAD (GET /v1/openapi.json lists the "
                                        "routes and their methods)"), body


@pytest.mark.parametrize(("method", "path", "unknown", "takes"), [
    ("POST", f"/v1/clusters/{UNKNOWN}/expand?dryrun=true", "dryrun", "dry_run"),  # ran the expand it meant to preview
    ("POST", "/v1/clusters?dry-run=1", "dry-run", "dry_run"),
    ("GET", "/v1/jobs?stat=failed", "stat", "cluster, state, limit, after"),  # listed every job, as if filtered
    ("GET", f"/v1/jobs/{UNKNOWN}?follow=true", "follow", "none"),
    ("GET", "/v1/events?jobb=x", "jobb", "subject, job, cluster, needs, jobs, after, since, follow"),
    ("DELETE", f"/v1/clusters/{UNKNOWN}?force=true", "force", "dry_run")])
async def test_a_query_parameter_the_route_does_not_take_is_a_400_naming_it(lone: Any, method: str, path: str, unknown: str,
                                                                          takes: str) -> None:
    """Walk of session 33: every route but `/v1/clusters` and `/v1/cost` ignored a parameter it
    does not take, so `POST .../expand?dryrun=true` (a typo of `dry_run`) expanded the cluster."""
    resp = await lone.request(method, path, json={"nodes": 3} if method == "POST" else None)
    body = await _json(resp, 400)
    assert body["error"]["parameter"] == unknown, body
    assert body["error"]["message"] == f"unknown query parameter '{unknown}': this route takes {takes}", body
    assert (await lone.get("/healthz?probe=lb")).status in (200, 503)  # probes and scrapers may add their own


@pytest.mark.parametrize(("method", "path", "name", "given"), [
    ("POST", f"/v1/clusters/{UNKNOWN}/expand?dry_run=true&dry_run=false", "dry_run", "'true', 'false'"),  # was a dry run
    ("GET", "/v1/clusters?limit=1&limit=2", "limit", "'1', '2'"),  # the first was taken, the second ignored
    ("GET", "/v1/jobs?state=failed&state=running", "state", "'failed', 'running'")])
async def test_a_query_parameter_given_twice_is_a_400_naming_it(lone: Any, method: str, path: str, name: str, given: str) -> None:
    resp = await lone.request(method, path, json={"nodes": 3} if method == "POST" else None)
    body = await _json(resp, 400)
    assert body["error"]["parameter"] == name, body
    assert body["error"]["message"] == f"{name} is given 2 times ({given}): give it once", body


@pytest.mark.parametrize(("method", "path", "name", "values", "said"), [
    ("GET", "/v1/jobs", "X-Muster-Tenant", ["a", "b"], " ('a', 'b')"),  # tenant a was read, b ignored
    ("POST", f"/v1/clusters/{UNKNOWN}/expand", "If-Match", ['"3"', '"4"'], " ('\"3\"', '\"4\"')"),
    ("POST", f"/v1/clusters/{UNKNOWN}/expand", "Idempotency-Key", ["k1", "k2"], " ('k1', 'k2')"),
    ("GET", "/v1/jobs", "Authorization", ["Bearer one-secret", "Bearer two-secret"], ""),  # a token is never shown
    ("GET", "/v1/events", "Last-Event-ID", ["1", "2"], " ('1', '2')")])
async def test_a_header_muster_reads_given_twice_is_a_400_naming_it(lone: Any, method: str, path: str, name: str,
                                                                    values: list[str], said: str) -> None:
    from multidict import CIMultiDict

    headers = CIMultiDict((name, v) for v in values)
    resp = await lone.request(method, path, data=b'{"nodes": 3}' if method == "POST" else None, headers=headers)
    body = await _json(resp, 400)
    assert body["error"]["parameter"] == name, body
    assert body["error"]["message"] == f"header {name} is given 2 times{said}: give it once", body


async def test_a_content_type_given_twice_is_refused_by_the_http_parser_naming_it(lone: Any) -> None:
    """aiohttp's parser refuses a second Content-Type (as a second Content-Length) before muster
    sees the request: the tracker's runner answers it in muster's JSON shape, naming the header
    (`unreadable.py`). Until session 37 the tests' server was a plain `AppRunner`, and this test
    asserted aiohttp's plain text, which users of `muster tracker` never get."""
    from multidict import CIMultiDict

    headers = CIMultiDict([("Content-Type", "application/json"), ("Content-Type", "text/plain")])
    resp = await lone.post(f"/v1/clusters/{UNKNOWN}/expand", data=b'{"nodes": 3}', headers=headers)
    assert resp.status == 400 and resp.content_type == "application/json", await resp.text()
    error = (await resp.json())["error"]
    assert error["message"].startswith("the tracker cannot read this HTTP request: Duplicate 'Content-Type' header"), error
    assert error["parameter"] == "Content-Type"


async def test_health_metrics_and_the_openapi_document(tracked: Tracked) -> None:
    assert await _json(await tracked.http.get("/healthz")) == {"ok": True, "nats": "connected", "index": "ready"}
    await tracked.http.get(f"/v1/jobs/{UNKNOWN}")
    resp = await tracked.http.get("/metrics")
    text = await resp.text()
    assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/plain")
    assert 'muster_tracker_http_requests_total{method="GET",route="/v1/jobs/{job_id}",status="404"} 1.0' in text
    assert "muster_tracker_http_request_duration_seconds_bucket" in text and "muster_tracker_index_keys" in text
    doc = await _json(await tracked.http.get("/v1/openapi.json"))
    assert doc["openapi"].startswith("3.") and {r.path for r in ROUTES} <= set(doc["paths"])
    registered = {(r.method, r.resource.canonical) for r in tracked.http.app.router.routes()
                  if r.method != "HEAD" and not r.resource.canonical.startswith("/ui")  # the console's pages (docs/ui.md)
                  and r.resource.canonical != "/"}  # (which `/` opens)
    assert registered == {(method.upper(), path) for path, operations in doc["paths"].items() for method in operations}
    assert doc["paths"]["/v1/jobs/{job_id}"]["get"]["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/JobStatus"}


async def test_metrics_carry_the_planners_queue_metrics(tracked: Tracked) -> None:
    await _finished_job(tracked)
    text = await (await tracked.http.get("/metrics")).text()
    finished = [line for line in text.splitlines() if line.startswith("muster_planner_tasks_finished_total{")]
    assert finished and 'planner="planner-test"' in finished[0] and 'tenant="default"' in finished[0]
    assert float(finished[0].rsplit(" ", 1)[1]) > 0
    assert 'muster_planner_time_in_queue_seconds{class="default",planner="planner-test",stat="p99",tenant="default"}' in text


async def test_metrics_say_how_many_workers_to_add_or_remove_against_live_capacity(tracked: Tracked) -> None:
    """#14.4: the planners' need against the capacity of registered provisioners, per class."""
    from services.provisioner.app import Provisioner
    from services.provisioner.plugins import PluginRegistry
    from services.provisioner.worker import WorkerConfig

    await _finished_job(tracked)
    nc = tracked.client.nc
    registry = PluginRegistry.discover()
    idle = Provisioner(nc, registry, WorkerConfig(provisioner_id="prov-idle", capacity=5, tenants=("default",)))
    gpu = Provisioner(nc, registry, WorkerConfig(provisioner_id="prov-gpu", capacity=3, provisioner_class="gpu"))
    await idle.start()
    await gpu.start()
    try:
        text = await (await tracked.http.get("/metrics")).text()
        values = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines() if line.startswith("muster_workers_")}
        assert values['muster_workers_capacity{class="default"}'] == 5 and values['muster_workers_capacity{class="gpu"}'] == 3
        needed = values['muster_workers_needed{class="default"}']
        assert values['muster_workers_delta{class="default"}'] == needed - 5
        assert values['muster_workers_needed{class="gpu"}'] == 0 and values['muster_workers_delta{class="gpu"}'] == -3
    finally:
        await idle.stop()
        await gpu.stop()
        await registry.aclose()


@pytest.mark.parametrize("size", [8193, 9000, 60_000])
async def test_a_query_string_over_8_kib_is_a_414_in_json(lone: Any, size: int) -> None:
    """Issue #18.6: aiohttp answered a query string over 8 KB with a plain-text 400."""
    path = "/v1/jobs?state="
    body = await _json(await lone.get(path + "x" * (size - len(path))), 414)
    assert body["error"]["parameter"] == "query string" and f"{size} bytes" in body["error"]["message"]
    assert "8192" in body["error"]["message"]


async def test_a_header_over_8_kib_is_a_431_in_json(lone: Any) -> None:
    body = await _json(await lone.get("/v1/jobs", headers={"X-Muster-Tenant": "t" * 9000}), 431)
    assert body["error"]["parameter"] == "X-Muster-Tenant"


async def test_a_query_string_of_8_kib_is_still_read(lone: Any) -> None:
    path = "/v1/jobs?state="
    body = await _json(await lone.get(path + "x" * (8192 - len(path))), 400)
    assert body["error"]["parameter"] == "state"


async def test_a_stream_opened_again_goes_on_after_its_last_event_and_an_ended_jobs_story_ends(tracked: Tracked) -> None:
    """An SSE client opening `/v1/events` again sends `Last-Event-ID` (EventSource does, by
    itself): it was sent the whole story again. And a job's story followed from after the job's
    end (`after`, that header) was followed for ever: `muster job cancel J --wait` sent again
    waited out its --timeout for an end that had come."""
    from .test_undecodable import _sse

    reply = await _finished_job(tracked)
    whole = [d for k, d in await _sse(await tracked.http.get("/v1/events", params={"job": reply.job_id})) if k == "event"]
    middle = whole[len(whole) // 2]["seq"]
    again = await _sse(await tracked.http.get("/v1/events", params={"job": reply.job_id},
                                              headers={"Last-Event-ID": str(middle)}))
    assert [d["seq"] for k, d in again if k == "event"] == [d["seq"] for d in whole if d["seq"] > middle]
    bad = await _json(await tracked.http.get("/v1/events", params={"job": reply.job_id}, headers={"Last-Event-ID": "x"}), 400)
    assert bad["error"]["parameter"] == "Last-Event-ID"
    async with asyncio.timeout(20):  # (it never ended)
        for headers, params in (({}, {"after": str(whole[-1]["seq"])}), ({"Last-Event-ID": str(whole[-1]["seq"])}, {})):
            sent = await _sse(await tracked.http.get("/v1/events", params={"job": reply.job_id, "follow": "true", **params},
                                                     headers=headers))
            assert [k for k, _ in sent] == ["end"], sent
