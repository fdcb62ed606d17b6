"""The routing tables: every handler and answer they name exists, each event type reaches its
handler, and the request/reply answers keep their contracts (one answer per operation request,
even when the planner fails inside; queries answered only by a planner that has the job)."""

from __future__ import annotations

import json
from typing import Any

from planner_harness import Harness

from contracts import subjects
from contracts.commands import CreateCluster
from contracts.events import EVENT_TYPES
from services.planner.app import Planner
from services.planner.replies import Replies
from services.planner.routing import POISON, POOL_FOLD, QUEUE_RESETS, REPLIES, ROUTES, SHARD_REPLY, TIMERS
from services.planner.sharding import Sharding, shard_subject


def test_every_route_names_a_planner_handler_and_a_known_event() -> None:
    for route in ROUTES:
        for event_type, handler in route.handlers.items():
            assert event_type in EVENT_TYPES and callable(getattr(Planner, handler))
    taken = [t for r in ROUTES for t in r.handlers]
    assert len(taken) == len(set(taken)) and {r.durable for r in ROUTES} == {"planner-layouts", "planner-tasks"}


def test_every_other_input_names_a_handler_that_exists() -> None:
    for name in (POISON, POOL_FOLD, QUEUE_RESETS, *TIMERS.values()):
        assert callable(getattr(Planner, name)), name
    for reply in REPLIES:
        assert callable(getattr(Replies, reply.answer)), reply
    assert callable(getattr(Sharding, SHARD_REPLY.answer))
    assert SHARD_REPLY.subject.format(shard=7) == shard_subject(7)


async def test_every_timer_the_planner_arms_has_a_handler(h: Harness) -> None:
    h.behaviour = lambda m: "hold"
    await h.send(CreateCluster(name="t", template="hadoop-small", nodes=2))
    await h.settle()
    await h.planner.queue_lost()
    armed = {key[0] for key in h.planner.timers.handles}
    assert {"timeout", "requeue"} <= armed <= set(TIMERS)


async def test_an_operation_request_gets_one_answer(h: Harness) -> None:
    operation = Replies(h.planner).operation
    data = CreateCluster(name="r", template="hadoop-small", nodes=2).model_dump_json().encode()
    answer = json.loads(await operation("muster.ops.default.alice.create", data) or b"")
    assert answer["type"] == "Accepted"
    # The subject's principal (the server lets no one else use it) is the request's `by`,
    # whatever the body says.
    claimed = CreateCluster(name="r2", template="hadoop-small", nodes=2, requested_by="mallory").model_dump_json().encode()
    accepted = json.loads(await operation("muster.ops.default.alice.create", claimed) or b"")
    assert h.planner.jobs[accepted["job_id"]].requested_by == "alice"
    old_form = json.loads(await operation("muster.ops.default.create", data) or b"")
    assert old_form["type"] == "Rejected" and "not a request subject" in old_form["reason"]

    async def broken(ctx: Any) -> Any:
        raise RuntimeError("a bug")

    h.planner.handle = broken
    answer = json.loads(await operation("muster.ops.default.alice.create", data) or b"")
    assert answer["type"] == "Rejected" and "internal error" in answer["reason"]


async def test_queries_are_answered_by_the_owner_only(h: Harness) -> None:
    cid = await h.cluster_of(2)
    job_id = h.cluster(cid).job_id
    replies = Replies(h.planner)
    view = json.loads(await replies.job_query(f"muster.q.default.alice.job.{job_id}", b"") or b"")
    assert view["state"] == "succeeded" and view["owner"] == "planner-test"
    assert await replies.job_query(f"muster.q.other.alice.job.{job_id}", b"") is None
    body = json.loads(await replies.metrics(subjects.PLANNER_METRICS, b"") or b"")
    assert body["planner"] == "planner-test" and body["queues"][0]["finished"] > 10
    assert {r.queue for r in REPLIES} == {"", "planners"}


def test_every_request_that_names_a_job_is_routed_by_its_job() -> None:
    """Sharded planners send a request to the owner of its cluster; one that names a job (an
    approval too) is sent by the job's cluster, not answered wherever it lands."""
    from contracts.commands import JOB_VERBS

    assert JOB_VERBS == {"pause", "resume", "cancel", "retry", "approve", "reject"}
