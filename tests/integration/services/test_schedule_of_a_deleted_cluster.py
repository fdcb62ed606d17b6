"""A schedule whose cluster is deleted ends by itself, with the real planner, solver, provisioner,
tracker and governance service on a nats-server (docs/governance.md, "Scheduled operations").

`cleanup` deletes its cluster at its first tick; its later ticks are refused while the delete
runs (the cluster is busy: it goes on), then refused once the log says the cluster is deleted,
and that refusal ends it: recorded with the reason, shown by `muster schedule list` and the HTTP
API, no tick taken after it, none armed by a restarted governance service. A schedule refused
for another reason (`again`: the name it would create is taken) goes on firing. A schedule made
on the deleted cluster is refused at once.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from typing import Any

import pytest
import pytest_asyncio
from click.testing import Result

from contracts import subjects
from contracts.commands import CreateCluster
from muster.bus.connect import connect
from muster.bus.streams import ensure_streams
from services.governance.entrypoint import start_governance
from services.governance.scheduler import Scheduler
from tests import cli_in_process
from tests.integration.conftest import Webhook

pytestmark = [pytest.mark.nats, pytest.mark.timeout(180)]
Stack = Any
TIMEOUT_S = 60.0


class Governance:
    """The governance service on a connection of its own, which the test can stop and start again."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.exits = AsyncExitStack()

    async def start(self) -> Scheduler:
        nc = await connect(self.url, name="governance")
        self.exits.push_async_callback(nc.close)
        await ensure_streams(nc.jetstream())
        _, scheduler = await start_governance(nc, self.exits, "governance-test")
        return scheduler

    async def stop(self) -> None:
        await self.exits.aclose()
        self.exits = AsyncExitStack()


@pytest_asyncio.fixture
async def governance(stack: Stack) -> AsyncIterator[Governance]:
    running = Governance(stack.url)
    try:
        yield running
    finally:
        await running.stop()


async def muster(stack: Stack, *args: str) -> Result:
    """A `muster` command as typed, in this process (tests/cli_in_process.py)."""
    return await cli_in_process.ran(args, {**os.environ, "NATS_URL": stack.url}, TIMEOUT_S)


async def events_until(stack: Stack, name: str, done: Callable[[list[Any]], bool]) -> list[Any]:
    """The schedule's events once `done` holds of them (an ordered consumer from its first event)."""
    return await Webhook.until(stack.store, subjects.governance_events(stack.tenant, "schedule", name), done, TIMEOUT_S)


def answers(events: list[Any]) -> list[Any]:
    return [e for e in events if e.type == "ScheduleAnswered"]


async def test_a_schedule_ends_once_its_cluster_is_deleted_and_says_why(stack: Stack, governance: Governance) -> None:
    made = await stack.client.run(CreateCluster(name="scratch", template="hadoop-small", nodes=2), timeout=TIMEOUT_S)
    assert made.succeeded, made.reason
    await governance.start()
    for args in (("cleanup", "--", "cluster", "delete", "scratch"),
                 ("again", "--", "cluster", "create", "scratch2", "-t", "hadoop-small", "-n", "2")):
        created = await muster(stack, "schedule", "create", args[0], "--every", "1s", *args[1:])
        assert created.exit_code == 0, created.output

    events = await events_until(stack, "cleanup", lambda es: any(e.ended for e in answers(es)))
    first, *_, last = answers(events)
    assert first.job_id, first.rejected  # the tick that deleted the cluster
    assert last.job_id is None and "is deleted" in last.rejected
    assert last.ended == f"cluster scratch was deleted (job {first.job_id})"

    listed = (await muster(stack, "schedule", "list")).stdout.splitlines()
    row = next(line for line in listed if line.startswith("cleanup "))
    assert row.endswith(f"ended: {last.ended}"), row
    response = await stack.http.get("/v1/governance/schedules")
    by_name = {i["name"]: i for i in (await response.json())["items"]}
    assert (by_name["cleanup"]["ended"], by_name["cleanup"]["next_at"]) == (last.ended, None)
    assert by_name["again"]["ended"] == "" and by_name["again"]["next_at"]

    refused = await muster(stack, "schedule", "create", "check", "--every", "1s", "--", "cluster", "check", "scratch")
    assert refused.exit_code == 2, refused.output
    assert f"schedule 'check': {last.ended}: its operation could never run" in refused.stderr, refused.stderr

    # The end is in the log: a restarted governance service arms no timer for it, and takes no
    # tick of it while the other schedule, refused for another reason, goes on firing.
    await governance.stop()
    scheduler = await governance.start()
    assert (stack.tenant, "cleanup") not in scheduler.timers and scheduler.next_at(stack.tenant, "cleanup") is None
    before = len(answers([r.event for r in await stack.store.read(subjects.governance_events(stack.tenant, "schedule", "again"))]))
    again = await events_until(stack, "again", lambda es: len(answers(es)) >= before + 2)
    assert all(not e.ended for e in answers(again)) and "taken" in answers(again)[-1].rejected
    assert (await stack.store.read(subjects.governance_events(stack.tenant, "schedule", "cleanup")))[-1].event == last
