"""Attempts claimed late, on a real nats-server with a real planner, solver and provisioner: one
that waited in the queue gets its whole timeout from its claim (docs/decisions/0059); and one
the planner has ended (timed out while nobody claimed it) is never started by a provisioner
that takes its message late: its claim goes with a marker the attempt's close refuses (session
33). Found in session 32 on real processes (a provisioner paused with SIGSTOP while a start
waited, resumed 14 s later: attempts 1-3 of one task claimed and run at once, and the
rollback's delete beside them): docs/decisions/0059-an-attempt-s-timeout-counts-from-its-claim.md."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from typing import Any

import pytest

from contracts import subjects
from contracts.commands import Accepted, CreateCluster
from contracts.events import JobSucceeded

from .test_segment_step_fence import Stack, _stack

pytestmark = [pytest.mark.nats, pytest.mark.timeout(120)]

TIMEOUT_S = 2.0


@pytest.fixture
async def no_provisioner_yet(fresh_nats: str) -> AsyncIterator[Stack]:
    """A planner whose attempts time out after 2 s, and two attempts a task; quick creates."""
    async with AsyncExitStack() as exit_stack:
        yield await _stack(fresh_nats, exit_stack, 100, task_timeout_s=TIMEOUT_S, max_attempts=2)


@pytest.fixture
async def slow_creates(fresh_nats: str) -> AsyncIterator[Stack]:
    """Creates of 3 s, attempts that time out after 6 s, two attempts a task."""
    async with AsyncExitStack() as exit_stack:
        yield await _stack(fresh_nats, exit_stack, 3000, task_timeout_s=6.0, max_attempts=2)


async def test_a_create_that_waited_in_the_queue_runs_its_whole_timeout_from_its_claim(slow_creates: Stack) -> None:
    """The creates wait 4 s for a provisioner, then take 3 s: counted from the queueing (6 s),
    each timed out while it ran and was retried beside itself; counted from the claim, each
    first attempt succeeds."""
    stack = slow_creates
    created = await stack.client.send("default", CreateCluster(name="waited", template="hadoop-small", nodes=2))
    assert isinstance(created, Accepted)
    job = created.job_id
    await stack.first(subjects.job_tasks("default", job), lambda r: r.type == "TaskQueued")
    await asyncio.sleep(4.0)  # (the queue wait of the scenario: nobody serves the class yet)
    await stack.provisioner()
    final = await stack.client.wait(job, timeout=90)
    assert isinstance(final, JobSucceeded), final
    story = await stack.story(job)
    assert [r.event.task_id for r in story if r.type == "TaskAttemptFailed"] == []
    creates = {(r.event.task_id, r.event.attempt) for r in story if r.type == "TaskClaimed" and r.event.task_id.endswith(".create")}
    assert creates and {attempt for _, attempt in creates} == {1}


def _queued(task_id: str, attempt: int) -> Callable[[Any], bool]:
    return lambda r: r.type == "TaskQueued" and (r.event.task_id, r.event.attempt) == (task_id, attempt)


def _ended_at(story: list[Any]) -> dict[tuple[str, int], int]:
    """Each attempt the planner ended as timed out, and the log sequence of that end."""
    return {(r.event.task_id, r.event.attempt): r.seq for r in story
            if r.type == "TaskAttemptFailed" and r.event.state == "timed_out"}


async def test_an_attempt_that_timed_out_unclaimed_is_not_claimed_when_a_provisioner_comes_late(
        no_provisioner_yet: Stack) -> None:
    """No provisioner serves the class when the create is queued: each create's first attempt
    times out unclaimed and its retry is queued, both messages in the work queue. Then a
    provisioner starts. It must run the retries only: a claim of an attempt stored after the
    planner's end of it starts a second run of the task beside its retry (and beside the
    rollback's delete, when the retry fails)."""
    stack = no_provisioner_yet
    created = await stack.client.send("default", CreateCluster(name="late", template="hadoop-small", nodes=2))
    assert isinstance(created, Accepted)
    job = created.job_id
    tasks = subjects.job_tasks("default", job)
    first = await stack.first(tasks, lambda r: r.type == "TaskQueued" and r.event.task_id.endswith(".create"))
    creates = {r.event.task_id for r in await stack.story(job)
               if r.type == "TaskQueued" and r.event.task_id.endswith(".create")}
    assert first.event.task_id in creates
    for task_id in creates:  # every first attempt ended, and its retry queued, before anyone serves the class
        await stack.first(tasks, _queued(task_id, 2))
    story = await stack.story(job)
    ended = _ended_at(story)
    assert {(t, 1) for t in creates} <= set(ended)
    assert not [r for r in story if r.type == "TaskClaimed"]

    await stack.provisioner()
    await stack.client.wait(job, timeout=90)
    story = await stack.story(job)
    ended = _ended_at(story)
    late = [(r.event.task_id, r.event.attempt) for r in story if r.type == "TaskClaimed"
            and (r.event.task_id, r.event.attempt) in ended and r.seq > ended[(r.event.task_id, r.event.attempt)]]
    assert late == []
