"""The routing tables: every handler they name exists, each event type reaches its handler,
and the request/reply answers keep their contracts (one answer per operation request, even when
the planner fails inside; queries answered only by a planner that has the job)."""

from __future__ import annotations

import json
from typing import Any

from planner_harness import Harness

from contracts import subjects
from contracts.commands import CreateCluster
from contracts.events import EVENT_TYPES
from services.planner.app import Planner
from services.planner.routing import REPLIES, ROUTES, job_query, metrics, operation


def test_every_route_names_a_planner_handler_and_a_known_event() -> None:
    for route in ROUTES:
        for event_type, handler in route.handlers.items():
            assert event_type in EVENT_TYPES and callable(getattr(Planner, handler))
    taken = [t for r in ROUTES for t in r.handlers]
    assert len(taken) == len(set(taken)) and {r.durable for r in ROUTES} == {"planner-layouts", "planner-tasks"}


async def test_an_operation_request_gets_one_answer(h: Harness) -> None:
    data = CreateCluster(name="r", template="hadoop-small", nodes=2).model_dump_json().encode()
    answer = json.loads(await operation(h.planner, "muster.ops.default.alice.create", data) or b"")
    assert answer["type"] == "Accepted"
    # The subject's principal (the server lets no one else use it) is the request's `by`,
    # whatever the body says.
    claimed = CreateCluster(name="r2", template="hadoop-small", nodes=2, requested_by="mallory").model_dump_json().encode()
    accepted = json.loads(await operation(h.planner, "muster.ops.default.alice.create", claimed) or b"")
    assert h.planner.jobs[accepted["job_id"]].requested_by == "alice"
    old_form = json.loads(await operation(h.planner, "muster.ops.default.create", data) or b"")
    assert old_form["type"] == "Rejected" and "not a request subject" in old_form["reason"]

    async def broken(ctx: Any) -> Any:
        raise RuntimeError("a bug")

    h.planner.handle = broken
    answer = json.loads(await operation(h.planner, "muster.ops.default.alice.create", data) or b"")
    assert answer["type"] == "Rejected" and "internal error" in answer["reason"]


async def test_queries_are_answered_by_the_owner_only(h: Harness) -> None:
    cid = await h.cluster_of(2)
    job_id = h.cluster(cid).job_id
    view = json.loads(await job_query(h.planner, f"muster.q.default.alice.job.{job_id}", b"") or b"")
    assert view["state"] == "succeeded" and view["owner"] == "planner-test"
    assert await job_query(h.planner, f"muster.q.other.alice.job.{job_id}", b"") is None
    body = json.loads(await metrics(h.planner, subjects.PLANNER_METRICS, b"") or b"")
    assert body["planner"] == "planner-test" and body["queues"][0]["finished"] > 10
    assert {r.queue for r in REPLIES} == {"", "planners"}
