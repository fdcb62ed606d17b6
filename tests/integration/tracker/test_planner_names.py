"""A planner's instance name (`planner-<host>-<pid>`) is a detail of the deployment, as a
provisioner's host and process id are: a tenant's people see "a planner" in a job's status,
location, the jobs' list, its events and its progress; super admins and services see the name."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from contracts import subjects
from muster.bus.connect import principal_of
from services.tracker.planner_view import PLANNER, SOLVER

from .test_cli import _finished_job
from .test_undecodable import _sse

pytestmark = pytest.mark.nats

Tracked = Any
NAME = "planner-test"
"""The fixture's planner (its instance name)."""
SOLVER_NAME = "solver-test"
"""The fixture's solver."""


async def _reader_token(tracked: Tracked) -> str:
    """A person of tenant `default` who may read the whole tenant."""
    nc = tracked.store.nc
    me = principal_of(nc)

    async def ask(verb: str, **body: Any) -> dict[str, Any]:
        answer = json.loads((await nc.request(subjects.auth_request(me, verb), json.dumps(body).encode(), timeout=10)).data)
        assert answer["ok"], answer
        return dict(answer)

    await ask("tenant-create", tenant="default")
    token = str((await ask("user-create", principal="reader", tenant="default"))["data"]["token"])
    await ask("grant", principal="reader", permission="read", scope="tenant", tenant="default")
    return token


async def test_a_tenants_people_see_a_planner_and_operators_its_name(tracked: Tracked) -> None:
    reply = await _finished_job(tracked)
    token = await _reader_token(tracked)
    person = {"Authorization": f"Bearer {token}"}
    job = f"/v1/jobs/{reply.job_id}"

    solvers = {NAME: SOLVER_NAME, PLANNER: SOLVER}  # the solver's instance name, to each (session 32: shown to all)
    for headers, owner in (({}, NAME), (person, PLANNER)):  # the session's system token, then the person's
        status = await (await tracked.http.get(job, headers=headers)).json()
        assert status["owner"] == owner, status
        location = await (await tracked.http.get(job + "/location", headers=headers)).json()
        assert location["owner"] == owner, location
        listed = await (await tracked.http.get("/v1/jobs", headers=headers)).json()
        assert [j["owner"] for j in listed["items"]] == [owner], listed
        of_cluster = await (await tracked.http.get(f"/v1/clusters/{reply.cluster_id}/jobs", headers=headers)).json()
        assert [j["owner"] for j in of_cluster["items"]] == [owner], of_cluster  # (it named the instance to everyone)
        page = await (await tracked.http.get(job + "/events", headers=headers)).json()
        assert [e["event"]["planner"] for e in page["items"] if e["type"] == "JobRequested"] == [owner], page
        sent = await _sse(await tracked.http.get("/v1/events", params={"job": reply.job_id}, headers=headers))
        assert [d["event"]["planner"] for k, d in sent if k == "event" and d["type"] == "JobRequested"] == [owner]
        progress = await _sse(await tracked.http.get(job + "/stream", headers=headers))
        requested = next(d for k, d in progress if k == "progress" and d["type"] == "JobRequested")
        assert f"owner {owner}" in requested["text"], requested
        assert [e["event"]["solver"] for e in page["items"] if e["type"] == "LayoutSolved"] == [solvers[owner]], page
        assert [d["event"]["solver"] for k, d in sent if k == "event" and d["type"] == "LayoutSolved"] == [solvers[owner]]
        assert [d["who"] for k, d in progress if k == "progress" and d["type"] == "LayoutSolved"] == [solvers[owner]]
        if owner == PLANNER:
            everything = json.dumps([status, location, listed, of_cluster, page, sent, progress])
            assert NAME not in everything and SOLVER_NAME not in everything, everything[:2000]

    # The console's job page, signed in as each.
    for token_, shown in ((os.environ["MUSTER_TOKEN"], NAME), (token, PLANNER)):
        signed = {"Authorization": f"Bearer {token_}"}  # (as the session cookie: docs/ui.md)
        page_ = await (await tracked.http.get(f"/ui/jobs/{reply.job_id}", headers=signed)).text()
        assert f"<dd>{shown}</dd>" in page_ and (shown == NAME or NAME not in page_), page_[:3000]
        cluster_page = await (await tracked.http.get(f"/ui/clusters/{reply.cluster_id}", headers=signed)).text()
        assert f"owner {shown}" in cluster_page and (shown == NAME or NAME not in cluster_page), cluster_page[:3000]
        # the provisioners page's queues, each with its planner (it named the instance to everyone)
        queues = await (await tracked.http.get("/ui/provisioners", headers=signed)).text()
        assert f'<td class="mono">{shown}</td>' in queues and (shown == NAME or NAME not in queues), queues[-3000:]


async def test_a_large_jobs_page_and_stream_name_a_planner_to_a_tenants_people(tracked: Tracked, monkeypatch: pytest.MonkeyPatch) -> None:
    """A large job's page (docs/ui.md, "Large jobs") shows the timeline of its kept fold, shared by
    every viewer, and its stream sends that timeline's lines in batches: the tenant's people read
    the planner's instance name there (the fold kept for an operator), and operators read "a
    planner" (the fold kept for a person)."""
    from services.tracker.ui import folds, pages

    monkeypatch.setattr(pages, "BIG", 1)  # every job is a large one
    monkeypatch.setattr(folds, "BIG", 1)
    token = await _reader_token(tracked)
    viewers = ((os.environ["MUSTER_TOKEN"], NAME), (token, PLANNER))
    for order in (viewers, viewers[::-1]):  # the first viewer of a job has its fold kept
        reply = await _finished_job(tracked)
        for token_, shown in order:
            signed = {"Authorization": f"Bearer {token_}"}
            page_ = await (await tracked.http.get(f"/ui/jobs/{reply.job_id}", headers=signed)).text()
            assert 'data-testid="aggregate"' in page_ or '"big": true' in page_, page_[:2000]
            assert f"owner {shown}</span>" in page_ or f"owner {shown} <span" in page_, page_[page_.find("h-timeline"):][:1500]
            assert shown == NAME or NAME not in page_, page_[page_.find(NAME) - 300:page_.find(NAME) + 100]
            sent = await _sse(await tracked.http.get(f"/ui/jobs/{reply.job_id}/stream", params={"batch": "1"}, headers=signed))
            lines = [said["text"] for kind, data in sent if kind == "batch" for said in data["lines"]]
            assert any(t.endswith(f"owner {shown}") for t in lines), lines[:5]
            assert shown == NAME or NAME not in json.dumps(sent), json.dumps(sent)[:2000]
