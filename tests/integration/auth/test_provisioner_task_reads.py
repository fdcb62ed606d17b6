"""A provisioner reads no other provisioner's task events (docs/decisions/0058, item 5; docs/security.md).

A segment that comes to a provisioner again must not run a step twice, so it needs what the
log holds of its steps, which the provisioner lost mid-segment wrote under its own id. Its
first form gave every provisioner a consumer of its tenants' `muster.evt.<tenant>.task.>`
(every other provisioner's claims, outcomes and results), segments on or not. Now it asks the
planner acting for the job (`muster.q.<tenant>.<itself>.steps`), which reads the log and checks
the asker's queue grant (tests/unit/planner_service/test_step_reads.py): these are a raw nats-py
client's tries with a provisioner's own credentials, and every read is refused."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest_asyncio
from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from contracts import subjects
from contracts.events import TaskSucceeded
from contracts.records import Append
from muster.bus.eventstore import EventStore
from muster.bus.streams import ensure_streams
from muster.bus.wire import flush

from .conftest import Authed
from .refusals import let_through, raw_refused, refused
from .watched import WatchedClient

EVENTS, BODIES = subjects.EVENTS_STREAM, "BODIES"
HISTORY = subjects.task_history_filter("b", "j1", "n1.create")
"""Every claim and outcome of one task of tenant b, whichever provisioner wrote it."""
THEIRS = subjects.task_events("b", "j1", "n1.create", "p2")


@dataclass
class World:
    p1: Client
    system: Client
    violations: list[str]


@pytest_asyncio.fixture
async def world(authed: Authed) -> AsyncIterator[World]:
    tokens = await authed.people({p: {"role": "service", "service": "provisioner"} for p in ("p1", "p2")},
                                 (("p1", "execute", "queue:default"), ("p2", "execute", "queue:default")), tenant="b")
    system = await authed.raw(authed.system_token, "sys")
    await ensure_streams(system.jetstream())
    outcome = TaskSucceeded(job_id="j1", task_id="n1.create", attempt=1, provisioner="p2", worker="p2/w0",
                            result={"providerid": "vm-secret"})
    await EventStore(system).append(THEIRS, [Append(outcome, msg_id="j1.n1.create.1.outcome")])
    violations: list[str] = []

    async def on_error(err: Exception) -> None:
        violations.append(str(err).lower())

    p1 = await authed.raw(tokens["p1"], "p1", WatchedClient, error_cb=on_error)
    yield World(p1, system, violations)
    await p1.close()
    await system.close()


def _consumer(name: str, subject_filter: str) -> dict[str, object]:
    return {"stream_name": EVENTS, "config": {"name": name, "filter_subject": subject_filter, "deliver_policy": "all",
                                              "ack_policy": "none", "inactive_threshold": 10_000_000_000}}


async def test_a_provisioner_cannot_read_another_provisioners_task_events(world: World) -> None:
    nc, js = world.p1, world.p1.jetstream(timeout=2)
    create, direct = f"$JS.API.CONSUMER.CREATE.{EVENTS}", f"$JS.API.DIRECT.GET.{EVENTS}"
    attacks = {
        "a consumer of the task's history, its filter in the API subject": raw_refused(
            nc, f"{create}.spy.{HISTORY}", _consumer("spy", HISTORY)),
        "a consumer of the other's own subject": raw_refused(nc, f"{create}.spy2.{THEIRS}", _consumer("spy2", THEIRS)),
        "a consumer of every task of its tenant (the first segments' right)": raw_refused(
            nc, f"{create}.spy3.muster.evt.b.task.>", _consumer("spy3", "muster.evt.b.task.>")),
        "a consumer, its filter in the body": raw_refused(nc, create, _consumer("spy4", HISTORY)),
        "direct get of the other's subject": refused(js.get_last_msg(EVENTS, THEIRS, direct=True)),
        "batch direct get, a filter in the body": raw_refused(nc, direct, {"seq": 1, "batch": 10, "next_by_subj": HISTORY}),
        "message get of the other's subject": refused(js.get_last_msg(EVENTS, THEIRS)),
        "the bodies of the other's events": raw_refused(
            nc, f"$JS.API.DIRECT.GET.{BODIES}.{subjects.body_filter(THEIRS)}", {"seq": 1}),
    }
    assert await let_through(attacks) == []


async def _sent(world: World, subject: str) -> bool:
    """Whether the server let p1 send a request there (a refused publish is a violation)."""
    before = len(world.violations)
    try:
        await world.p1.request(subject, b"{}", timeout=0.5)
    except (NoRespondersError, NatsTimeout):
        pass
    await flush(world.p1)  # (nats-py runs the error callback of a violation before the flush's PONG)
    return not any("permissions violation" in v for v in world.violations[before:])


async def test_a_provisioner_asks_the_planner_in_its_own_name_and_its_tenants_only(world: World) -> None:
    assert await _sent(world, subjects.step_outcomes("b", "p1"))
    assert not await _sent(world, subjects.step_outcomes("b", "p2"))  # another's name
    assert not await _sent(world, subjects.step_outcomes("a", "p1"))  # a tenant it does not serve
