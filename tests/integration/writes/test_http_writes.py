"""The tracker's write API with real tokens, against a real planner, solver and provisioner
(conftest.py): an HTTP write becomes the bus request the CLI sends, sent as the token's
principal, so the log names that principal; previews are saved and applied exactly, or refused
once stale; `Idempotency-Key` and `If-Match` behave as documented; bad input and refused requests
name the field and leave the log as it was (docs/tracker.md, "Writes")."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import pytest_asyncio

from contracts import subjects
from muster.bus.connect import connect
from muster.bus.eventstore import EventStore
from muster.bus.wire import flush
from services.tracker import csrf

from .conftest import Api, Served

pytestmark = [pytest.mark.nats, pytest.mark.timeout(180)]
MAKE: dict[str, Any] = {"name": "w1", "template": "hadoop-small", "nodes": 3}
MADE: dict[str, Any] = {}
"""The file's first cluster and job (`made`), which its tests change."""


@pytest_asyncio.fixture
async def made(api: Api) -> dict[str, Any]:
    """The cluster w1 and its create job, made once per worker by whichever test asks first: the
    file's tests may run on several workers (`-n 2` without `--dist loadfile` spreads them, each
    worker with its own stack) and in any order, so none counts on another having made them (one
    that did met an empty MADE: KeyError 'job_id')."""
    if not MADE:
        status, first, headers = await api.call("POST", "/v1/clusters", "writer", MAKE, **{"Idempotency-Key": "create-w1"})
        assert status == 202, first
        MADE.update(first=first, location=headers["Location"], ended=await api.finished(first["job_id"]),
                    cluster_id=first["cluster_id"], job_id=first["job_id"])
    return MADE


def _error(answer: dict[str, Any]) -> tuple[str | None, str]:
    return answer["error"]["parameter"], answer["error"]["message"]


async def test_a_create_runs_as_the_requester_and_its_key_maps_retries_to_the_same_job(
        api: Api, served: Served, made: dict[str, Any]) -> None:
    first = made["first"]
    assert made["location"] == first["job_url"] == f"/v1/jobs/{first['job_id']}" and first["duplicate"] is False, first
    assert made["ended"]["state"] == "succeeded", made["ended"]
    requested = served.run(_first_event(served, subjects.job_events("default", first["job_id"])))
    assert requested["requested_by"] == "writer"  # the token's principal, from the subject the server let it use
    status, again, _ = await api.call("POST", "/v1/clusters", "writer", MAKE, **{"Idempotency-Key": "create-w1"})
    assert status == 202 and again["job_id"] == first["job_id"] and again["duplicate"] is True, again
    before = served.log()
    status, other, _ = await api.call("POST", "/v1/clusters", "writer", {**MAKE, "nodes": 4}, **{"Idempotency-Key": "create-w1"})
    assert status == 409 and other["error"]["job_id"] == first["job_id"] and other["error"]["parameter"] == "Idempotency-Key", other
    assert "Idempotency-Key 'create-w1' was used already" in other["error"]["message"] and served.log() == before
    assert "differs in nodes" in other["error"]["message"] and "request_id" not in other["error"]["message"]
    status, cluster, headers = await api.call("GET", f"/v1/clusters/{first['cluster_id']}", "reader")
    assert status == 200 and headers["ETag"] == f'"{cluster["version"]}"', cluster


async def test_a_preview_is_applied_exactly_once_or_refused_when_the_cluster_moved(
        api: Api, served: Served, made: dict[str, Any]) -> None:
    cid = made["cluster_id"]
    before = served.log()
    status, preview, _ = await api.call("POST", f"/v1/clusters/{cid}/expand?dry_run=true", "writer", {"nodes": 4})
    assert status == 200, preview
    summary = preview["summary"]
    assert summary["tasks"] == len(preview["plan"]["tasks"]) == sum(s["tasks"] for s in summary["stages"]) > 0
    assert summary["actions"]["create"] == 1 and summary["nodes"] >= 1
    assert summary["estimate"]["eager_s"] <= summary["estimate"]["staged_s"]
    assert preview["layout"]["nodes"] == 4 and preview["plan_url"] == f"/v1/plans/{preview['plan_id']}"
    after = served.log()
    assert {s for s in after if after[s] != before.get(s)} == {subjects.plan_events("default", preview["plan_id"])}
    status, saved, _ = await api.call("GET", preview["plan_url"], "reader")
    assert status == 200 and saved["applied"] is False and saved["operation"] == "expand" and saved["by"] == "writer"
    # The cluster moves (a restart), so the preview is out of date: applying it says why.
    status, moved, _ = await api.call("POST", f"/v1/clusters/{cid}/restart", "writer", {})
    assert status == 202 and (await api.finished(moved["job_id"]))["state"] == "succeeded"
    status, stale, _ = await api.call("POST", preview["plan_url"] + "/apply", "writer")
    assert status == 409 and _error(stale)[0] == "plan_id" and "make a new plan" in _error(stale)[1], stale
    # A fresh preview, applied by someone whose grants cover only this cluster.
    served.run(served.ask_auth(served.sys_nc, "grant", principal="onec", permission="write", scope=f"cluster:{cid}", tenant="default"))
    status, fresh, _ = await api.call("POST", f"/v1/clusters/{cid}/expand?dry_run=true", "onec", {"nodes": 4})
    assert status == 200, fresh
    status, applied, _ = await api.call("POST", fresh["plan_url"] + "/apply", "onec")
    assert status == 202 and (await api.finished(applied["job_id"]))["state"] == "succeeded"
    assert (await api.call("GET", fresh["plan_url"], "reader"))[1]["applied"] is True
    status, cluster, headers = await api.call("GET", f"/v1/clusters/{cid}", "reader")
    assert len(cluster["nodes"]) == 4
    version = cluster["version"]
    status, refused, _ = await api.call("POST", f"/v1/clusters/{cid}/shrink", "writer", {"nodes": 3}, **{"If-Match": f'"{version - 1}"'})
    assert status == 412 and _error(refused)[0] == "If-Match" and "(If-Match)" in _error(refused)[1], refused
    assert f"cluster {cluster['name']} ({cid})" in _error(refused)[1], refused  # by its name, as the CLI names it
    status, clean, _ = await api.call("POST", f"/v1/clusters/{cid}/repair", "writer", {})
    assert status == 409 and _error(clean)[1].startswith(f"cluster {cluster['name']} ({cid}) has no drift to repair"), clean
    status, shrunk, _ = await api.call("POST", f"/v1/clusters/{cid}/shrink", "writer", {"nodes": 3}, **{"If-Match": headers["ETag"]})
    assert status == 202 and (await api.finished(shrunk["job_id"]))["state"] == "succeeded"


BAD: list[tuple[str, str, Any, dict[str, str], int, str]] = [
    ("POST", "/v1/clusters", {**MAKE, "nodes": 0}, {}, 422, "nodes"),
    ("POST", "/v1/clusters", {**MAKE, "nodes": 60}, {}, 422, "nodes"),
    ("POST", "/v1/clusters?dry_run=true", {**MAKE, "services": ["base", "ghost"]}, {}, 422, "services"),
    # (accepted, it made a cluster whose job failed `no layout: yarn-nodemanager requires ...` a moment later)
    ("POST", "/v1/clusters", {**MAKE, "name": "w2", "services": ["base", "yarn-nodemanager"]}, {}, 422, "services"),
    ("POST", "/v1/clusters", {**MAKE, "config": "{not json"}, {}, 422, "config"),
    # a JSON body is strict: a string where a number is expected was read as the number (a create of 3 nodes)
    ("POST", "/v1/clusters?dry_run=true", {**MAKE, "nodes": "3"}, {}, 422, "nodes"),
    ("POST", "/v1/clusters?dry_run=true", {**MAKE, "pool": {"urgency": "5"}}, {}, 422, "pool.urgency"),
    ("PUT", "/v1/governance/schedules/nightly", {"every_s": 3600, "command": {
        "type": "ExpandCluster", "cluster_id": "0b0c5a59-6b1e-4d43-9d55-3f4a14b0b001", "nodes": "9"}}, {}, 422, "command.nodes"),
    ("POST", "/v1/clusters", {**MAKE, "requested_by": "root"}, {}, 422, "requested_by"),
    ("POST", "/v1/clusters", b"{not json", {}, 400, "body"),
    ("POST", "/v1/clusters", json.dumps(MAKE), {"Content-Type": "text/plain"}, 415, "Content-Type"),
    ("POST", "/v1/clusters", MAKE, {"Idempotency-Key": "with space"}, 400, "Idempotency-Key"),
    ("POST", "/v1/clusters?dry_run=maybe", MAKE, {}, 400, "dry_run"),
    ("POST", "/v1/clusters", MAKE, {"If-Match": '"3"'}, 400, "If-Match"),
    ("POST", "/v1/jobs/not-a-uuid/pause", None, {}, 400, "job_id"),
    ("POST", "/v1/plans/no-such-plan/apply", None, {}, 404, "plan_id"),
]


@pytest.mark.parametrize(("method", "path", "body", "headers", "status", "field"), BAD, ids=[f"{b[4]}-{b[5]}" for b in BAD])
async def test_bad_input_names_the_field_and_leaves_the_log_alone(api: Api, served: Served, method: str, path: str, body: Any,
                                                                   headers: dict[str, str], status: int, field: str) -> None:
    before = served.log()
    got, answer, _ = await api.call(method, path, "writer", body, **headers)
    assert (got, answer["error"]["parameter"]) == (status, field), answer
    assert answer["error"]["message"] and served.log() == before


async def test_a_body_strict_json_refuses_is_a_400_naming_why(api: Api, served: Served) -> None:
    """NaN and 1e999 were taken (the dry run answered 200; a create stored them as null) and a body
    nesting 50,000 levels answered 500 "internal error" (the parser's RecursionError)."""
    before = served.log()
    made = json.dumps({**MAKE, "config": {"a": 1}})
    for body, said in ((made.replace('{"a": 1}', '{"a": NaN}'), "the body is not valid JSON: NaN is not a JSON number"),
                       (made.replace('{"a": 1}', '{"a": 1e999}'), "the body is not valid JSON: 1e999 is too large a number"),
                       ('{"config": ' + "[" * 50_000 + "]" * 50_000 + "}", "the body nests 50,001 levels deep; the limit is 32")):
        status, answer, _ = await api.call("POST", "/v1/clusters?dry_run=true", "writer", body.encode())
        assert status == 400 and _error(answer)[0] == "body" and _error(answer)[1].startswith(said), answer
    assert served.log() == before


async def test_who_may_not_is_refused_and_nothing_reaches_the_log(api: Api, served: Served, made: dict[str, Any]) -> None:
    before = served.log()
    status, answer, _ = await api.call("POST", "/v1/clusters?dry_run=true", "reader", MAKE)
    assert status == 403 and "reader has no write permission" in _error(answer)[1], answer
    status, answer, _ = await api.call("POST", f"/v1/jobs/{made['job_id']}/pause", "reader")
    assert status == 403, answer
    status, answer, _ = await api.call("POST", "/v1/clusters", "outsider", MAKE, **{"X-Muster-Tenant": "default"})
    assert status == 403 and "belongs to tenant other" in _error(answer)[1]
    status, answer, _ = await api.call("PUT", "/v1/catalog", "writer", {"catalog": {"services": {"x": {"name": "x"}}}})
    assert status == 403 and "catalog" in _error(answer)[1], answer
    assert served.log() == before
    # The tracker's own identity may send no operation at all: it acts only as the people it serves.
    assert served.run(_tracker_may_not_send_as(served, "writer")) == "refused"
    assert served.log() == before


async def _tracker_may_not_send_as(served: Served, principal: str) -> str:
    refused = asyncio.Event()

    async def seen(err: Exception) -> None:
        if "permissions violation" in str(err).lower():
            refused.set()

    nc = await connect(served.sys_nc.connected_url.geturl(), name="as-tracker", token=served.tokens["tracker"], error_cb=seen)
    try:
        await nc.publish(subjects.operation("default", principal, "create"), json.dumps(MAKE).encode(), reply=nc.new_inbox())
        await flush(nc)
        await asyncio.wait_for(refused.wait(), 10)  # the server says so at once
        return "refused"
    finally:
        await nc.close()


async def test_job_control_and_a_revoked_token(api: Api, served: Served, made: dict[str, Any]) -> None:
    status, answer, _ = await api.call("POST", f"/v1/jobs/{made['job_id']}/pause", "writer")
    assert status == 409 and "has succeeded (it ended): nothing to pause" in _error(answer)[1], answer
    # A job the tenant does not have: 404, as its read answers (it was a 403 naming a grant on it to ask for).
    ghost = "00000000-0000-4000-8000-000000000000"
    status, answer, _ = await api.call("POST", f"/v1/jobs/{ghost}/cancel", "writer")
    assert status == 404 and _error(answer) == ("job_id", f"no job {ghost} in tenant default"), answer
    made = served.run(served.ask_auth(served.sys_nc, "token-create", principal="writer"))["data"]
    served.tokens["writer-2"] = made["token"]
    acting = served.acting()
    opened = acting.opened
    status, answer, _ = await api.call("POST", "/v1/clusters?dry_run=true", "writer-2", {**MAKE, "name": "w4"})
    assert status == 200 and acting.opened == opened + 1, (status, answer, acting.opened, opened)
    served.run(_revoke_and_wait_closed(served, made["token_id"]))
    status, answer, _ = await api.call("POST", "/v1/clusters?dry_run=true", "writer-2", {**MAKE, "name": "w4"})
    assert status == 401 and "revoked" in _error(answer)[1], answer


async def _revoke_and_wait_closed(served: Served, token_id: str) -> None:
    acting = served.acting()
    acting.closed.clear()
    await served.ask_auth(served.sys_nc, "token-revoke", token_id=token_id, principal="writer")
    await asyncio.wait_for(acting.closed.wait(), 10)  # the auth service kicked it: the tracker forgot it


async def _first_event(served: Served, subject: str) -> dict[str, Any]:
    found = await EventStore(served.sys_nc).read(subject)
    return dict(found[0].event.model_dump(mode="json"))


async def test_a_write_with_the_consoles_cookie_needs_its_csrf_token(api: Api, served: Served) -> None:
    token = served.tokens["writer"]
    url = f"{served.url}/v1/clusters?dry_run=true"
    async with api.session.post(url, json={**MAKE, "nodes": 0}, cookies={"muster_session": token}) as resp:
        assert resp.status == 403 and (await resp.json())["error"]["parameter"] == "X-CSRF-Token"
    headers = {"X-CSRF-Token": csrf.token_for(token, "default")}
    async with api.session.post(url, json={**MAKE, "nodes": 0}, cookies={"muster_session": token}, headers=headers) as resp:
        assert resp.status == 422 and (await resp.json())["error"]["parameter"] == "nodes"  # past the check, to the body's
