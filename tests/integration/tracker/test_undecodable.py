"""A message on a tenant's log subject that is not a valid event (a raw client's publish, such
as an answer that landed there before services answered only on inboxes) is there for good:
every read of the tracker goes on past it, naming it (its seq and subject), rather than
failing with a 503 that says "try later". A NATS that is really gone is still a 503."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiohttp import ClientResponse

from contracts import subjects
from muster.bus.eventstore import EventStore
from services.tracker.app import Tracker
from services.tracker.http import TRACKER

from .test_cli import _finished_job, muster

pytestmark = pytest.mark.nats

Tracked = Any
RAW = b'{"job_id": "x", "answer": "accepted"}'
"""A body with no event type: what a raw client's reply on a log subject looks like."""


async def _sse(resp: ClientResponse, until: str = "end") -> list[tuple[str, dict[str, Any]]]:
    assert resp.status == 200, await resp.text()
    got: list[tuple[str, dict[str, Any]]] = []
    kind = ""
    async with asyncio.timeout(60):
        async for raw in resp.content:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                got.append((kind, json.loads(line[6:])))
                if kind == until:
                    break
    return got


async def test_every_read_goes_on_past_a_message_that_is_not_an_event_and_names_it(tracked: Tracked) -> None:
    reply = await _finished_job(tracked)
    subject = subjects.job_events("default", reply.job_id)
    bad = (await tracked.store.js.publish(subject, RAW)).seq  # the session's system principal, raw
    await tracked.stop_planner()  # the job's status is then folded from the log
    named = {"seq": bad, "subject": subject}

    for selection in ({"job": reply.job_id}, {"subject": ">"}, {"cluster": reply.cluster_id}):
        sent = await _sse(await tracked.http.get("/v1/events", params=selection))
        skipped = [data for kind, data in sent if kind == "skipped"]
        assert len(skipped) == 1 and skipped[0].items() >= named.items() and skipped[0]["reason"], (selection, skipped)
        assert sent[-1] == ("end", {"seq": bad}) and any(d.get("type") == "JobSucceeded" for _, d in sent), selection

    page = await (await tracked.http.get(f"/v1/jobs/{reply.job_id}/events", params={"after": bad - 1})).json()
    assert [(i["seq"], i["type"]) for i in page["items"]] == [(bad, "Undecodable")] and page["items"][0]["event"]["reason"]
    status = await tracked.http.get(f"/v1/jobs/{reply.job_id}")
    body = await status.json()
    assert status.status == 200 and body["state"] == "succeeded" and body["source"] == "log", body
    assert any(w.startswith(f"skipped #{bad} on {subject}: not a valid event") for w in body["warnings"]), body
    progress = await _sse(await tracked.http.get(f"/v1/jobs/{reply.job_id}/stream"))
    assert any(kind == "skipped" and data.items() >= named.items() for kind, data in progress), progress
    assert progress[-1][0] == "end" and progress[-1][1]["state"] == "succeeded", progress
    for path, params in ((f"/v1/jobs/{reply.job_id}/location", {}), ("/v1/replay", {"cluster": reply.cluster_id}),
                         (f"/ui/jobs/{reply.job_id}", {})):
        assert (await tracked.http.get(path, params=params)).status == 200, path

    # The commands read on, and say what they skipped on stderr.
    history = await muster("history", reply.job_id, "--nats-url", tracked.url)
    assert history.exit_code == 0 and "succeeded" in history.stdout, history.output
    assert f"warning: skipped #{bad} on {subject}: not a valid event" in history.output, history.output
    dumped = await muster("events", "--subject", f"job.{reply.job_id}", "--nats-url", tracked.url)
    assert dumped.exit_code == 0 and f"warning: skipped #{bad}" in dumped.output, dumped.output
    assert bad not in [json.loads(line)["seq"] for line in dumped.stdout.splitlines()], dumped.stdout

    # Live: one that lands while a reader follows is named too, and the follow goes on.
    async with tracked.http.get("/v1/events", params={"subject": f"job.{reply.job_id}", "follow": "true"}) as live:
        later = (await tracked.store.js.publish(subject, RAW)).seq
        followed = await _sse(live, until="skipped")
        while followed[-1][1]["seq"] != later:
            followed = await _sse(live, until="skipped")
        assert followed[-1][1]["subject"] == subject


async def test_a_nats_that_is_gone_is_still_a_503(tracked: Tracked) -> None:
    reply = await _finished_job(tracked)
    other = await tracked.another_tracker()
    tracker: Tracker = other.app[TRACKER]
    assert isinstance(tracker.store, EventStore) and tracker.store.lenient
    await tracker.store.nc.close()
    resp = await other.get(f"/v1/jobs/{reply.job_id}/events")
    assert resp.status == 503 and "NATS is unavailable" in (await resp.json())["error"]["message"]
